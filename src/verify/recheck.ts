/**
 * `requests verify`: re-checking stored requests against their bucket's current verify secrets,
 * the same for the CLI on a database and the admin API's POST /buckets/{name}/verify (which the
 * CLI calls with `--api`). Everything is checked before anything changes: the bucket (or every
 * named request, and each of their buckets) exists and verifies. Then the walk goes one
 * `requestBatch` at a time (at most 500 requests or 8 MiB of bodies), each batch's verdicts
 * stored in transactions of at most VERDICT_BATCH; the API does one batch per call and hands
 * back the cursor, so no call runs long, and the CLI shows progress between calls.
 */
import { extractDedupKey } from '../policy/dedup.js';
import { schemeText, secretKey, type VerifyScheme } from '../policy/verify.js';
import { AppError, bucketNotFound } from '../shared/errors.js';
import type { Bucket, RequestBatchCursor, RequestFilter, Store, StoredRequest, VerdictUpdate } from '../store/store.js';
import { verifyStored } from './verify-stream.js';

/** Updates per store call: each is one short transaction, so ingest never waits long. */
export const VERDICT_BATCH = 200;

/** What a run (or one step of it) did: `requests verify --json`. */
export interface VerifySummary {
  checked: number;
  verified: number;
  invalid: number;
  missing: number;
  expired: number;
  /** Quarantined requests accepted now, each with its first delivery when the bucket has a destination. */
  released: number;
  /** Quarantined requests that verify but repeat an event already accepted (its dedup key is held): no delivery. */
  duplicates: number;
}

export function emptySummary(): VerifySummary {
  return { checked: 0, verified: 0, invalid: 0, missing: 0, expired: 0, released: 0, duplicates: 0 };
}

export function addSummary(into: VerifySummary, more: VerifySummary): void {
  for (const k of Object.keys(into) as Array<keyof VerifySummary>) into[k] += more[k];
}

/** One bucket's part of a run: every request of `bucket` that matches `filter` (named ids are a filter too). */
export interface VerifyTarget {
  bucket: Bucket;
  filter: RequestFilter;
}

/** A bucket without --verify has nothing to check against: verify_not_configured (CLI exit 2, API 400). */
export function requireVerify(bucket: Bucket): NonNullable<Bucket['provider']['verify']> {
  const v = bucket.provider.verify;
  if (v === null) {
    throw new AppError(
      'verify_not_configured',
      `bucket ${bucket.name} does not verify senders: set a scheme and secret first (bucket update ${bucket.name} --verify <scheme> --verify-secret …)`,
    );
  }
  return v;
}

/** The bucket's scheme and HMAC keys, where the secrets are (the database's side, never the API client's). */
function verifyKeys(bucket: Bucket): { scheme: VerifyScheme; keys: Buffer[]; toleranceMs: number } {
  const v = requireVerify(bucket);
  return { scheme: v.scheme, keys: v.secrets.map((s) => secretKey(v.scheme, s)), toleranceMs: v.toleranceMs };
}

/** `--bucket <name> [filters]`: the bucket must exist and verify. */
export async function planBucket(reads: Pick<Store, 'getBucket'>, name: string, filter: RequestFilter): Promise<VerifyTarget> {
  const bucket = await reads.getBucket(name);
  if (!bucket) throw bucketNotFound(name);
  requireVerify(bucket);
  return { bucket, filter };
}

/**
 * `<id>…`: every id is looked up first, so an unknown one changes nothing (not_found, exit 4);
 * then each of their buckets must verify. One target per bucket, in the order first named.
 */
export async function planIds(reads: Pick<Store, 'getBucket' | 'getRequest'>, ids: readonly string[]): Promise<VerifyTarget[]> {
  const byBucket = new Map<string, string[]>();
  for (const id of new Set(ids)) {
    const r = await reads.getRequest(id);
    if (!r) throw new AppError('not_found', `request ${id} not found`);
    byBucket.set(r.bucket, [...(byBucket.get(r.bucket) ?? []), r.id]);
  }
  const targets: VerifyTarget[] = [];
  for (const [name, named] of byBucket) {
    const bucket = await reads.getBucket(name);
    if (!bucket) throw bucketNotFound(name);
    requireVerify(bucket);
    targets.push({ bucket, filter: { ids: named } });
  }
  return targets;
}

/** Named ids must all be requests of the bucket (the API's check: a filter alone would skip the others). */
export async function checkIdsInBucket(reads: Pick<Store, 'getRequest'>, bucket: string, ids: readonly string[]): Promise<void> {
  for (const id of new Set(ids)) {
    const r = await reads.getRequest(id);
    if (!r) throw new AppError('not_found', `request ${id} not found`);
    if (r.bucket !== bucket) throw new AppError('not_found', `request ${id} is not in bucket ${bucket} (it is in ${r.bucket})`);
  }
}

/** Checks requests over their exact stored bytes; the verdicts to store, and their counts. */
export function recheck(
  bucket: Bucket,
  requests: readonly StoredRequest[],
  release: boolean,
): { summary: VerifySummary; updates: VerdictUpdate[] } {
  const v = verifyKeys(bucket);
  const dedup = bucket.provider.dedup;
  const scheme = schemeText(v.scheme);
  const summary = emptySummary();
  const updates: VerdictUpdate[] = [];
  for (const r of requests) {
    // Measured from the request's arrival, as at ingest: a late re-check is not "expired" by itself.
    const verdict = verifyStored(v.scheme, v.keys, r.rawHeaders, r.body, r.receivedAt, v.toleranceMs);
    summary.checked++;
    summary[verdict.result]++;
    const update: VerdictUpdate = {
      id: r.id,
      verdict: { scheme: verdict.scheme, result: verdict.result, reason: verdict.reason },
      release,
    };
    // The key ingest would have registered had the request verified then (src/ingest/routes.ts):
    // ingest stores none for a quarantined request, so it is read from the stored bytes here.
    if (release && verdict.result === 'verified' && dedup !== null) {
      const key = extractDedupKey(dedup.key, scheme, r.rawHeaders, r.body);
      if (key !== null) update.dedup = { key, windowMs: dedup.windowMs };
    }
    updates.push(update);
  }
  return { summary, updates };
}

export interface VerifyStep {
  summary: VerifySummary;
  /** Pass back for the next step; null when the target is done. */
  next: string | null;
}

/**
 * One batch of a target: read (`reads`: in serve, the admin API's off-thread reader), check,
 * store the verdicts (`store`). `cursor` null starts the walk, which takes the requests stored
 * when it starts, oldest first; a verdict or release does not move it.
 */
export async function verifyStep(
  reads: Pick<Store, 'requestBatch'>,
  store: Pick<Store, 'applyVerdicts'>,
  target: VerifyTarget,
  cursor: string | null,
  options: { release: boolean; nowMs: number },
): Promise<VerifyStep> {
  const { bucket, filter } = target;
  const batch = await reads.requestBatch(bucket.name, filter, cursor === null ? null : parseVerifyCursor(cursor));
  const { summary, updates } = recheck(bucket, batch.requests, options.release);
  for (let i = 0; i < updates.length; i += VERDICT_BATCH) {
    const applied = await store.applyVerdicts(bucket.name, updates.slice(i, i + VERDICT_BATCH), options.nowMs);
    summary.released += applied.released.length;
    summary.duplicates += applied.duplicates.length;
  }
  return { summary, next: batch.next === null ? null : verifyCursor(batch.next) };
}

const ID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const CURSOR = new RegExp(`^(${ID})(?:\\.(${ID}))?$`);

/** A walk's position as the API hands it out: `<newest id>[.<last id looked at>]` (the walk has no limit). */
export function verifyCursor(c: RequestBatchCursor): string {
  return c.after === undefined ? c.newest : `${c.newest}.${c.after}`;
}

export function parseVerifyCursor(s: string): RequestBatchCursor {
  const m = CURSOR.exec(s);
  if (!m)
    throw new AppError('invalid_input', `cursor: not a verify cursor (pass back next_cursor as it is): ${JSON.stringify(s.slice(0, 100))}`);
  return m[2] === undefined ? { newest: m[1]! } : { newest: m[1]!, after: m[2] };
}

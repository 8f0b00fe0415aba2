import { Command } from 'commander';
import { extractDedupKey } from '../../policy/dedup.js';
import { schemeText, secretKey } from '../../policy/verify.js';
import { systemClock } from '../../shared/clock.js';
import { AppError } from '../../shared/errors.js';
import type { Bucket, Store, StoredRequest, VerdictUpdate } from '../../store/store.js';
import { verifyStored } from '../../verify/verify-stream.js';
import { isRemoteStore, remoteUnsupported } from '../../remote/remote-store.js';
import { withStore } from '../context.js';
import { addFilterOptions, filterFromOptions, type FilterOptions } from '../filter-options.js';
import { print, printJson, usage, type CliIo } from '../io.js';
import { bucketNameArg } from '../parsers.js';
import { createProgress } from '../progress.js';

/** Updates per store call: each is one short transaction, so ingest never waits long. */
const VERDICT_BATCH = 200;

interface VerifyOpts extends FilterOptions {
  bucket?: string;
  release?: boolean;
  json?: boolean;
}

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

/** The bucket's current verify settings, or exit 2: a bucket without --verify has nothing to check against. */
function verifyOf(bucket: Bucket) {
  const v = bucket.provider.verify;
  if (v === null) {
    throw new AppError(
      'verify_not_configured',
      `bucket ${bucket.name} does not verify senders: set a scheme and secret first (bucket update ${bucket.name} --verify <scheme> --verify-secret …)`,
    );
  }
  return { scheme: v.scheme, keys: v.secrets.map((s) => secretKey(v.scheme, s)), toleranceMs: v.toleranceMs };
}

/** Re-checks requests against their bucket's current secrets and stores the verdicts, in batches. */
async function run(
  io: CliIo,
  store: Store,
  bucket: Bucket,
  requests: AsyncIterable<StoredRequest>,
  total: number,
  release: boolean,
): Promise<VerifySummary> {
  const v = verifyOf(bucket);
  const dedup = bucket.provider.dedup;
  const scheme = schemeText(v.scheme);
  const summary = emptySummary();
  const progress = createProgress(io);
  let pending: VerdictUpdate[] = [];
  const flush = async () => {
    if (pending.length === 0) return;
    const applied = await store.applyVerdicts(bucket.name, pending, systemClock.now());
    summary.released += applied.released.length;
    summary.duplicates += applied.duplicates.length;
    pending = [];
  };
  try {
    for await (const r of requests) {
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
      pending.push(update);
      if (pending.length >= VERDICT_BATCH) await flush();
      progress.update(summary.checked, total, `${summary.checked}/${total} requests checked`);
    }
    await flush();
  } finally {
    progress.stop();
  }
  return summary;
}

export function makeRequestsVerifyCommand(io: CliIo): Command {
  return addFilterOptions(
    new Command('verify')
      .description("re-check stored requests against the bucket's current verify secrets and update their verdicts")
      .argument('[ids...]', 'request ids (or --bucket with filters)'),
  )
    .option('--bucket <name>', 'every request of this bucket matching the filters (oldest first)', bucketNameArg)
    .option('--release', 'quarantined requests that now verify become accepted and go on to delivery')
    .option('--json', 'print a JSON summary')
    .addHelpText(
      'after',
      `
The recovery path after fixing a mistyped secret: each request is checked over its exact stored
bytes with the bucket's current secrets (any one matching passes), the timestamp tolerance measured
from when it was received, and its stored verdict is replaced. With --release, a quarantined
request that now verifies is accepted and gets its first delivery (when the bucket has a
destination). Requests that still fail stay as they are; nothing is deleted.

On a bucket with --dedup, a released request is checked like one arriving at its received time:
if another request with its key was accepted meanwhile (the sender's retry, verified after the
fix), it becomes a duplicate of that one and is not delivered; otherwise it registers its key
until received time + --dedup-window. --json counts these as "duplicates", apart from "released".

Not available through --api yet: run it on the server's host with --db.

Exit codes: 0 it ran (even if some requests still fail), 2 usage or the bucket has no --verify
(verify_not_configured), 4 unknown bucket or request id, 1 other errors.

Examples:
  $ hookbucket bucket update stripe --verify-secret whsec_…
  $ hookbucket requests verify --bucket stripe --state quarantined --release
  $ hookbucket requests verify --bucket stripe --since 2h --json
  $ hookbucket requests verify 019ae0c4-… 019ae0c5-… --release`,
    )
    .action(async (ids: string[], opts: VerifyOpts, cmd: Command) => {
      if (ids.length > 0 && opts.bucket !== undefined) throw usage('give request ids or --bucket, not both');
      if (ids.length === 0 && opts.bucket === undefined) throw usage('give request ids or --bucket <name>');
      const filter = filterFromOptions(opts, systemClock.now());
      if (ids.length > 0 && Object.keys(filter).length > 0) throw usage('filters go with --bucket, not with request ids');
      await withStore(cmd, io, async (store) => {
        // Refused before reading anything: the admin API has no route to store verdicts yet.
        if (isRemoteStore(store)) throw remoteUnsupported('requests verify');
        const summary = emptySummary();
        if (opts.bucket !== undefined) {
          const bucket = await store.getBucket(opts.bucket);
          if (!bucket) throw new AppError('not_found', `bucket ${opts.bucket} not found`);
          verifyOf(bucket);
          const total = await store.countRequests(bucket.name, filter);
          add(summary, await run(io, store, bucket, store.iterateRequests(bucket.name, filter), total, opts.release === true));
        } else {
          // Every id is looked up first: an unknown one changes nothing (exit 4).
          const byBucket = new Map<string, StoredRequest[]>();
          for (const id of [...new Set(ids)]) {
            const r = await store.getRequest(id);
            if (!r) throw new AppError('not_found', `request ${id} not found`);
            byBucket.set(r.bucket, [...(byBucket.get(r.bucket) ?? []), r]);
          }
          const buckets: Bucket[] = [];
          for (const name of byBucket.keys()) {
            const bucket = await store.getBucket(name);
            if (!bucket) throw new AppError('not_found', `bucket ${name} not found`);
            verifyOf(bucket);
            buckets.push(bucket);
          }
          for (const bucket of buckets) {
            const list = byBucket.get(bucket.name)!;
            add(summary, await run(io, store, bucket, iterate(list), list.length, opts.release === true));
          }
        }
        if (opts.json) return printJson(io, summary);
        print(
          io,
          `checked ${summary.checked}: ${summary.verified} verified, ${summary.invalid} invalid, ${summary.missing} missing, ${summary.expired} expired` +
            (opts.release
              ? `; ${summary.released} released from quarantine, ${summary.duplicates} duplicate${summary.duplicates === 1 ? '' : 's'} (not delivered)`
              : ''),
        );
      });
    });
}

function emptySummary(): VerifySummary {
  return { checked: 0, verified: 0, invalid: 0, missing: 0, expired: 0, released: 0, duplicates: 0 };
}

async function* iterate<T>(items: readonly T[]): AsyncIterable<T> {
  yield* items;
}

function add(into: VerifySummary, more: VerifySummary): void {
  for (const k of Object.keys(into) as Array<keyof VerifySummary>) into[k] += more[k];
}

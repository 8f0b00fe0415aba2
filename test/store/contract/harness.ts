import assert from 'node:assert/strict';
import { afterEach, beforeEach } from 'node:test';
import { UUID } from 'uuidv7';
import { ManualClock } from '../../../src/shared/clock.js';
import type {
  AttemptResult,
  Bucket,
  CapturedRequest,
  ClaimedAttempt,
  ClaimPolicyState,
  ClaimResult,
  RequestFilter,
  Store,
  StoredRequest,
} from '../../../src/store/store.js';
import type { Dialect, StoreSet } from './dialects.js';

/**
 * What every contract test shares: a fresh store set per test, a manual clock, and builders for
 * captured requests and attempt results. Everything goes through the contract (Store, DrainStore,
 * IngestSink); nothing reads tables, so the same tests run on every dialect.
 */

/** The suite's (manual) now at the start of each test; before the real time, as ids made by the stores come from the real clock. */
export const T0 = Date.UTC(2026, 5, 1, 12);
export const LEASE_MS = 60_000;
export const DEST = 'http://127.0.0.1:9/in';

export interface Ctx {
  readonly set: StoreSet;
  readonly clock: ManualClock;
  readonly dialect: Dialect;
}

/** Opens a fresh store set before each test of the enclosing describe and closes it after. */
export function useStoreSet(dialect: Dialect): Ctx {
  let set: StoreSet | undefined;
  let clock = new ManualClock(T0);
  beforeEach(async () => {
    clock = new ManualClock(T0);
    set = await dialect.open({ clock });
  });
  afterEach(async () => {
    const s = set;
    set = undefined;
    await s?.close();
  });
  return {
    get set() {
      assert.ok(set, 'the store set is open only inside a test');
      return set;
    },
    get clock() {
      return clock;
    },
    dialect,
  };
}

let idSeq = 0;

/**
 * A UUIDv7 made at `ms`, as ingest makes ids from the same clock as received_at (the stores rely
 * on it to turn time bounds into id ranges). Ids made at the same ms sort in the order made.
 */
export function idAt(ms: number): string {
  idSeq = (idSeq + 1) % 0x4000_0000;
  // The sequence in the high random bits orders ids of one ms; the low 32 bits stay random.
  return UUID.fromFieldsV7(ms, 0, idSeq, Math.floor(Math.random() * 0x1_0000_0000)).toString();
}

export type Capture = Partial<Omit<CapturedRequest, 'body'>> & { body?: Buffer | string };

/** A captured request to `bucket`, received at `at`. */
export function captured(bucket: string, at: number, over: Capture = {}): CapturedRequest {
  const body = over.body === undefined ? Buffer.from('{"n":1}') : Buffer.isBuffer(over.body) ? over.body : Buffer.from(over.body);
  return {
    id: over.id ?? idAt(at),
    bucket,
    receivedAt: at,
    method: over.method ?? 'POST',
    path: over.path ?? '',
    query: over.query === undefined ? null : over.query,
    rawHeaders: over.rawHeaders ?? ['Content-Type', 'application/json'],
    body,
    peer: over.peer === undefined ? '127.0.0.1' : over.peer,
    ...(over.rawTrailers ? { rawTrailers: over.rawTrailers } : {}),
    ...(over.disposition ? { disposition: over.disposition } : {}),
    ...(over.verdict ? { verdict: over.verdict } : {}),
    ...(over.dedup ? { dedup: over.dedup } : {}),
  };
}

/** Submits every request at once (one group commit where the dialect batches) and waits for all. */
export async function submitAll(set: StoreSet, requests: CapturedRequest[], createDelivery = true): Promise<string[]> {
  await Promise.all(requests.map((r) => set.sink.submit(r, { createDelivery })));
  return requests.map((r) => r.id);
}

/** Stores `n` requests to `bucket` received 1 ms apart from `at` (with a delivery unless told). */
export async function ingestN(
  set: StoreSet,
  bucket: string,
  n: number,
  at: number,
  over: Capture = {},
  createDelivery = true,
): Promise<string[]> {
  return submitAll(
    set,
    Array.from({ length: n }, (_, i) => captured(bucket, at + i, over)),
    createDelivery,
  );
}

/** The bucket as the drain worker reads it. */
export async function drainBucket(set: StoreSet, name: string): Promise<Bucket> {
  const b = (await set.drain.listBuckets()).find((x) => x.name === name);
  assert.ok(b, `bucket ${name} in the drain store's list`);
  return b;
}

export const freshPolicy = (): ClaimPolicyState => ({});

/** Claims up to `limit` of the bucket's due deliveries at `nowMs` (the pacer state is the store's). */
export async function claim(
  set: StoreSet,
  bucket: string,
  nowMs: number,
  o: { limit?: number; leaseMs?: number; complete?: AttemptResult[]; policy?: ClaimPolicyState } = {},
): Promise<ClaimResult> {
  return set.drain.claim(
    await drainBucket(set, bucket),
    { nowMs, limit: o.limit ?? 100, leaseUntilMs: nowMs + (o.leaseMs ?? LEASE_MS), ...(o.complete ? { complete: o.complete } : {}) },
    o.policy ?? freshPolicy(),
  );
}

/** The attempt's result, finished at `at`: a response with `status`, settled by `outcome`. */
export function result(
  a: ClaimedAttempt,
  at: number,
  outcome: AttemptResult['outcome'],
  o: {
    status?: number | null;
    nextAttemptAt?: number | null;
    reason?: string;
    body?: Buffer;
    headers?: string[];
    errorClass?: string;
  } = {},
): AttemptResult {
  const status = o.status === undefined ? (outcome === 'delivered' ? 200 : outcome === 'released' ? null : 500) : o.status;
  return {
    attemptId: a.attemptId,
    deliveryId: a.deliveryId,
    finishedAt: at,
    durationMs: at - a.startedAt,
    status,
    errorClass: o.errorClass ?? null,
    errorMessage: o.errorClass ? `${o.errorClass}: test` : null,
    responseHeaders: status === null ? null : (o.headers ?? ['Content-Type', 'text/plain']),
    responseBody: status === null ? null : (o.body ?? Buffer.from(`answer ${status}`)),
    responseTruncated: false,
    outcome,
    reason: o.reason ?? (outcome === 'released' ? 'released_on_shutdown' : status === null ? 'test' : `http_${status}`),
    nextAttemptAt: o.nextAttemptAt === undefined ? (outcome === 'released' ? at : null) : o.nextAttemptAt,
    nextWhy: outcome === 'retry' ? 'schedule' : outcome === 'released' ? 'released' : null,
  };
}

/** Every page of a listing, newest first, `limit` at a time; checks the cursor ends with the last page. */
export async function allPages(store: Store, bucket: string, filter: RequestFilter, limit = 7): Promise<string[]> {
  const out: string[] = [];
  let before: string | undefined;
  for (let pages = 0; pages < 10_000; pages++) {
    const page = await store.listRequests(bucket, filter, { limit, ...(before ? { before } : {}) });
    assert.ok(page.requests.length <= limit);
    out.push(...page.requests.map((r) => r.id));
    if (page.nextCursor === null) return out;
    assert.equal(page.requests.length, limit, 'only the last page is short');
    assert.equal(page.nextCursor, page.requests.at(-1)!.id);
    before = page.nextCursor;
  }
  throw new Error('listing did not end');
}

export async function iterated(store: Store, bucket: string, filter: RequestFilter): Promise<StoredRequest[]> {
  const out: StoredRequest[] = [];
  for await (const r of store.iterateRequests(bucket, filter)) out.push(r);
  return out;
}

/** The state each request has, by id (getRequest). */
export async function statesOf(store: Store, ids: readonly string[]): Promise<string[]> {
  return Promise.all(ids.map(async (id) => (await store.getRequest(id))?.state ?? 'gone'));
}

export const sortIds = (ids: readonly string[]) => [...ids].sort();
export const newestFirst = (ids: readonly string[]) => [...ids].sort().reverse();

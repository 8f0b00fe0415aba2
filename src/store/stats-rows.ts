/**
 * Dialect-neutral folds of the raw figures behind `stats`, `health` and `bucket list`: each
 * dialect (sqlite/sqlite-stats.ts and sqlite-bucket-counts.ts, postgres/pg-stats.ts and
 * pg-bucket-counts.ts) reads the same rows with its own statements, and these turn them into the
 * contract's StatsSample and BucketCounts.
 */
import { deferralsOf } from './deferral-counts.js';
import type { BucketPacerTable, DeliveryState } from './schema.js';
import type { Bucket, BucketCounts, RequestState, StatsSample } from './store.js';

/** Ingest refusals of one bucket ('' when none was named) and reason. */
export type RejectionRow = { bucket: string; reason: string; count: number };

/** One bucket's counts from the per-bucket statement, with its oldest waiting id per state. */
export type StatsBucketRow = {
  bucket: string;
  requests: number;
  superseded: number;
  in_window: number;
  oldest_pending: string | null;
  oldest_retrying: string | null;
  oldest_delivering: string | null;
};

/** Latest deliveries of one bucket and state. */
export type LatestStateRow = { bucket: string; state: DeliveryState; n: number };
/** Deliveries of one bucket to its destination settled in the window, by how. */
export type SettledRow = { bucket: string; delivered: number; failed: number; exhausted: number };
/** Finished attempts of one bucket in the window with one duration (null: lease expired) and success (1: delivered). */
export type AttemptGroupRow = { bucket: string; ms: number | null; ok: number; n: number };

/** A bucket's pacer row's deferral counts (deferral-counts.ts). */
export type DeferralRow = { bucket: string } & Partial<
  Pick<BucketPacerTable, 'deferred_rate' | 'deferred_retry_budget' | 'deferred_retry_after' | 'deferred_replay_rate'>
>;

/** Requests of one bucket that are not accepted, by disposition. */
export type DispositionRow = { bucket: string; disposition: string; n: number };

/** What the stats statements read. */
export interface StatsRows {
  dispositions?: readonly DispositionRow[];
  perBucket: readonly StatsBucketRow[];
  latest: readonly LatestStateRow[];
  settled: readonly SettledRow[];
  attempts: readonly AttemptGroupRow[];
  rejections: readonly RejectionRow[];
  deferrals: readonly DeferralRow[];
}

/** The oldest of a bucket's oldest pending, retrying and delivering requests (ids sort by time). */
export function oldestWaitingId(r: StatsBucketRow | undefined): string | undefined {
  return [r?.oldest_pending ?? null, r?.oldest_retrying ?? null, r?.oldest_delivering ?? null]
    .filter((id): id is string => id !== null)
    .sort()[0];
}

/** Refusals by bucket, then by reason. */
function rejectionsByBucket(rows: readonly RejectionRow[]): Map<string, Record<string, number>> {
  const out = new Map<string, Record<string, number>>();
  for (const r of rows) {
    const m = out.get(r.bucket) ?? {};
    m[r.reason] = Number(r.count);
    out.set(r.bucket, m);
  }
  return out;
}

/**
 * One sample per bucket, in the order given. `receivedAt` gives the received_at of a bucket's
 * oldest waiting request (oldestWaitingId), undefined when it is gone.
 */
export function toStatsSamples(
  buckets: ReadonlyArray<Pick<Bucket, 'name' | 'paused'>>,
  rows: StatsRows,
  receivedAt: (id: string) => number | undefined,
): { buckets: StatsSample[]; unattributedRejections: Record<string, number> } {
  const perBucket = new Map(rows.perBucket.map((r) => [r.bucket, r]));
  const latest = new Map<string, Partial<Record<DeliveryState, number>>>();
  for (const r of rows.latest) {
    const m = latest.get(r.bucket) ?? {};
    m[r.state] = Number(r.n);
    latest.set(r.bucket, m);
  }
  const settled = new Map<string, { delivered: number; failed: number; exhausted: number }>();
  for (const r of rows.settled) {
    settled.set(r.bucket, { delivered: Number(r.delivered), failed: Number(r.failed), exhausted: Number(r.exhausted) });
  }
  const attempts = new Map<string, StatsSample['attempts']>();
  for (const r of rows.attempts) {
    const list = attempts.get(r.bucket) ?? [];
    list.push({ durationMs: r.ms === null ? null : Number(r.ms), delivered: Number(r.ok) === 1, count: Number(r.n) });
    attempts.set(r.bucket, list);
  }
  const rejected = rejectionsByBucket(rows.rejections);
  const deferred = new Map(rows.deferrals.map((r) => [r.bucket, deferralsOf(r)]));
  const dispositions = new Map<string, NonNullable<StatsSample['dispositions']>>();
  for (const r of rows.dispositions ?? []) {
    if (r.disposition !== 'quarantined' && r.disposition !== 'duplicate' && r.disposition !== 'handshake') continue;
    const m = dispositions.get(r.bucket) ?? {};
    m[r.disposition] = Number(r.n);
    dispositions.set(r.bucket, m);
  }
  const out: StatsSample[] = [];
  for (const b of buckets) {
    const r = perBucket.get(b.name);
    const id = oldestWaitingId(r);
    const oldestAt = id === undefined ? undefined : receivedAt(id);
    out.push({
      bucket: b.name,
      paused: b.paused,
      requests: Number(r?.requests ?? 0),
      latest: latest.get(b.name) ?? {},
      superseded: Number(r?.superseded ?? 0),
      oldestWaitingAt: oldestAt === undefined ? null : Number(oldestAt),
      receivedInWindow: Number(r?.in_window ?? 0),
      settled: settled.get(b.name) ?? { delivered: 0, failed: 0, exhausted: 0 },
      attempts: attempts.get(b.name) ?? [],
      rejected: rejected.get(b.name) ?? {},
      deferred: deferred.get(b.name) ?? {},
      dispositions: dispositions.get(b.name) ?? {},
    });
  }
  return { buckets: out, unattributedRejections: rejected.get('') ?? {} };
}

/** A bucket's requests and bytes stored, and its pause flag (1: paused). */
export type BucketTotalsRow = { name: string; paused: number; n: number; bytes: number };

/** Requests of one bucket whose latest delivery has one state. */
export type BucketStateRow = { bucket: string; state: RequestState; n: number };

/**
 * Counts per bucket, in the order of `totals`. `byState` counts the latest deliveries by bucket
 * and state; requests without one are `none`, and pending or retrying in a paused bucket `held`.
 * Rows of a bucket not in `totals` are left out.
 */
export function toBucketCounts(
  totals: readonly BucketTotalsRow[],
  byState: readonly BucketStateRow[],
  rejections: readonly RejectionRow[],
): Map<string, BucketCounts> {
  const out = new Map<string, BucketCounts>();
  const paused = new Map<string, boolean>();
  for (const r of totals) {
    out.set(r.name, { requests: Number(r.n), bytes: Number(r.bytes), states: {}, rejections: {} });
    paused.set(r.name, Number(r.paused) === 1);
  }
  const counted = new Map<string, number>();
  for (const r of byState) {
    const c = out.get(r.bucket);
    if (!c) continue;
    const state: RequestState = paused.get(r.bucket) && (r.state === 'pending' || r.state === 'retrying') ? 'held' : r.state;
    c.states[state] = (c.states[state] ?? 0) + Number(r.n);
    counted.set(r.bucket, (counted.get(r.bucket) ?? 0) + Number(r.n));
  }
  for (const [name, c] of out) {
    const none = c.requests - (counted.get(name) ?? 0);
    if (none > 0) c.states.none = none;
    c.states = Object.fromEntries(Object.entries(c.states).sort(([a], [b]) => (a < b ? -1 : 1)));
  }
  for (const r of rejections) {
    const c = out.get(r.bucket);
    if (c) c.rejections[r.reason] = Number(r.count);
  }
  return out;
}

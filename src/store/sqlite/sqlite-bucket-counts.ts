/**
 * Every bucket's request counts at once, for `bucket list`: three statements whatever the number
 * of buckets (it was four queries per bucket; 10,000 buckets took two minutes).
 *
 * - requests and bytes: one correlated count and sum per bucket, read from requests_bucket_id
 *   alone (it ends with size since migration 2026-12-03T05; test/store/sqlite/bucket-counts.test.ts);
 * - by state: a count over the partial index deliveries_latest_state (latest = 1: the delivery
 *   that gives a request its state), grouped by bucket and state; requests without one are `none`,
 *   and pending or retrying in a paused bucket are `held`: the same states as bucketCounts() gives;
 * - refusals: the whole (small) rejections table.
 */
import type { BucketCounts, RequestState } from '../store.js';
import type { SqliteDb } from './open.js';

/** Requests and bytes per bucket; both subqueries are answered by the covering index. */
export const BUCKET_TOTALS_SQL = `select b.name, b.paused, (select count(*) from requests r where r.bucket = b.name) as n,
    (select coalesce(sum(r.size), 0) from requests r where r.bucket = b.name) as bytes
  from buckets b`;

export function allBucketCounts(db: SqliteDb): Map<string, BucketCounts> {
  return db.transaction(() => {
    const out = new Map<string, BucketCounts>();
    const paused = new Map<string, boolean>();
    const totals = db.prepare(BUCKET_TOTALS_SQL);
    for (const r of totals.all() as Array<{ name: string; paused: number; n: number; bytes: number }>) {
      out.set(r.name, { requests: Number(r.n), bytes: Number(r.bytes), states: {}, rejections: {} });
      paused.set(r.name, Number(r.paused) === 1);
    }
    const byState = db.prepare(`select bucket, state, count(*) as n from deliveries where latest = 1 group by bucket, state`);
    const counted = new Map<string, number>();
    for (const r of byState.all() as Array<{ bucket: string; state: RequestState; n: number }>) {
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
    for (const r of db.prepare('select bucket, reason, count from rejections').all() as Array<{ bucket: string; reason: string; count: number }>) {
      const c = out.get(r.bucket);
      if (c) c.rejections[r.reason] = Number(r.count);
    }
    return out;
  })();
}

/**
 * Every bucket's request counts at once on PostgreSQL (`bucket list`): the twin of
 * ../sqlite/sqlite-bucket-counts.ts, three statements whatever the number of buckets, read in one
 * REPEATABLE READ snapshot so the totals and the states agree with each other.
 */
import { sql, type Kysely } from 'kysely';
import type { Database } from '../schema.js';
import type { BucketCounts, RequestState } from '../store.js';

/**
 * `only`: one bucket's counts (`bucket show`, `stats`), by the same three statements narrowed to
 * it. Not a state subquery per request: before the planner has statistics for freshly loaded
 * rows, that form walked the partial index per row (35 s for 28,572 requests, seen in the bench).
 */
export async function pgAllBucketCounts(db: Kysely<Database>, only?: string): Promise<Map<string, BucketCounts>> {
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .execute(async (trx) => {
      const out = new Map<string, BucketCounts>();
      const paused = new Map<string, boolean>();
      // Both subqueries are index-only scans of requests_bucket_id (bucket, id, size).
      const totals = await sql<{ name: string; paused: number; n: number; bytes: number }>`
        select b.name, b.paused, (select count(*) from requests r where r.bucket = b.name) as n,
          (select coalesce(sum(r.size), 0) from requests r where r.bucket = b.name) as bytes
        from buckets b ${only === undefined ? sql`` : sql`where b.name = ${only}`} order by b.name`.execute(trx);
      for (const r of totals.rows) {
        out.set(r.name, { requests: Number(r.n), bytes: Number(r.bytes), states: {}, rejections: {} });
        paused.set(r.name, Number(r.paused) === 1);
      }
      const byState = await sql<{ bucket: string; state: RequestState; n: number }>`
        select bucket, state, count(*) as n from deliveries where latest = 1 ${only === undefined ? sql`` : sql`and bucket = ${only}`}
        group by bucket, state`.execute(trx);
      const counted = new Map<string, number>();
      for (const r of byState.rows) {
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
      const rejections = await sql<{ bucket: string; reason: string; count: number }>`
        select bucket, reason, count from rejections ${only === undefined ? sql`` : sql`where bucket = ${only}`}`.execute(trx);
      for (const r of rejections.rows) {
        const c = out.get(r.bucket);
        if (c) c.rejections[r.reason] = Number(r.count);
      }
      return out;
    });
}

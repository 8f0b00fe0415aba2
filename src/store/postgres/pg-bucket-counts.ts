/**
 * Every bucket's request counts at once on PostgreSQL (`bucket list`): the twin of
 * ../sqlite/sqlite-bucket-counts.ts, three statements whatever the number of buckets, read in one
 * REPEATABLE READ snapshot (requests that are not accepted count under their disposition, from the
 * partial index requests_by_disposition) so the totals and the states agree with each other.
 */
import { sql, type Kysely } from 'kysely';
import type { Database } from '../schema.js';
import type { BucketCounts } from '../store.js';
import { toBucketCounts, type BucketStateRow, type BucketTotalsRow, type RejectionRow } from '../stats-rows.js';

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
      // Both subqueries are index-only scans of requests_bucket_id (bucket, id, size).
      const totals = await sql<BucketTotalsRow>`
        select b.name, b.paused, (select count(*) from requests r where r.bucket = b.name) as n,
          (select coalesce(sum(r.size), 0) from requests r where r.bucket = b.name) as bytes
        from buckets b ${only === undefined ? sql`` : sql`where b.name = ${only}`} order by b.name`.execute(trx);
      const byState = await sql<BucketStateRow>`
        select bucket, state, count(*) as n from deliveries where latest = 1 ${only === undefined ? sql`` : sql`and bucket = ${only}`}
        group by bucket, state
        union all
        select bucket, disposition as state, count(*) as n from requests
        where disposition <> 'accepted' ${only === undefined ? sql`` : sql`and bucket = ${only}`}
        group by bucket, disposition`.execute(trx);
      const rejections = await sql<RejectionRow>`
        select bucket, reason, count from rejections ${only === undefined ? sql`` : sql`where bucket = ${only}`}`.execute(trx);
      return toBucketCounts(totals.rows, byState.rows, rejections.rows);
    });
}

/**
 * Every bucket's request counts at once, for `bucket list`: three statements whatever the number
 * of buckets (it was four queries per bucket; 10,000 buckets took two minutes).
 *
 * - requests and bytes: one correlated count and sum per bucket, read from requests_bucket_id
 *   alone (it ends with size since migration 2026-12-03T05; test/store/sqlite/bucket-counts.test.ts);
 * - by state: a count over the partial index deliveries_latest_state (latest = 1: the delivery
 *   that gives a request its state), grouped by bucket and state; requests without one are `none`,
 *   and pending or retrying in a paused bucket are `held`: the same states as bucketCounts() gives;
 * - not accepted: requests_by_disposition counted by bucket and disposition (their state);
 * - refusals: the whole (small) rejections table.
 */
import type { BucketCounts } from '../store.js';
import { toBucketCounts, type BucketStateRow, type BucketTotalsRow, type RejectionRow } from '../stats-rows.js';
import type { SqliteDb } from './open.js';

/** Requests and bytes per bucket; both subqueries are answered by the covering index. */
export const BUCKET_TOTALS_SQL = `select b.name, b.paused, (select count(*) from requests r where r.bucket = b.name) as n,
    (select coalesce(sum(r.size), 0) from requests r where r.bucket = b.name) as bytes
  from buckets b`;

const LATEST_STATES_SQL = 'select bucket, state, count(*) as n from deliveries where latest = 1 group by bucket, state';
/**
 * Requests that are not accepted (quarantined, duplicate, handshake) by bucket: their state is
 * their disposition, read from the partial index requests_by_disposition. They have no delivery.
 */
export const DISPOSITIONS_SQL = `select bucket, disposition as state, count(*) as n from requests
  where disposition <> 'accepted' group by bucket, disposition`;

export function allBucketCounts(db: SqliteDb): Map<string, BucketCounts> {
  return db.transaction(() =>
    toBucketCounts(
      db.prepare(BUCKET_TOTALS_SQL).all() as BucketTotalsRow[],
      db.prepare(`${LATEST_STATES_SQL} union all ${DISPOSITIONS_SQL}`).all() as BucketStateRow[],
      db.prepare('select bucket, reason, count from rejections').all() as RejectionRow[],
    ),
  )();
}

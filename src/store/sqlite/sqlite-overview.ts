/**
 * The bucket overview on SQLite (Store.bucketOverview): one statement for a page of buckets. The
 * page is a range of the buckets' primary key; every figure is a correlated subquery over that
 * page's buckets only, each one index range, the same indexes as sqlite-stats.ts and
 * sqlite-bucket-counts.ts use:
 * - requests and bytes: requests_bucket_id (bucket, id, size), index only;
 * - by state: the partial index deliveries_latest_state (latest = 1);
 * - oldest waiting: min(request_id) per waiting state from the same index, then its received_at;
 * - arrivals per window (integer window numbers: a bound JS number may arrive as a REAL): an id range of requests_bucket_id (ids are time-ordered) checked against
 *   received_at; deliveries per window: deliveries_settled (bucket, settled_at, …).
 */
import { idFloorAt } from '../../shared/ids.js';
import { toOverviewPage, type OverviewRowIn } from '../overview-rows.js';
import type { BucketOverviewPage, BucketOverviewQuery } from '../store.js';
import type { SqliteDb } from './open.js';

/** An id is made at capture and its row may commit a little later: look this much further back in id order. */
const ID_SLACK_MS = 60_000; // 1m

export const OVERVIEW_SQL = `with page as (select * from buckets where name > @after order by name limit @limit)
select t.total_buckets, p.*,
  (select count(*) from requests r where r.bucket = p.name) as n,
  (select coalesce(sum(r.size), 0) from requests r where r.bucket = p.name) as bytes,
  (select json_group_array(json_array(s.state, s.n)) from
    (select d.state, count(*) as n from deliveries d where d.latest = 1 and d.bucket = p.name group by d.state
     union all select r.disposition, count(*) from requests r where r.bucket = p.name and r.disposition <> 'accepted'
     group by r.disposition) s) as states,
  (select json_group_array(json_array(x.reason, x.count)) from rejections x where x.bucket = p.name) as rejections,
  (select r.received_at from requests r where r.id = (select min(w.id) from (
    select (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = p.name and d.state = 'pending') as id
    union all select (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = p.name and d.state = 'retrying')
    union all select (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = p.name and d.state = 'delivering')) w))
    as oldest_waiting_at,
  (select json_group_array(json_array(a.bin, a.n)) from
    (select cast((r.received_at - @since) / @bin as integer) as bin, count(*) as n from requests r
     where r.bucket = p.name and r.id >= @idFloor and r.received_at >= @since and r.received_at < @until group by bin) a) as arrivals,
  (select json_group_array(json_array(a.bin, a.n)) from
    (select cast((d.settled_at - @since) / @bin as integer) as bin, count(*) as n from deliveries d
     where d.bucket = p.name and d.destination is null and d.state = 'delivered' and d.settled_at >= @since and d.settled_at < @until
     group by bin) a) as delivered
from (select count(*) as total_buckets from buckets) t left join page p
order by p.name`;

export function bucketOverview(db: SqliteDb, q: BucketOverviewQuery): BucketOverviewPage {
  const until = q.sinceMs + Math.max(0, q.bins) * q.binMs;
  const rows = db.prepare(OVERVIEW_SQL).all({
    after: q.after ?? '',
    limit: q.limit + 1,
    since: q.sinceMs,
    until,
    bin: Math.max(1, q.binMs),
    idFloor: idFloorAt(q.sinceMs - ID_SLACK_MS),
  }) as OverviewRowIn[];
  return toOverviewPage(rows, q);
}

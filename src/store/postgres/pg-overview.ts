/**
 * The bucket overview on PostgreSQL (Store.bucketOverview): the twin of ../sqlite/sqlite-overview.ts,
 * one statement for a page of buckets in byte order (collate "C", as SQLite lists them), every
 * figure a correlated subquery over the page's buckets only, from the same indexes.
 */
import { sql, type Kysely } from 'kysely';
import { idFloorAt } from '../../shared/ids.js';
import { toOverviewPage, type OverviewRowIn } from '../overview-rows.js';
import type { Database } from '../schema.js';
import type { BucketOverviewPage, BucketOverviewQuery } from '../store.js';

/** Same slack as SQLite: an id is made at capture, its row may commit a little later. */
const ID_SLACK_MS = 60_000; // 1m

export async function pgBucketOverview(db: Kysely<Database>, q: BucketOverviewQuery): Promise<BucketOverviewPage> {
  const since = q.sinceMs;
  const until = q.sinceMs + Math.max(0, q.bins) * q.binMs;
  const bin = Math.max(1, q.binMs);
  const idFloor = idFloorAt(q.sinceMs - ID_SLACK_MS);
  const { rows } = await sql<OverviewRowIn>`
    with page as (select * from buckets where name collate "C" > ${q.after ?? ''} order by name collate "C" limit ${q.limit + 1})
    select t.total_buckets, p.*,
      (select count(*) from requests r where r.bucket = p.name) as n,
      (select coalesce(sum(r.size), 0) from requests r where r.bucket = p.name) as bytes,
      (select coalesce(json_agg(json_build_array(s.state, s.n)), '[]'::json) from
        (select d.state, count(*) as n from deliveries d where d.latest = 1 and d.bucket = p.name group by d.state
         union all select r.disposition, count(*) from requests r where r.bucket = p.name and r.disposition <> 'accepted'
         group by r.disposition) s) as states,
      (select coalesce(json_agg(json_build_array(x.reason, x.count)), '[]'::json) from rejections x where x.bucket = p.name) as rejections,
      (select r.received_at from requests r where r.id = least(
        (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = p.name and d.state = 'pending'),
        (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = p.name and d.state = 'retrying'),
        (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = p.name and d.state = 'delivering'))) as oldest_waiting_at,
      (select coalesce(json_agg(json_build_array(a.bin, a.n)), '[]'::json) from
        (select (r.received_at - ${since}::bigint) / ${bin}::bigint as bin, count(*) as n from requests r
         where r.bucket = p.name and r.id >= ${idFloor} and r.received_at >= ${since}::bigint and r.received_at < ${until}::bigint
         group by 1) a) as arrivals,
      (select coalesce(json_agg(json_build_array(a.bin, a.n)), '[]'::json) from
        (select (d.settled_at - ${since}::bigint) / ${bin}::bigint as bin, count(*) as n from deliveries d
         where d.bucket = p.name and d.destination is null and d.state = 'delivered'
           and d.settled_at >= ${since}::bigint and d.settled_at < ${until}::bigint
         group by 1) a) as delivered
    from (select count(*) as total_buckets from buckets) t left join page p on true
    order by p.name collate "C"`.execute(db);
  return toOverviewPage(rows, q);
}

/**
 * Raw per-bucket figures for `stats` and `health` on SQLite; src/stats/stats.ts derives the fields.
 * Each query is an index range or an index-only count, so a large database answers quickly:
 *
 * - requests stored: a count over requests_bucket_id;
 * - requests by state: a count over the partial index deliveries_latest_state (latest = 1), so no
 *   correlated subquery per request; requests without a latest delivery are the difference;
 * - oldest waiting: min(request_id) per waiting state from the same index (ids are time-ordered),
 *   then that one request's received_at;
 * - received in the window: an id range (ids are time-ordered) checked against received_at;
 * - settled in the window: deliveries_settled (bucket, settled_at, state, destination), partial on
 *   the bucket destination, read alone;
 * - attempts in the window: attempts_bucket_started (bucket, started_at), grouped by duration so
 *   the percentiles come from a histogram rather than every row.
 */
import { idFloorAt } from '../../shared/ids.js';
import type { Bucket, StatsQuery, StatsSample } from '../store.js';
import {
  toStatsSamples,
  type AttemptGroupRow,
  type DeferralRow,
  type DispositionRow,
  type LatestStateRow,
  type RejectionRow,
  type SettledRow,
  type StatsBucketRow,
} from '../stats-rows.js';
import type { SqliteDb } from './open.js';

/**
 * An id and its received_at come from the same moment at capture, but a request can be committed
 * a little after its id was made; look this much further back in the id order, then filter by
 * received_at.
 */
const ID_SLACK_MS = 60_000; // 1m

export function statsSamples(
  db: SqliteDb,
  buckets: ReadonlyArray<Pick<Bucket, 'name' | 'paused'>>,
  q: StatsQuery,
): { buckets: StatsSample[]; unattributedRejections: Record<string, number> } {
  // Five statements whatever the number of buckets, not nine per bucket (10,000 buckets took
  // 90,000 round trips). The bucket set comes in as a JSON array, walked as the outer loop (CROSS
  // JOIN keeps it there), so each figure is still one index range per bucket, inside SQLite.
  const s = {
    perBucket: db.prepare(
      `select j.value as bucket,
         (select count(*) from requests r where r.bucket = j.value) as requests,
         (select count(*) from deliveries d where d.bucket = j.value and d.state = 'superseded') as superseded,
         (select count(*) from requests r where r.bucket = j.value and r.id >= @idFloor and r.received_at >= @since and r.received_at < @until) as in_window,
         (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = j.value and d.state = 'pending') as oldest_pending,
         (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = j.value and d.state = 'retrying') as oldest_retrying,
         (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = j.value and d.state = 'delivering') as oldest_delivering
       from json_each(@names) j`,
    ),
    latest: db.prepare(
      `select d.bucket, d.state, count(*) as n from json_each(@names) j cross join deliveries d
       where d.bucket = j.value and d.latest = 1 group by d.bucket, d.state`,
    ),
    receivedAt: db.prepare('select received_at from requests where id = ?').pluck(),
    settled: db.prepare(
      `select d.bucket, coalesce(sum(d.state = 'delivered'), 0) as delivered, coalesce(sum(d.state = 'failed'), 0) as failed,
         coalesce(sum(d.state = 'exhausted'), 0) as exhausted
       from json_each(@names) j cross join deliveries d
       where d.bucket = j.value and d.destination is null and d.settled_at >= @since and d.settled_at < @until
       group by d.bucket`,
    ),
    attempts: db.prepare(
      `select a.bucket, a.duration_ms as ms, a.outcome = 'delivered' as ok, count(*) as n
       from json_each(@names) j cross join attempts a join deliveries d on d.id = a.delivery_id
       where a.bucket = j.value and a.started_at >= @since and a.started_at < @until and a.outcome is not null and a.outcome != 'released'
         and d.destination is null
       group by a.bucket, a.duration_ms, a.outcome = 'delivered'`,
    ),
    rejections: db.prepare('select bucket, reason, count from rejections'),
    // requests_by_disposition: the requests that are not accepted, by bucket and disposition.
    dispositions: db.prepare(
      `select r.bucket, r.disposition, count(*) as n from json_each(@names) j cross join requests r
       where r.bucket = j.value and r.disposition <> 'accepted' group by r.bucket, r.disposition`,
    ),
    deferrals: db.prepare(
      `select p.bucket, p.deferred_rate, p.deferred_retry_budget, p.deferred_retry_after, p.deferred_replay_rate
       from json_each(@names) j cross join bucket_pacer p where p.bucket = j.value`,
    ),
  };
  const names = JSON.stringify(buckets.map((b) => b.name));
  const window = { names, since: q.sinceMs, until: q.untilMs };
  const idFloor = idFloorAt(q.sinceMs - ID_SLACK_MS);
  // One read transaction: every figure from the same snapshot.
  return db.transaction(() =>
    toStatsSamples(
      buckets,
      {
        perBucket: s.perBucket.all({ names, idFloor, since: q.sinceMs, until: q.untilMs }) as StatsBucketRow[],
        latest: s.latest.all({ names }) as LatestStateRow[],
        settled: s.settled.all(window) as SettledRow[],
        attempts: s.attempts.all(window) as AttemptGroupRow[],
        rejections: s.rejections.all() as RejectionRow[],
        deferrals: s.deferrals.all({ names }) as DeferralRow[],
        dispositions: s.dispositions.all({ names }) as DispositionRow[],
      },
      (id) => s.receivedAt.get(id) as number | undefined,
    ),
  )();
}

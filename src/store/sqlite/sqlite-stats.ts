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
import type { DeliveryState } from '../schema.js';
import type { Bucket, StatsQuery, StatsSample } from '../store.js';
import type { SqliteDb } from './open.js';

/**
 * An id and its received_at come from the same moment at capture, but a request can be committed
 * a little after its id was made; look this much further back in the id order, then filter by
 * received_at.
 */
const ID_SLACK_MS = 60_000; // 1m

export function statsSamples(
  db: SqliteDb,
  buckets: readonly Bucket[],
  q: StatsQuery,
): { buckets: StatsSample[]; unattributedRejections: Record<string, number> } {
  const s = {
    requests: db.prepare('select count(*) from requests where bucket = ?').pluck(),
    latest: db.prepare('select state, count(*) as n from deliveries where latest = 1 and bucket = ? group by state'),
    superseded: db.prepare(`select count(*) from deliveries where bucket = ? and state = 'superseded'`).pluck(),
    oldestId: db.prepare('select min(request_id) from deliveries where latest = 1 and bucket = ? and state = ?').pluck(),
    receivedAt: db.prepare('select received_at from requests where id = ?').pluck(),
    inWindow: db.prepare('select count(*) from requests where bucket = ? and id >= ? and received_at >= ? and received_at < ?').pluck(),
    settled: db.prepare(
      `select coalesce(sum(state = 'delivered'), 0) as delivered, coalesce(sum(state = 'failed'), 0) as failed,
         coalesce(sum(state = 'exhausted'), 0) as exhausted
       from deliveries where bucket = ? and destination is null and settled_at >= ? and settled_at < ?`,
    ),
    attempts: db.prepare(
      `select a.duration_ms as ms, a.outcome = 'delivered' as ok, count(*) as n
       from attempts a join deliveries d on d.id = a.delivery_id
       where a.bucket = ? and a.started_at >= ? and a.started_at < ? and a.outcome is not null and a.outcome != 'released'
         and d.destination is null
       group by a.duration_ms, a.outcome = 'delivered'`,
    ),
    rejections: db.prepare('select reason, count from rejections where bucket = ?'),
  };
  const idFloor = idFloorAt(q.sinceMs - ID_SLACK_MS);
  // One read transaction: every figure from the same snapshot.
  return db.transaction(() => {
    const out: StatsSample[] = [];
    for (const b of buckets) {
      const latest: Partial<Record<DeliveryState, number>> = {};
      for (const r of s.latest.all(b.name) as Array<{ state: DeliveryState; n: number }>) latest[r.state] = Number(r.n);
      const ids = (['pending', 'retrying', 'delivering'] as const)
        .map((state) => s.oldestId.get(b.name, state) as string | null)
        .filter((id): id is string => id !== null)
        .sort();
      const oldestAt = ids.length > 0 ? (s.receivedAt.get(ids[0]) as number | undefined) : undefined;
      const st = s.settled.get(b.name, q.sinceMs, q.untilMs) as { delivered: number; failed: number; exhausted: number };
      const settled = { delivered: Number(st.delivered), failed: Number(st.failed), exhausted: Number(st.exhausted) };
      const attempts = (s.attempts.all(b.name, q.sinceMs, q.untilMs) as Array<{ ms: number | null; ok: number; n: number }>).map((r) => ({
        durationMs: r.ms === null ? null : Number(r.ms),
        delivered: Number(r.ok) === 1,
        count: Number(r.n),
      }));
      out.push({
        bucket: b.name,
        paused: b.paused,
        requests: Number(s.requests.get(b.name)),
        latest,
        superseded: Number(s.superseded.get(b.name)),
        oldestWaitingAt: oldestAt === undefined ? null : Number(oldestAt),
        receivedInWindow: Number(s.inWindow.get(b.name, idFloor, q.sinceMs, q.untilMs)),
        settled,
        attempts,
        rejected: rejectionsOf(s.rejections.all(b.name)),
      });
    }
    return { buckets: out, unattributedRejections: rejectionsOf(s.rejections.all('')) };
  })();
}

function rejectionsOf(rows: unknown[]): Record<string, number> {
  return Object.fromEntries((rows as Array<{ reason: string; count: number }>).map((r) => [r.reason, Number(r.count)]));
}

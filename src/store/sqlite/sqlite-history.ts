/**
 * What happened to a request: its deliveries (every generation and destination) with their
 * attempts, and the live feed behind `requests tail`. Read-only queries on the CLI's connection.
 */
import { idTimeMs } from '../../shared/ids.js';
import type { SqliteDb } from './open.js';
import type { AttemptsTable, DeliveriesTable } from '../schema.js';
import type { DeliveryHistory, TailAttemptsPage, TailCursor, TailEvent } from '../store.js';
import { TAIL_READ_REQUESTS } from '../tail-since.js';
import { attemptEvent, tailAttemptWindow, toDeliveryHistory, toListed, type ListedRow } from '../request-rows.js';

export function requestHistory(db: SqliteDb, requestId: string): DeliveryHistory[] {
  const deliveries = db
    .prepare('select * from deliveries where request_id = ? order by generation, created_at')
    .all(requestId) as DeliveriesTable[];
  const attempts = db.prepare('select * from attempts where request_id = ? order by started_at, number').all(requestId) as AttemptsTable[];
  return toDeliveryHistory(deliveries, attempts);
}

/**
 * The feed behind `requests tail`, for one bucket or several in the same three queries (the admin
 * API's poller follows every bucket at once). `paused` names the paused buckets among them.
 */
export function tail(
  db: SqliteDb,
  buckets: readonly string[],
  cursor: TailCursor,
  nowMs: number,
  paused: ReadonlySet<string>,
): { events: TailEvent[]; cursor: TailCursor } {
  const events: TailEvent[] = [];
  const names = JSON.stringify(buckets);
  // `in (json_each)`: one range of requests_bucket_id (and of attempts_bucket_started) per bucket.
  const requests = db
    .prepare(
      `select r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, r.disposition, r.verify_scheme, r.verify_result, r.verify_reason,
        d.state, d.attempts, d.last_status, d.generation
       from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 and d.destination is null
       where r.bucket in (select value from json_each(?)) and r.id > ? order by r.id limit ${TAIL_READ_REQUESTS}`,
    )
    .all(names, cursor.requestId) as ListedRow[];
  let lastRequest = cursor.requestId;
  for (const r of requests) {
    lastRequest = r.id;
    events.push({ kind: 'request', at: Number(r.received_at), request: toListed(r, paused.has(r.bucket)) });
  }
  const { startedFrom, finishedFrom } = tailAttemptWindow(cursor, nowMs);
  const seen = new Set(cursor.seen.filter((id) => idTimeMs(id) >= startedFrom));
  const attempts = db
    .prepare(
      `select a.*, d.generation from attempts a join deliveries d on d.id = a.delivery_id
       where a.bucket in (select value from json_each(?)) and a.started_at >= ? and a.outcome is not null
         and a.started_at + coalesce(a.duration_ms, 0) >= ?
       order by a.started_at, a.id`,
    )
    .all(names, startedFrom, finishedFrom) as Array<AttemptsTable & { generation: number }>;
  for (const a of attempts) {
    if (seen.has(a.id)) continue;
    seen.add(a.id);
    events.push(attemptEvent(a));
  }
  events.sort((x, y) => x.at - y.at);
  return { events, cursor: { requestId: lastRequest, sinceMs: finishedFrom, seen: [...seen] } };
}

/** Store.tailRequestsPage on SQLite: an index range of requests_bucket_id, in order, stopped at `limit`. */
export function tailRequestsPage(db: SqliteDb, bucket: string, afterId: string, limit: number, paused: boolean): TailEvent[] {
  const rows = db
    .prepare(
      `select r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, d.state, d.attempts, d.last_status, d.generation
       from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 and d.destination is null
       where r.bucket = ? and r.id > ? order by r.id limit ?`,
    )
    .all(bucket, afterId, limit) as ListedRow[];
  return rows.map((r) => ({ kind: 'request', at: Number(r.received_at), request: toListed(r, paused) }));
}

/** Store.tailAttemptsPage on SQLite: attempts_bucket_started from `after`, in order, stopped at `limit`. */
export function tailAttemptsPage(db: SqliteDb, bucket: string, page: TailAttemptsPage, limit: number): TailEvent[] {
  const rows = db
    .prepare(
      `select a.*, d.generation from attempts a join deliveries d on d.id = a.delivery_id
       where a.bucket = ? and a.started_at >= ? and (a.started_at > ? or a.id > ?) and a.outcome is not null
         and a.started_at + coalesce(a.duration_ms, 0) >= ?
       order by a.started_at, a.id limit ?`,
    )
    .all(bucket, page.after.startedAt, page.after.startedAt, page.after.id, page.finishedFrom, limit) as Array<
    AttemptsTable & { generation: number }
  >;
  return rows.map(attemptEvent);
}

/**
 * What happened to a request: its deliveries (every generation and destination) with their
 * attempts, and the live feed behind `requests tail`. Read-only queries on the CLI's connection.
 */
import { idTimeMs } from '../../shared/ids.js';
import type { SqliteDb } from './open.js';
import type { AttemptsTable, DeliveriesTable } from '../schema.js';
import type { DeliveryHistory, TailCursor, TailEvent } from '../store.js';
import { TAIL_READ_REQUESTS } from '../tail-since.js';
import { attemptEvent, TAIL_LOOKBACK_MS, toDeliveryHistory, toListed, type ListedRow } from '../request-rows.js';

export function requestHistory(db: SqliteDb, requestId: string): DeliveryHistory[] {
  const deliveries = db
    .prepare('select * from deliveries where request_id = ? order by generation, created_at')
    .all(requestId) as DeliveriesTable[];
  const attempts = db.prepare('select * from attempts where request_id = ? order by started_at, number').all(requestId) as AttemptsTable[];
  return toDeliveryHistory(deliveries, attempts);
}

export function tail(
  db: SqliteDb,
  bucket: string,
  cursor: TailCursor,
  nowMs: number,
  paused: boolean,
): { events: TailEvent[]; cursor: TailCursor } {
  const events: TailEvent[] = [];
  const requests = db
    .prepare(
      `select r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, r.disposition, r.verify_scheme, r.verify_result, r.verify_reason,
        d.state, d.attempts, d.last_status, d.generation
       from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 and d.destination is null
       where r.bucket = ? and r.id > ? order by r.id limit ${TAIL_READ_REQUESTS}`,
    )
    .all(bucket, cursor.requestId) as ListedRow[];
  let lastRequest = cursor.requestId;
  for (const r of requests) {
    lastRequest = r.id;
    events.push({ kind: 'request', at: Number(r.received_at), request: toListed(r, paused) });
  }
  const since = cursor.catchUp === true ? cursor.sinceMs : Math.max(cursor.sinceMs, nowMs - TAIL_LOOKBACK_MS);
  const seen = new Set(cursor.seen.filter((id) => idTimeMs(id) >= since));
  const attempts = db
    .prepare(
      `select a.*, d.generation from attempts a join deliveries d on d.id = a.delivery_id
       where a.bucket = ? and a.started_at >= ? and a.outcome is not null order by a.started_at, a.id`,
    )
    .all(bucket, since) as Array<AttemptsTable & { generation: number }>;
  for (const a of attempts) {
    if (seen.has(a.id)) continue;
    seen.add(a.id);
    events.push(attemptEvent(a));
  }
  events.sort((x, y) => x.at - y.at);
  return { events, cursor: { requestId: lastRequest, sinceMs: since, seen: [...seen] } };
}

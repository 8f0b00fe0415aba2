/**
 * What happened to a request: its deliveries (every generation and destination) with their
 * attempts, and the live feed behind `requests tail`. Read-only queries on the CLI's connection.
 */
import type { SqliteDb } from './open.js';
import type { AttemptsTable, DeliveriesTable } from '../schema.js';
import type { AttemptRecord, DeliveryHistory, TailCursor, TailEvent } from '../store.js';
import { toAttemptRecord, toListed, type ListedRow } from '../request-rows.js';

export function requestHistory(db: SqliteDb, requestId: string): DeliveryHistory[] {
  const deliveries = db.prepare('select * from deliveries where request_id = ? order by generation, created_at').all(requestId) as DeliveriesTable[];
  const attempts = db.prepare('select * from attempts where request_id = ? order by started_at, number').all(requestId) as AttemptsTable[];
  return deliveries.map((d) => ({
    id: d.id,
    generation: Number(d.generation),
    destination: d.destination,
    state: d.state,
    trigger: d.trigger,
    replayId: d.replay_id,
    attempts: Number(d.attempts),
    nextAttemptAt: Number(d.next_attempt_at),
    deferrals: Number(d.deferrals),
    lastDeferralReason: d.last_deferral_reason,
    createdAt: Number(d.created_at),
    settledAt: d.settled_at === null ? null : Number(d.settled_at),
    supersedeRequested: Number(d.supersede_requested) === 1,
    latest: Number(d.latest) === 1,
    attemptLog: attempts.filter((a) => a.delivery_id === d.id).map(toAttemptRecord),
  }));
}

/** UUIDv7 ids start with 48 bits of epoch ms. */
function idTimeMs(id: string): number {
  return parseInt(id.replace(/-/g, '').slice(0, 12), 16);
}

/** How far back a tail looks for attempts that finished late (an attempt's row is keyed by its start). */
const TAIL_LOOKBACK_MS = 15 * 60_000; // 15m: longer than any attempt timeout (at most 10m)

export function tail(db: SqliteDb, bucket: string, cursor: TailCursor, nowMs: number, paused: boolean): { events: TailEvent[]; cursor: TailCursor } {
  const events: TailEvent[] = [];
  const requests = db
    .prepare(
      `select r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, d.state, d.attempts, d.last_status, d.generation
       from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 and d.destination is null
       where r.bucket = ? and r.id > ? order by r.id limit 1000`,
    )
    .all(bucket, cursor.requestId) as ListedRow[];
  let lastRequest = cursor.requestId;
  for (const r of requests) {
    lastRequest = r.id;
    events.push({ kind: 'request', at: Number(r.received_at), request: toListed(r, paused) });
  }
  const since = Math.max(cursor.sinceMs, nowMs - TAIL_LOOKBACK_MS);
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
    const record = toAttemptRecord(a);
    events.push({
      kind: 'attempt',
      at: record.startedAt + (record.durationMs ?? 0),
      requestId: a.request_id,
      deliveryId: a.delivery_id,
      generation: Number(a.generation),
      attempt: record,
    });
  }
  events.sort((x, y) => x.at - y.at);
  return { events, cursor: { requestId: lastRequest, sinceMs: since, seen: [...seen] } };
}

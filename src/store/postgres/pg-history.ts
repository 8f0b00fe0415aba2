/**
 * What happened to a request on PostgreSQL: its deliveries with their attempts, and the feed
 * behind `requests tail`. The twin of ../sqlite/sqlite-history.ts, with the same ordering and
 * cursor rules.
 */
import { sql, type Kysely } from 'kysely';
import type { AttemptsTable, Database, DeliveriesTable } from '../schema.js';
import type { DeliveryHistory, TailCursor, TailEvent } from '../store.js';
import { toAttemptRecord, toListed, type ListedRow } from '../request-rows.js';

export async function pgRequestHistory(db: Kysely<Database>, requestId: string): Promise<DeliveryHistory[]> {
  // id last: ties in (generation, created_at) or (started_at, number) come out in one fixed order.
  const deliveries = (await sql<DeliveriesTable>`select * from deliveries where request_id = ${requestId} order by generation, created_at, id`.execute(db)).rows;
  const attempts = (await sql<AttemptsTable>`select * from attempts where request_id = ${requestId} order by started_at, number, id`.execute(db)).rows;
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

/** Requests read per call (as on SQLite); the cursor moves past the last one returned. */
const TAIL_REQUESTS = 1000;

export async function pgTail(
  db: Kysely<Database>,
  bucket: string,
  cursor: TailCursor,
  nowMs: number,
  paused: boolean,
): Promise<{ events: TailEvent[]; cursor: TailCursor }> {
  const events: TailEvent[] = [];
  const requests = (
    await sql<ListedRow>`
      select r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, d.state, d.attempts, d.last_status, d.generation
      from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 and d.destination is null
      where r.bucket = ${bucket} and r.id > ${cursor.requestId} order by r.id limit ${TAIL_REQUESTS}`.execute(db)
  ).rows;
  let lastRequest = cursor.requestId;
  for (const r of requests) {
    lastRequest = r.id;
    events.push({ kind: 'request', at: Number(r.received_at), request: toListed(r, paused) });
  }
  const since = Math.max(cursor.sinceMs, nowMs - TAIL_LOOKBACK_MS);
  const seen = new Set(cursor.seen.filter((id) => idTimeMs(id) >= since));
  const attempts = (
    await sql<AttemptsTable & { generation: number }>`
      select a.*, d.generation from attempts a join deliveries d on d.id = a.delivery_id
      where a.bucket = ${bucket} and a.started_at >= ${since} and a.outcome is not null order by a.started_at, a.id`.execute(db)
  ).rows;
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

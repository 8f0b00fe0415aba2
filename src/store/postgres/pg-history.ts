/**
 * What happened to a request on PostgreSQL: its deliveries with their attempts, and the feed
 * behind `requests tail`. The twin of ../sqlite/sqlite-history.ts, with the same ordering and
 * cursor rules.
 */
import { sql, type Kysely } from 'kysely';
import { idFloorAt, idTimeMs } from '../../shared/ids.js';
import type { AttemptsTable, Database, DeliveriesTable } from '../schema.js';
import type { DeliveryHistory, TailAttemptsPage, TailCursor, TailEvent } from '../store.js';
import { TAIL_READ_REQUESTS } from '../tail-since.js';
import { attemptEvent, tailAttemptWindow, toDeliveryHistory, toListed, type ListedRow } from '../request-rows.js';

export async function pgRequestHistory(db: Kysely<Database>, requestId: string): Promise<DeliveryHistory[]> {
  // id last: ties in (generation, created_at) or (started_at, number) come out in one fixed order.
  const deliveries = (
    await sql<DeliveriesTable>`select * from deliveries where request_id = ${requestId} order by generation, created_at, id`.execute(db)
  ).rows;
  const attempts = (
    await sql<AttemptsTable>`select * from attempts where request_id = ${requestId} order by started_at, number, id`.execute(db)
  ).rows;
  return toDeliveryHistory(deliveries, attempts);
}

/**
 * How far below the newest request id a tail looks again for requests committed late. Ids are
 * UUIDv7 from each receiver's own clock, made once the body is read; PgIngest then runs up to 4
 * group-commit transactions at once, so a request can commit after one with a newer id. A batch
 * commits or is given up within --lock-timeout (2 s by default) plus its watchdog's 1 s grace and
 * its bytes at 16 MiB/s (100 MiB: 6.25 s), about 9.3 s at most; 15 s leaves room for a few
 * hundred ms of clock difference between receivers (hence NTP, README "Running on PostgreSQL").
 */
export const TAIL_ID_LOOKBACK_MS = 15_000; // 15s

/** Requests read per call (as on SQLite); the cursor moves past the last one returned. */
const TAIL_REQUESTS = TAIL_READ_REQUESTS;

/**
 * The feed behind `requests tail`. `cursor.requestId` is the newest request id returned so far.
 * Requests come from above it, and also from the TAIL_ID_LOOKBACK_MS of ids below it, minus those
 * already given: `cursor.seen` holds the request ids of that window (the newest always among them)
 * as well as the attempt ids still in the attempt look-back. A cursor with a request id and nothing
 * seen is a tail's first (tail.ts starts at the newest request stored): the window below it was
 * stored before the tail started, so that call gives only what is above, and marks the window seen.
 * The cursor keeps its shape; only its `seen` holds more than on SQLite.
 */
export async function pgTail(
  db: Kysely<Database>,
  buckets: readonly string[],
  cursor: TailCursor,
  nowMs: number,
  paused: ReadonlySet<string>,
): Promise<{ events: TailEvent[]; cursor: TailCursor }> {
  // `= any(array)`: one range of requests_bucket_id (and of attempts_bucket_started) per bucket.
  const names = [...buckets];
  const events: TailEvent[] = [];
  const newest = cursor.requestId;
  const seenBefore = new Set(cursor.seen);
  const first = newest !== '' && cursor.seen.length === 0;
  const seenRequests: string[] = [];
  if (first) {
    // Read before the requests above: one committed in between, below the newest, is then given
    // by the next call rather than marked seen unshown.
    const floor = idFloorAt(idTimeMs(newest) - TAIL_ID_LOOKBACK_MS);
    const stored = await sql<{
      id: string;
    }>`select id from requests where bucket = any(${names}::text[]) and id >= ${floor} and id <= ${newest}`.execute(db);
    seenRequests.push(newest, ...stored.rows.map((r) => r.id));
  }
  // An empty cursor (an empty bucket when the tail started): every request is above it. `seen` is
  // the window's ids (15 s of ingest: 15,000 at 1,000 requests/s), so NOT IN over a subquery, which
  // PostgreSQL hashes once, rather than `<> all(…)`, which compares each row with every id.
  const window =
    newest === '' || first
      ? sql`r.id > ${newest}`
      : sql`r.id >= ${idFloorAt(idTimeMs(newest) - TAIL_ID_LOOKBACK_MS)} and r.id not in (select unnest(${cursor.seen}::text[]))`;
  const requests = (
    await sql<ListedRow>`
      select r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, r.disposition, r.verify_scheme, r.verify_result, r.verify_reason,
        d.state, d.attempts, d.last_status, d.generation
      from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 and d.destination is null
      where r.bucket = any(${names}::text[]) and ${window} order by r.id limit ${TAIL_REQUESTS}`.execute(db)
  ).rows;
  let lastRequest = newest;
  for (const r of requests) {
    if (r.id > lastRequest) lastRequest = r.id;
    seenRequests.push(r.id);
    events.push({ kind: 'request', at: Number(r.received_at), request: toListed(r, paused.has(r.bucket)) });
  }
  const { startedFrom, finishedFrom } = tailAttemptWindow(cursor, nowMs);
  const attempts = (
    await sql<AttemptsTable & { generation: number }>`
      select a.*, d.generation from attempts a join deliveries d on d.id = a.delivery_id
      where a.bucket = any(${names}::text[]) and a.started_at >= ${startedFrom} and a.outcome is not null
        and a.started_at + coalesce(a.duration_ms, 0) >= ${finishedFrom}
      order by a.started_at, a.id`.execute(db)
  ).rows;
  const seen = new Set<string>();
  for (const a of attempts) {
    seen.add(a.id);
    if (seenBefore.has(a.id)) continue;
    events.push(attemptEvent(a));
  }
  // Kept: the attempts still in their look-back (all of them came back above), and the request ids
  // given so far that are still inside the id window below the newest.
  if (lastRequest !== '') {
    const floor = idTimeMs(lastRequest) - TAIL_ID_LOOKBACK_MS;
    for (const id of [...cursor.seen, ...seenRequests]) if (idTimeMs(id) >= floor && id <= lastRequest) seen.add(id);
  }
  events.sort((x, y) => x.at - y.at);
  return { events, cursor: { requestId: lastRequest, sinceMs: finishedFrom, seen: [...seen] } };
}

/** Store.tailRequestsPage on PostgreSQL: an index range of requests_bucket_id, in order, stopped at `limit`. */
export async function pgTailRequestsPage(
  db: Kysely<Database>,
  bucket: string,
  afterId: string,
  limit: number,
  paused: boolean,
): Promise<TailEvent[]> {
  const rows = (
    await sql<ListedRow>`
      select r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, d.state, d.attempts, d.last_status, d.generation
      from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 and d.destination is null
      where r.bucket = ${bucket} and r.id > ${afterId} order by r.id limit ${limit}`.execute(db)
  ).rows;
  return rows.map((r) => ({ kind: 'request', at: Number(r.received_at), request: toListed(r, paused) }));
}

/** Store.tailAttemptsPage on PostgreSQL: attempts_bucket_started from `after`, in order, stopped at `limit`. */
export async function pgTailAttemptsPage(
  db: Kysely<Database>,
  bucket: string,
  page: TailAttemptsPage,
  limit: number,
): Promise<TailEvent[]> {
  const { startedAt, id } = page.after;
  const rows = (
    await sql<AttemptsTable & { generation: number }>`
      select a.*, d.generation from attempts a join deliveries d on d.id = a.delivery_id
      where a.bucket = ${bucket} and a.started_at >= ${startedAt} and (a.started_at > ${startedAt} or a.id > ${id})
        and a.outcome is not null and a.started_at + coalesce(a.duration_ms, 0) >= ${page.finishedFrom}
      order by a.started_at, a.id limit ${limit}`.execute(db)
  ).rows;
  return rows.map(attemptEvent);
}

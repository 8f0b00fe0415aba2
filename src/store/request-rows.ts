/**
 * Dialect-neutral pieces of request listing and history: how request states map to delivery
 * states, and how rows (the same columns in both dialects) become the contract's objects. Each
 * dialect's query files (sqlite/request-query.ts, postgres/pg-request-query.ts) build on these.
 */
import type { Selectable } from 'kysely';
import { toDisposition, toVerdict } from './provider-row.js';
import type { AttemptsTable, DeliveriesTable, DeliveryState, RequestsTable } from './schema.js';
import type {
  AttemptRecord,
  DeliveryHistory,
  ListedRequest,
  RequestBatch,
  RequestBatchCursor,
  Disposition,
  RequestState,
  RequestSummary,
  StoredRequest,
  TailEvent,
} from './store.js';

/**
 * How far an id's embedded time may be from its received_at: the uuidv7 generator keeps its last
 * time through a clock step back of up to 10 s, so an id can run ahead of the clock that long.
 */
export const ID_SLACK_MS = 60_000;

export interface IdRange {
  order: 'desc' | 'asc';
  limit: number;
  /** Ids strictly below (cursor of a newest-first page). */
  before?: string;
  /** Ids strictly above (cursor of an oldest-first walk). */
  after?: string;
  /** Ids at or below (a snapshot taken when an iteration starts). */
  atMost?: string;
}

/** A request row joined to its latest delivery to the bucket destination (list, tail). */
export type ListedRow = {
  id: string;
  bucket: string;
  received_at: number;
  method: string;
  path: string;
  query: string | null;
  size: number;
  state: string | null;
  attempts: number | null;
  last_status: number | null;
  generation: number | null;
  disposition?: string | null;
} & Partial<Pick<RequestsTable, 'verify_scheme' | 'verify_result' | 'verify_reason'>>;

/** How far back a tail looks for attempts that finished late (an attempt's row is keyed by its start). */
export const TAIL_LOOKBACK_MS = 15 * 60_000; // 15m: longer than any attempt timeout (at most 10m)

/**
 * What a tail call reads of the attempts. An attempt is an event when it finishes, but its row is
 * indexed by its start (`attempts_bucket_started`), and finishes at most TAIL_LOOKBACK_MS after
 * it: so the attempts finished at or after `finishedFrom` are among those started at or after
 * `startedFrom`, read by the index, then kept by finish. A live cursor's look-back ends
 * TAIL_LOOKBACK_MS before now (an attempt that finished earlier was read by an earlier call), and
 * `sinceMs` moves up with it.
 */
export function tailAttemptWindow(cursor: { sinceMs: number }, nowMs: number): { startedFrom: number; finishedFrom: number } {
  const finishedFrom = Math.max(cursor.sinceMs, nowMs - TAIL_LOOKBACK_MS);
  return { finishedFrom, startedFrom: Math.max(cursor.sinceMs - TAIL_LOOKBACK_MS, nowMs - TAIL_LOOKBACK_MS) };
}

/** The columns of a request that a listing leaves out: read per request by `requests show` and export. */
export type RequestBodyRow = Pick<RequestsTable, 'id' | 'headers' | 'body' | 'sha256' | 'peer' | 'trailers'> &
  Partial<Pick<RequestsTable, 'dedup_key' | 'duplicate_of'>>;

/** Summary rows per page while iterating, and body bytes per full-row read (both dialects). */
const ITERATE_PAGE = 500;
const ITERATE_BYTES = 8 * 1024 * 1024; // 8 MiB

/** The delivery states to walk for the requested request states (`held` depends on the pause). */
export function deliveryStatesFor(states: readonly RequestState[], paused: boolean): { states: DeliveryState[]; none: boolean } {
  const out = new Set<DeliveryState>();
  let none = false;
  for (const s of states) {
    if (s === 'none') none = true;
    // Quarantined, duplicate and handshake requests have no delivery: they are read by disposition.
    else if (s === 'quarantined' || s === 'duplicate' || s === 'handshake') continue;
    else if (s === 'held') {
      if (paused) out.add('pending').add('retrying');
    } else if (s === 'pending' || s === 'retrying') {
      if (!paused) out.add(s);
    } else out.add(s);
  }
  return { states: [...out], none };
}

/** The dispositions named among the requested states (quarantined, duplicate, handshake): read by disposition. */
export function dispositionStatesIn(states: readonly RequestState[]): Array<Exclude<Disposition, 'accepted'>> {
  return (['quarantined', 'duplicate', 'handshake'] as const).filter((d) => states.includes(d));
}

export function toListed(r: ListedRow, paused: boolean): ListedRequest {
  const d = r.state as DeliveryState | null;
  const disposition = toDisposition(r.disposition);
  const state: RequestState =
    disposition !== 'accepted'
      ? disposition
      : d === null
        ? 'none'
        : paused && (d === 'pending' || d === 'retrying')
          ? 'held'
          : (d as Exclude<DeliveryState, 'superseded'>);
  return {
    id: r.id,
    bucket: r.bucket,
    receivedAt: Number(r.received_at),
    method: r.method,
    path: r.path,
    query: r.query,
    size: Number(r.size),
    state,
    generation: r.generation === null ? null : Number(r.generation),
    disposition,
    verdict: toVerdict(r),
    attempts: r.attempts === null ? 0 : Number(r.attempts),
    lastStatus: r.last_status === null ? null : Number(r.last_status),
  };
}

export function toAttemptRecord(a: AttemptsTable): AttemptRecord {
  return {
    id: a.id,
    number: Number(a.number),
    url: a.url,
    startedAt: Number(a.started_at),
    durationMs: a.duration_ms === null ? null : Number(a.duration_ms),
    status: a.status === null ? null : Number(a.status),
    errorClass: a.error_class,
    errorMessage: a.error_message,
    responseHeaders: a.response_headers === null ? null : (JSON.parse(a.response_headers) as string[]),
    responseBody: a.response_body,
    responseTruncated: Number(a.response_truncated) === 1,
    outcome: a.outcome,
    reason: a.reason,
    nextAttemptAt: a.next_attempt_at === null ? null : Number(a.next_attempt_at),
    nextWhy: a.next_why,
    workerId: a.worker_id ?? null,
  };
}

/** A request's deliveries, in the order given, each with its attempts in the order given. */
export function toDeliveryHistory(deliveries: readonly DeliveriesTable[], attempts: readonly AttemptsTable[]): DeliveryHistory[] {
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

/** A finished attempt as a `requests tail` event, at the time it finished. */
export function attemptEvent(a: AttemptsTable & { generation: number }): TailEvent {
  const record = toAttemptRecord(a);
  return {
    kind: 'attempt',
    at: record.startedAt + (record.durationMs ?? 0),
    bucket: a.bucket,
    requestId: a.request_id,
    deliveryId: a.delivery_id,
    generation: Number(a.generation),
    attempt: record,
  };
}

/** A request's listed fields and its stored columns: the contract's StoredRequest. */
export function withBody(s: Omit<RequestSummary, 'generation'>, r: RequestBodyRow): StoredRequest {
  return {
    id: s.id,
    bucket: s.bucket,
    receivedAt: s.receivedAt,
    method: s.method,
    path: s.path,
    query: s.query,
    rawHeaders: JSON.parse(r.headers) as string[],
    body: r.body,
    size: s.size,
    sha256: r.sha256,
    peer: r.peer,
    state: s.state,
    rawTrailers: r.trailers === null ? [] : (JSON.parse(r.trailers) as string[]),
    disposition: s.disposition,
    verdict: s.verdict,
    dedupKey: r.dedup_key ?? null,
    duplicateOf: r.duplicate_of ?? null,
  };
}

/** A whole requests row with its state (`requests show`). */
export function toStoredRequest(row: Selectable<RequestsTable> & { state: RequestState }): StoredRequest {
  return withBody(
    {
      id: row.id,
      bucket: row.bucket,
      receivedAt: Number(row.received_at),
      method: row.method,
      path: row.path,
      query: row.query,
      size: Number(row.size),
      state: row.state,
      disposition: toDisposition(row.disposition),
      verdict: toVerdict(row),
    },
    row,
  );
}

/** A page of summaries in id order (a dialect's queryPage). */
export type SummaryPage = (
  range: IdRange,
) => { requests: ListedRequest[]; more: boolean } | Promise<{ requests: ListedRequest[]; more: boolean }>;
/** The full rows of these ids (a dialect's body read). */
export type BodyRows = (ids: string[]) => RequestBodyRow[] | Promise<RequestBodyRow[]>;

/** Where a walk over requests at or below `newest` starts; null when there is none (`newest` null). */
export function startCursor(newest: string | null, limit?: number): RequestBatchCursor | null {
  if (newest === null) return null;
  return { newest, ...(limit !== undefined ? { left: limit } : {}) };
}

/**
 * One batch of the walk, oldest first: a page of at most ITERATE_PAGE summaries (ids above
 * `after`, at or below `newest`), then the bodies of as many of them as fit ITERATE_BYTES (at
 * least one), so memory stays bounded whatever the bucket holds; the next batch goes on after the
 * last one taken. A request deleted (pruned) between its page and its body read is left out.
 * `left` bounds how many summaries are read at all (`requests export --limit`).
 */
export async function readBatch(from: RequestBatchCursor, page: SummaryPage, bodies: BodyRows): Promise<RequestBatch> {
  const left = from.left ?? Number.POSITIVE_INFINITY;
  if (left <= 0) return { requests: [], next: null };
  const p = await page({
    order: 'asc',
    limit: Math.min(ITERATE_PAGE, left),
    atMost: from.newest,
    ...(from.after !== undefined ? { after: from.after } : {}),
  });
  const group: ListedRequest[] = [];
  let bytes = 0;
  for (const s of p.requests) {
    if (group.length > 0 && bytes + s.size > ITERATE_BYTES) break;
    bytes += s.size;
    group.push(s);
  }
  const last = group[group.length - 1];
  if (last === undefined) return { requests: [], next: null };
  const byId = new Map((await bodies(group.map((g) => g.id))).map((r) => [r.id, r]));
  const requests = group.flatMap((s) => {
    const r = byId.get(s.id);
    return r ? [withBody(s, r)] : [];
  });
  const more = group.length < p.requests.length || p.more;
  const rest = left - group.length;
  if (!more || rest <= 0) return { requests, next: null };
  return { requests, next: { newest: from.newest, after: last.id, ...(from.left !== undefined ? { left: rest } : {}) } };
}

/** Every matching request, oldest first: the batches of readBatch, one after the other. */
export async function* iterateWithBodies(
  newest: string,
  page: SummaryPage,
  bodies: BodyRows,
  limit?: number,
): AsyncGenerator<StoredRequest> {
  let from = startCursor(newest, limit);
  while (from) {
    const batch = await readBatch(from, page, bodies);
    yield* batch.requests;
    from = batch.next;
  }
}

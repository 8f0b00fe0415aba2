/**
 * Dialect-neutral pieces of request listing and history: how request states map to delivery
 * states, and how rows (the same columns in both dialects) become the contract's objects. Each
 * dialect's query files (sqlite/request-query.ts, postgres/pg-request-query.ts) build on these.
 */
import type { AttemptsTable, DeliveryState } from './schema.js';
import type { AttemptRecord, ListedRequest, RequestState } from './store.js';

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
};

/** The delivery states to walk for the requested request states (`held` depends on the pause). */
export function deliveryStatesFor(states: readonly RequestState[], paused: boolean): { states: DeliveryState[]; none: boolean } {
  const out = new Set<DeliveryState>();
  let none = false;
  for (const s of states) {
    if (s === 'none') none = true;
    else if (s === 'held') {
      if (paused) out.add('pending').add('retrying');
    } else if (s === 'pending' || s === 'retrying') {
      if (!paused) out.add(s);
    } else out.add(s);
  }
  return { states: [...out], none };
}

export function toListed(r: ListedRow, paused: boolean): ListedRequest {
  const d = r.state as DeliveryState | null;
  const state: RequestState =
    d === null ? 'none' : paused && (d === 'pending' || d === 'retrying') ? 'held' : (d as Exclude<DeliveryState, 'superseded'>);
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

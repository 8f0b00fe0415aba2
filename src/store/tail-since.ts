import { idFloorAt } from '../shared/ids.js';
import { TAIL_LOOKBACK_MS } from './request-rows.js';
import type { Store, TailEvent } from './store.js';

/** Requests one `tail` call gives at most (both dialects); a call that gives fewer has caught up. */
export const TAIL_READ_REQUESTS = 1000;

/** Rows one page of a walk since a time reads, per bucket and kind (requests, attempts). */
export const SINCE_BATCH = 500;

/**
 * Where a walk since a time (`requests tail --since`, GET /events?since=) stands: every request of
 * its buckets with an id up to `requestId`, and every finished attempt up to `attempt` in
 * (finished at, id) order, was given; nothing after. It is all a walk needs to go on, in this
 * process or another: the event stream sends it as each backlog event's id, so a client that
 * reconnects mid-backlog resumes exactly after the last event it got.
 */
export interface SincePosition {
  requestId: string;
  attempt: { finishedAt: number; id: string };
}

/** The start of a walk since `sinceMs`: requests received and attempts finished at or after it. */
export function sinceStart(sinceMs: number): SincePosition {
  // Every request id made at or after sinceMs is above the floor; attempt ids are never ''.
  return { requestId: idFloorAt(sinceMs), attempt: { finishedAt: sinceMs, id: '' } };
}

const UUID = '[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}';
const POSITION_ID = new RegExp(`^s\\.(${UUID})\\.(\\d{1,15})\\.(${UUID})?$`);

/** A position as an SSE event id (at most 89 characters): `s.<request id>.<ms>.<attempt id>`. */
export function sincePositionId(p: SincePosition): string {
  return `s.${p.requestId}.${p.attempt.finishedAt}.${p.attempt.id}`;
}

/** The position an event id names; undefined when it is no position (a live event's id). */
export function parseSincePositionId(id: string): SincePosition | undefined {
  const m = POSITION_ID.exec(id);
  if (!m) return undefined;
  return { requestId: m[1]!, attempt: { finishedAt: Number(m[2]), id: m[3] ?? '' } };
}

export type SinceReads = Pick<Store, 'tailRequestsPage' | 'tailAttemptsPage'>;

type AttemptEvent = Extract<TailEvent, { kind: 'attempt' }>;
type RequestEvent = Extract<TailEvent, { kind: 'request' }>;

/** One bucket's part of a walk: the requests read and not yet given, and where each read stands. */
interface Lane {
  bucket: string;
  requests: RequestEvent[];
  requestsAfter: string;
  requestsDone: boolean;
  /** The last attempt row read, in (started_at, id) order. */
  attemptsAfter: { startedAt: number; id: string };
  attemptsDone: boolean;
}

/** (finished at, id) order. */
function attemptOrder(a: { at: number; attempt: { id: string } }, b: { at: number; attempt: { id: string } }): number {
  return a.at - b.at || (a.attempt.id < b.attempt.id ? -1 : a.attempt.id > b.attempt.id ? 1 : 0);
}

/**
 * What happened in some buckets since a position, oldest first, read in pages of `batch` rows per
 * bucket as it is given: memory holds a page per bucket and the attempts that started before the
 * last one read but finish after it (those of at most TAIL_LOOKBACK_MS), whatever the time since.
 *
 * Requests come by id (one index range per bucket), attempts by the time they finished. An
 * attempt's row is indexed by its start, so attempts are read by start and held until every
 * attempt that could finish before them has been read (an attempt finishes at most
 * TAIL_LOOKBACK_MS after it starts). The two are merged by time, a request before an attempt of
 * the same ms. `next()` gives undefined once the walk has caught up with what is stored.
 */
export class SinceWalk {
  readonly #reads: SinceReads;
  readonly #batch: number;
  readonly #lanes: Lane[];
  readonly #finishedFrom: number;
  /** Attempts read and not yet given, in (finished at, id) order. */
  #pending: AttemptEvent[] = [];
  #position: SincePosition;

  constructor(reads: SinceReads, buckets: readonly string[], from: SincePosition, o: { batch?: number } = {}) {
    this.#reads = reads;
    this.#batch = o.batch ?? SINCE_BATCH;
    this.#position = { requestId: from.requestId, attempt: { ...from.attempt } };
    this.#finishedFrom = from.attempt.finishedAt;
    this.#lanes = buckets.map((bucket) => ({
      bucket,
      requests: [],
      requestsAfter: from.requestId,
      requestsDone: false,
      // Any attempt that finished at or after the position started at most the look-back before it.
      attemptsAfter: { startedAt: from.attempt.finishedAt - TAIL_LOOKBACK_MS, id: '' },
      attemptsDone: false,
    }));
  }

  /** Where the walk stands: after the last event next() gave. */
  get position(): SincePosition {
    return { requestId: this.#position.requestId, attempt: { ...this.#position.attempt } };
  }

  /** The next event and the position after it; undefined once caught up. */
  async next(): Promise<{ event: TailEvent; bucket: string; position: SincePosition } | undefined> {
    // Requests across buckets by id: the position's request id then covers every bucket.
    let first: { lane: Lane; event: RequestEvent } | undefined;
    for (const lane of this.#lanes) {
      if (lane.requests.length === 0 && !lane.requestsDone) await this.#readRequests(lane);
      const head = lane.requests[0];
      if (head !== undefined && (first === undefined || head.request.id < first.event.request.id)) first = { lane, event: head };
    }
    const attempt = await this.#nextAttempt();
    if (first !== undefined && (attempt === undefined || first.event.at <= attempt.at)) {
      first.lane.requests.shift();
      this.#position.requestId = first.event.request.id;
      return { event: first.event, bucket: first.lane.bucket, position: this.position };
    }
    if (attempt === undefined) return undefined;
    this.#pending.shift();
    this.#position.attempt = { finishedAt: attempt.at, id: attempt.attempt.id };
    return { event: attempt, bucket: attempt.bucket, position: this.position };
  }

  /** The first attempt in (finished at, id) order, once no attempt still unread can come before it. */
  async #nextAttempt(): Promise<AttemptEvent | undefined> {
    for (;;) {
      const first = this.#pending[0];
      // An unread attempt starts at or after its lane's last read start, and finishes no earlier.
      let behind: Lane | undefined;
      for (const lane of this.#lanes) {
        if (lane.attemptsDone || (first !== undefined && lane.attemptsAfter.startedAt > first.at)) continue;
        if (behind === undefined || lane.attemptsAfter.startedAt < behind.attemptsAfter.startedAt) behind = lane;
      }
      if (behind === undefined) return first;
      await this.#readAttempts(behind);
    }
  }

  async #readRequests(lane: Lane): Promise<void> {
    const page = await this.#gone(lane, () => this.#reads.tailRequestsPage(lane.bucket, lane.requestsAfter, this.#batch));
    if (page.length < this.#batch) lane.requestsDone = true;
    lane.requests = page.filter((e): e is RequestEvent => e.kind === 'request');
    lane.requestsAfter = lane.requests.at(-1)?.request.id ?? lane.requestsAfter;
  }

  async #readAttempts(lane: Lane): Promise<void> {
    const page = await this.#gone(lane, () =>
      this.#reads.tailAttemptsPage(lane.bucket, { after: lane.attemptsAfter, finishedFrom: this.#finishedFrom }, this.#batch),
    );
    if (page.length < this.#batch) lane.attemptsDone = true;
    const given = { at: this.#position.attempt.finishedAt, attempt: { id: this.#position.attempt.id } };
    for (const e of page) {
      if (e.kind !== 'attempt') continue;
      lane.attemptsAfter = { startedAt: e.attempt.startedAt, id: e.attempt.id };
      // Read again after a resume: those up to the position were given before.
      if (attemptOrder(e, given) > 0) this.#pending.push(e);
    }
    this.#pending.sort(attemptOrder);
  }

  /** A bucket deleted meanwhile has nothing more to give. */
  async #gone(lane: Lane, read: () => Promise<TailEvent[]>): Promise<TailEvent[]> {
    try {
      return await read();
    } catch (e) {
      if ((e as { code?: string }).code !== 'not_found') throw e;
      lane.requestsDone = true;
      lane.attemptsDone = true;
      return [];
    }
  }
}

/** One key per event, the same for a request or an attempt however it was read (dedupe across reads). */
export function tailEventKey(e: { event: string; id?: unknown; delivery_id?: unknown; attempt?: unknown }): string {
  return e.event === 'request' ? `r:${String(e.id)}` : `a:${String(e.delivery_id)}#${String(e.attempt)}`;
}

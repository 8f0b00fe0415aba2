/**
 * The one server-side poller behind GET /events: it reads `tail` once per watched bucket per tick
 * and fans the events out to every subscriber, however many there are (issue 14: `Store.tail`
 * re-reads up to 15 minutes of attempts each call, so a poll per client would multiply that).
 *
 * Event ids are `<hub>.<seq>`: `hub` differs per process start, `seq` counts up. The last
 * BUFFER_EVENTS events are kept in memory, and a bucket's tail cursor lives on for LINGER_MS after
 * its last watcher leaves, so a client that reconnects with Last-Event-ID gets what it missed.
 * When that cannot be whole (an id from another process or start, one past the buffer, or a bucket
 * whose cursor started after that id) it gets a `reset` event and the stream goes on from now.
 */
import { randomBytes } from 'node:crypto';
import { tailEventJson } from '../json/request-json.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { TailCursor } from '../store/store.js';
import type { StoreReads } from './store-reads.js';

/** The same tick as `requests tail`. */
export const EVENTS_POLL_MS = 250;
/** Events kept for Last-Event-ID resumption. */
export const BUFFER_EVENTS = 10_000;
/** How long a bucket nobody watches any more is still followed, for reconnects. */
export const LINGER_MS = 60_000; // 60 s
/** How often the bucket list is read again while someone watches every bucket. */
const ALL_BUCKETS_REFRESH_MS = 5_000; // 5 s

export interface HubEvent {
  id: string;
  seq: number;
  bucket: string;
  /** `request` or `attempt`, as tail's `event` field. */
  event: string;
  /** tailEventJson with the bucket added: one stream can carry several buckets. */
  data: Record<string, unknown>;
}

export type Subscriber = {
  /** null: every bucket. */
  buckets: ReadonlySet<string> | null;
  send: (e: HubEvent) => void;
  /** Called by close(): the hub is going away, end the stream. */
  end?: () => void;
};

export interface EventHubOptions {
  reads: Pick<StoreReads, 'tail' | 'listRequests' | 'listBuckets'>;
  logger: Logger;
  /** Where a newly watched bucket's attempts start (tail's sinceMs). */
  clock: Clock;
  /** Tick of the poller; 0: no timer, the caller drives pollOnce() (tests). */
  pollMs?: number;
  bufferEvents?: number;
}

export class EventHub {
  readonly #reads: EventHubOptions['reads'];
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #pollMs: number;
  readonly #bufferSize: number;
  readonly #hubId = randomBytes(4).toString('hex');
  readonly #subscribers = new Set<Subscriber>();
  /** Per followed bucket: its tail cursor, the seq when the cursor started, and since when nobody watches it. */
  readonly #cursors = new Map<string, { cursor: TailCursor; startSeq: number; unwatchedAt: number | null }>();
  #buffer: HubEvent[] = [];
  #seq = 0;
  #timer: NodeJS.Timeout | undefined;
  /** Bumped by every start and stop, so that a poll finishing after a stop schedules nothing. */
  #run = 0;
  #running = false;
  #polling: Promise<void> | undefined;
  #allBuckets: { names: string[]; readAt: number } | undefined;
  #closed = false;

  constructor(o: EventHubOptions) {
    this.#reads = o.reads;
    this.#logger = o.logger;
    this.#clock = o.clock;
    this.#pollMs = o.pollMs ?? EVENTS_POLL_MS;
    this.#bufferSize = o.bufferEvents ?? BUFFER_EVENTS;
  }

  get subscriberCount(): number {
    return this.#subscribers.size;
  }

  /**
   * Adds a subscriber; with `lastEventId`, first sends the buffered events after it (or a reset
   * when it cannot). Starts the poller with the first subscriber. Returns the unsubscribe.
   */
  async subscribe(sub: Subscriber, lastEventId?: string): Promise<{ unsubscribe: () => void; resumed: 'none' | 'resumed' | 'reset' }> {
    // Cursors for newly watched buckets start from now, before the subscriber can miss anything.
    const wanted = sub.buckets === null ? await this.#allBucketNames(true) : [...sub.buckets];
    for (const b of wanted) await this.#ensureCursor(b);
    // Closed meanwhile (or before): the stream ends at once, and no poller starts again.
    if (this.#closed) {
      sub.end?.();
      return { resumed: 'none', unsubscribe: () => undefined };
    }
    let resumed: 'none' | 'resumed' | 'reset' = 'none';
    if (lastEventId !== undefined && lastEventId !== '') {
      const missed = this.#after(lastEventId, wanted);
      if (missed === undefined) resumed = 'reset';
      else {
        resumed = 'resumed';
        for (const e of missed) if (sub.buckets === null || sub.buckets.has(e.bucket)) sub.send(e);
      }
    }
    this.#subscribers.add(sub);
    this.#startTimer();
    return {
      resumed,
      unsubscribe: () => {
        this.#subscribers.delete(sub);
        if (this.#subscribers.size === 0) this.#stopTimer();
      },
    };
  }

  /** One tick: one `tail` per watched bucket, the events numbered, buffered and sent to whoever watches. */
  async pollOnce(): Promise<void> {
    if (this.#polling) return this.#polling;
    this.#polling = this.#poll().finally(() => (this.#polling = undefined));
    return this.#polling;
  }

  /** Stops the timer and ends every subscriber's stream (the listener shutting down). */
  close(): void {
    this.#closed = true;
    this.#stopTimer();
    const subs = [...this.#subscribers];
    this.#subscribers.clear();
    for (const s of subs) s.end?.();
  }

  async #poll(): Promise<void> {
    const watched = await this.#watchedBuckets();
    const now = Date.now(); // lingering is a lifetime in real time
    for (const [b, f] of [...this.#cursors]) {
      if (watched.has(b)) f.unwatchedAt = null;
      else if (f.unwatchedAt === null) f.unwatchedAt = now;
      else if (now - f.unwatchedAt >= LINGER_MS) this.#cursors.delete(b);
    }
    for (const bucket of new Set([...watched, ...this.#cursors.keys()])) {
      const cursor = await this.#ensureCursor(bucket);
      if (cursor === undefined) continue;
      let r: Awaited<ReturnType<EventHubOptions['reads']['tail']>>;
      try {
        r = await this.#reads.tail(bucket, cursor);
      } catch (e) {
        // A bucket deleted meanwhile, or a read past its budget: try again next tick.
        this.#logger.debug({ err: e, bucket }, 'events: tail failed');
        if ((e as { code?: string }).code === 'not_found') this.#cursors.delete(bucket);
        continue;
      }
      const followed = this.#cursors.get(bucket);
      if (followed) followed.cursor = r.cursor;
      for (const t of r.events) {
        const seq = ++this.#seq;
        const data = { ...tailEventJson(t), bucket };
        const e: HubEvent = { id: `${this.#hubId}.${seq}`, seq, bucket, event: data.event, data };
        this.#buffer.push(e);
        for (const s of this.#subscribers) if (s.buckets === null || s.buckets.has(bucket)) s.send(e);
      }
    }
    if (this.#buffer.length > this.#bufferSize) this.#buffer = this.#buffer.slice(-this.#bufferSize);
  }

  async #watchedBuckets(): Promise<Set<string>> {
    const out = new Set<string>();
    let all = false;
    for (const s of this.#subscribers) {
      if (s.buckets === null) all = true;
      else for (const b of s.buckets) out.add(b);
    }
    if (all) for (const b of await this.#allBucketNames(false)) out.add(b);
    return out;
  }

  async #allBucketNames(fresh: boolean): Promise<string[]> {
    const now = Date.now(); // a cache lifetime, in real time
    if (fresh || this.#allBuckets === undefined || now - this.#allBuckets.readAt >= ALL_BUCKETS_REFRESH_MS) {
      const names = (await this.#reads.listBuckets()).filter((b) => b.deletingAt === null).map((b) => b.name);
      this.#allBuckets = { names, readAt: now };
    }
    return this.#allBuckets.names;
  }

  /** The bucket's cursor, started from now (after its newest request) when it is new; undefined for a bucket that is gone. */
  async #ensureCursor(bucket: string): Promise<TailCursor | undefined> {
    const known = this.#cursors.get(bucket);
    if (known) return known.cursor;
    try {
      const newest = await this.#reads.listRequests(bucket, {}, { limit: 1 });
      const cursor: TailCursor = { requestId: newest.requests[0]?.id ?? '', sinceMs: this.#clock.now(), seen: [] };
      this.#cursors.set(bucket, { cursor, startSeq: this.#seq, unwatchedAt: null });
      return cursor;
    } catch (e) {
      this.#logger.debug({ err: e, bucket }, 'events: cannot start the bucket');
      return undefined;
    }
  }

  /**
   * The buffered events after `id`; undefined when they cannot be all that happened in `buckets`
   * since: the id is not this hub's, the next event has left the buffer, or a bucket's cursor
   * started at or after the id (it may have started after the client left, skipping what came
   * between; a reset is the honest answer).
   */
  #after(id: string, buckets: readonly string[]): HubEvent[] | undefined {
    const m = /^([0-9a-f]+)\.(\d+)$/.exec(id);
    if (!m || m[1] !== this.#hubId) return undefined;
    const seq = Number(m[2]);
    if (seq > this.#seq) return undefined;
    const first = this.#buffer[0];
    if (seq < this.#seq && (first === undefined || first.seq > seq + 1)) return undefined;
    for (const b of buckets) if ((this.#cursors.get(b)?.startSeq ?? Infinity) >= seq) return undefined;
    return this.#buffer.filter((e) => e.seq > seq);
  }

  #startTimer(): void {
    if (this.#running || this.#pollMs <= 0) return;
    this.#running = true;
    const run = ++this.#run;
    const tick = () => {
      this.#timer = setTimeout(() => {
        void this.pollOnce()
          .catch((e: unknown) => this.#logger.warn({ err: e }, 'events: poll failed'))
          .finally(() => {
            if (this.#running && run === this.#run) tick();
          });
      }, this.#pollMs);
    };
    tick();
  }

  #stopTimer(): void {
    this.#running = false;
    this.#run++;
    if (this.#timer !== undefined) clearTimeout(this.#timer);
    this.#timer = undefined;
  }
}

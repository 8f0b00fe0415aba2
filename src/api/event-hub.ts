/**
 * The one server-side poller behind GET /events: one `tail` per tick over every followed bucket at
 * once (a fixed number of queries whatever the number of buckets and clients; issue 14: a poll
 * per client, or per bucket, would multiply them), its events fanned out to every subscriber.
 *
 * Event ids are `<hub>.<seq>`: `hub` differs per process start, `seq` counts up. The last
 * BUFFER_EVENTS events are kept in memory, and a bucket is still followed for LINGER_MS after its
 * last watcher leaves, so a client that reconnects with Last-Event-ID gets what it missed. When
 * that cannot be whole (an id from another process or start, one past the buffer, or a bucket
 * followed only since after that id) it gets a `reset` event saying which, and the stream goes on
 * from now. A new client without Last-Event-ID gets only what happens after it subscribed.
 */
import { randomBytes } from 'node:crypto';
import { tailEventJson } from '../json/request-json.js';
import type { Clock } from '../shared/clock.js';
import { idFloorAt } from '../shared/ids.js';
import type { Logger } from '../shared/logger.js';
import type { TailCursor, TailEvent } from '../store/store.js';
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
  reads: Pick<StoreReads, 'tail' | 'listBuckets'>;
  logger: Logger;
  /** Where a newly followed bucket's events start. */
  clock: Clock;
  /** Tick of the poller; 0: no timer, the caller drives pollOnce() (tests). */
  pollMs?: number;
  bufferEvents?: number;
}

/** A followed bucket: from which seq and which time its events are sent, and since when nobody watches it. */
interface Followed {
  startSeq: number;
  /** Its requests with ids above this, and its attempts finished at or after fromMs, are its events. */
  fromRequestId: string;
  fromMs: number;
  unwatchedAt: number | null;
}

export type Subscribed = {
  unsubscribe: () => void;
  resumed: 'none' | 'resumed' | 'reset';
  /** With a reset: why the events since that id could not all be sent. */
  reason?: string;
};

export class EventHub {
  readonly #reads: EventHubOptions['reads'];
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #pollMs: number;
  readonly #bufferSize: number;
  readonly #hubId = randomBytes(4).toString('hex');
  readonly #subscribers = new Set<Subscriber>();
  readonly #followed = new Map<string, Followed>();
  /** One cursor over every followed bucket; undefined while none is. */
  #cursor: TailCursor | undefined;
  /** The poller stopped with buckets still followed: the cursor is behind until the next poll. */
  #behind = false;
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
   * when it cannot). Starts the poller with the first subscriber. Without `lastEventId` the
   * subscriber gets only what the poller reads from then on.
   */
  async subscribe(sub: Subscriber, lastEventId?: string): Promise<Subscribed> {
    const wanted = sub.buckets === null ? await this.#allBucketNames(true) : [...sub.buckets];
    this.#dropLingered(Date.now());
    // Nobody watched for a while (the poller stopped) but buckets lingered: read what happened
    // meanwhile into the buffer first, for a client that resumes; this one gets none of it.
    if (this.#behind) await this.pollOnce();
    // Buckets newly followed start from now, before the subscriber can miss anything.
    for (const b of wanted) this.#follow(b);
    // Closed meanwhile (or before): the stream ends at once, and no poller starts again.
    if (this.#closed) {
      sub.end?.();
      return { resumed: 'none', unsubscribe: () => undefined };
    }
    const out: Subscribed = { resumed: 'none', unsubscribe: () => this.#unsubscribe(sub) };
    if (lastEventId !== undefined && lastEventId !== '') {
      const missed = this.#after(lastEventId, wanted);
      if ('reason' in missed) {
        out.resumed = 'reset';
        out.reason = missed.reason;
      } else {
        out.resumed = 'resumed';
        for (const e of missed.events) if (sub.buckets === null || sub.buckets.has(e.bucket)) sub.send(e);
      }
    }
    this.#subscribers.add(sub);
    this.#startTimer();
    return out;
  }

  /** One tick: one `tail` over every followed bucket, the events numbered, buffered and sent to whoever watches. */
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

  #unsubscribe(sub: Subscriber): void {
    if (!this.#subscribers.delete(sub)) return;
    if (this.#subscribers.size > 0) return;
    this.#stopTimer();
    // Nobody watches: every bucket starts lingering now, and the cursor falls behind.
    const now = Date.now();
    for (const f of this.#followed.values()) f.unwatchedAt ??= now;
    this.#behind = this.#followed.size > 0;
  }

  async #poll(): Promise<void> {
    const watched = await this.#watchedBuckets();
    const now = Date.now(); // lingering is a lifetime in real time
    for (const [b, f] of this.#followed) {
      if (watched.has(b)) f.unwatchedAt = null;
      else f.unwatchedAt ??= now;
    }
    this.#dropLingered(now);
    // A bucket created while someone watches every bucket is followed from now.
    for (const b of watched) this.#follow(b);
    const cursor = this.#cursor;
    if (cursor === undefined || this.#followed.size === 0) return;
    let r: Awaited<ReturnType<EventHubOptions['reads']['tail']>>;
    try {
      r = await this.#reads.tail([...this.#followed.keys()], cursor);
    } catch (e) {
      // A read past its budget, or the store in trouble: the cursor stays, the next tick tries again.
      this.#logger.debug({ err: e }, 'events: tail failed');
      return;
    }
    // Dropped meanwhile (lingered out): a new cursor was started, this read is stale.
    if (this.#cursor !== cursor) return;
    this.#cursor = r.cursor;
    this.#behind = false;
    for (const t of r.events) {
      const bucket = t.kind === 'request' ? t.request.bucket : t.bucket;
      const f = this.#followed.get(bucket);
      if (!f || !isFrom(t, f)) continue;
      const seq = ++this.#seq;
      const data = { ...tailEventJson(t), bucket };
      const e: HubEvent = { id: `${this.#hubId}.${seq}`, seq, bucket, event: data.event, data };
      this.#buffer.push(e);
      for (const s of this.#subscribers) if (s.buckets === null || s.buckets.has(bucket)) s.send(e);
    }
    if (this.#buffer.length > this.#bufferSize) this.#buffer = this.#buffer.slice(-this.#bufferSize);
  }

  /** Follows `bucket` from now when it is not followed yet (the shared cursor started with the first). */
  #follow(bucket: string): void {
    const known = this.#followed.get(bucket);
    if (known) {
      known.unwatchedAt = null;
      return;
    }
    const now = this.#clock.now();
    // Ids are made from the receiving clock when a request arrives: one made from now on is above.
    const fromRequestId = idFloorAt(now);
    this.#followed.set(bucket, { startSeq: this.#seq, fromRequestId, fromMs: now, unwatchedAt: null });
    this.#cursor ??= { requestId: fromRequestId, sinceMs: now, seen: [] };
  }

  /** Stops following the buckets nobody watched for LINGER_MS; with none left, the cursor goes too. */
  #dropLingered(now: number): void {
    for (const [b, f] of [...this.#followed]) if (f.unwatchedAt !== null && now - f.unwatchedAt >= LINGER_MS) this.#followed.delete(b);
    if (this.#followed.size === 0) {
      this.#cursor = undefined;
      this.#behind = false;
    }
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

  /**
   * The buffered events after `id`, or why they cannot be all that happened in `buckets` since:
   * the id is not this hub's, the next event has left the buffer, or a bucket was followed only
   * from after the id (it may have started after the client left, skipping what came between).
   */
  #after(id: string, buckets: readonly string[]): { events: HubEvent[] } | { reason: string } {
    const goesOn = 'the stream goes on from now';
    const m = /^([0-9a-f]+)\.(\d+)$/.exec(id);
    if (!m || m[1] !== this.#hubId) {
      return { reason: `event ${id} is not from this server start (the server restarted, or it is another server's): ${goesOn}` };
    }
    const seq = Number(m[2]);
    if (seq > this.#seq) return { reason: `event ${id} was never sent by this server start: ${goesOn}` };
    const first = this.#buffer[0];
    if (seq < this.#seq && (first === undefined || first.seq > seq + 1)) {
      return { reason: `the events after ${id} are no longer buffered (the server keeps the last ${this.#bufferSize}): ${goesOn}` };
    }
    for (const b of buckets) {
      if ((this.#followed.get(b)?.startSeq ?? Infinity) >= seq) {
        return {
          reason: `bucket ${b} was not followed when event ${id} was sent (nobody watched it for ${LINGER_MS / 1000} s, or the stream asked for other buckets then), so what happened in it since is unknown: ${goesOn}`,
        };
      }
    }
    return { events: this.#buffer.filter((e) => e.seq > seq) };
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

/** Whether an event read for a followed bucket happened since it is followed. */
function isFrom(t: TailEvent, f: Followed): boolean {
  return t.kind === 'request' ? t.request.id > f.fromRequestId : t.at >= f.fromMs;
}

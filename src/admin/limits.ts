import type { Context, MiddlewareHandler } from 'hono';
import type { ServerResponse } from 'node:http';

/**
 * Admin routes are for people and scrapers, not for load: at most `maxRequests` admin requests are
 * served at once (503 `admin_busy` past it), and long-lived streams (Server-Sent Events) have a cap
 * of their own, so that open streams neither starve the other routes nor grow without bound.
 *
 * A request holds its slot until its answer is written (on a real socket: until the Node response
 * closes, so a streamed export holds it to the end; through `app.request()`, until the handler
 * returns). A route that streams for long trades its request slot for a stream slot:
 *
 *   const slot = takeStreamSlot(c);
 *   if (!slot) return c.json({ error: 'too many event streams', code: 'admin_busy' }, 503);
 *   // ... stream; end it when slot.signal aborts (server stopping); then:
 *   slot.release();
 */
export interface AdminLimitOptions {
  maxRequests: number;
  maxStreams: number;
}

export const DEFAULT_ADMIN_LIMITS: AdminLimitOptions = { maxRequests: 32, maxStreams: 16 };

export interface StreamSlot {
  /** Aborted when the server stops: end the stream then. */
  readonly signal: AbortSignal;
  /** Frees the slot; safe to call more than once. */
  release(): void;
}

/** What the request middleware leaves on the context for takeStreamSlot. */
interface RequestSlot {
  toStream(): StreamSlot | undefined;
}

const SLOT_KEY = 'hookbucketAdminSlot';

export class AdminLimits {
  readonly options: AdminLimitOptions;
  #requests = 0;
  readonly #streams = new Set<AbortController>();
  #closing = new AbortController();
  #busy = 0;

  constructor(options: Partial<AdminLimitOptions> = {}) {
    this.options = { ...DEFAULT_ADMIN_LIMITS, ...options };
  }

  get requests(): number {
    return this.#requests;
  }

  get streams(): number {
    return this.#streams.size;
  }

  /** Requests refused as busy (requests and streams), for metrics. */
  get refused(): number {
    return this.#busy;
  }

  /** Takes a request slot for each request, or answers 503 `admin_busy`. */
  middleware(): MiddlewareHandler {
    return async (c, next) => {
      if (this.#requests >= this.options.maxRequests) {
        this.#busy++;
        return c.json({ error: `more than ${this.options.maxRequests} admin requests at once; try again`, code: 'admin_busy' }, 503, {
          'retry-after': '1',
        });
      }
      this.#requests++;
      let held = true;
      const release = () => {
        if (!held) return;
        held = false;
        this.#requests--;
      };
      const outgoing = (c.env as { outgoing?: ServerResponse } | undefined)?.outgoing;
      const slot: RequestSlot = {
        toStream: () => {
          const stream = this.#takeStream();
          if (!stream) return undefined;
          release();
          // A stream whose client went away frees its slot even if the route forgets to.
          outgoing?.once('close', stream.release);
          return stream;
        },
      };
      c.set(SLOT_KEY as never, slot as never);
      try {
        await next();
      } finally {
        // On a real socket the answer may still be streaming: hold the slot until it is written
        // (or the connection went). Through app.request() there is no socket.
        if (outgoing && !outgoing.closed) outgoing.once('close', release);
        else release();
      }
    };
  }

  #takeStream(): StreamSlot | undefined {
    if (this.#streams.size >= this.options.maxStreams) {
      this.#busy++;
      return undefined;
    }
    const ac = new AbortController();
    if (this.#closing.signal.aborted) ac.abort();
    this.#streams.add(ac);
    return { signal: ac.signal, release: () => void this.#streams.delete(ac) };
  }

  /** Aborts every open stream's signal (the server is stopping); streams taken later start aborted. */
  closeStreams(): void {
    this.#closing.abort();
    for (const ac of this.#streams) ac.abort();
  }
}

/**
 * For a long-lived route (SSE): trades the request's slot for a stream slot, or undefined when
 * streams are at their cap (answer 503 `admin_busy`). Outside the admin app (a sub-app tested on
 * its own) there is no limiter, and the slot is unlimited.
 */
export function takeStreamSlot(c: Context): StreamSlot | undefined {
  const slot = c.get(SLOT_KEY as never) as RequestSlot | undefined;
  if (!slot) return { signal: new AbortController().signal, release: () => undefined };
  return slot.toStream();
}

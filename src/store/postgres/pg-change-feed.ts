/**
 * The PostgreSQL change feed: one dedicated connection (not from the pool, which would hand it
 * back and lose the LISTEN) that LISTENs on REQUESTS_CHANNEL and BUCKETS_CHANNEL (pg-notify.ts).
 *
 * - A notice sets the flags `takeChanges()` hands out and calls every `onChange` listener (the
 *   worker's sleep ends on it).
 * - Notices sent while the connection is down are lost, so after a reconnect the feed reports a
 *   change of everything (a rescan of buckets and due work).
 * - While it is down, the feed polls: once a second it reports a change of everything and calls
 *   every listener, so the worker looks at the database as often as that.
 * - It reconnects with backoff (100 ms doubling to 5 s) after an error, the server's restart or
 *   a terminated backend, for as long as it is open.
 */
import pg from 'pg';
import type { Logger } from '../../shared/logger.js';
import type { StoreChanges } from '../store.js';
import { BUCKETS_CHANNEL, REQUESTS_CHANNEL } from './pg-notify.js';

/** While the LISTEN connection is down, listeners are called this often (ms). */
export const POLL_FALLBACK_MS = 1_000;
const RECONNECT_MIN_MS = 100;
const RECONNECT_MAX_MS = 5_000;
/**
 * A LISTEN connection only reads: a half-open one (the server's host gone without a RST) would
 * look alive for as long as TCP keepalive takes (hours with Linux defaults). A `select 1` this
 * often, failing after HEARTBEAT_TIMEOUT_MS, finds it within about 40 s.
 */
const HEARTBEAT_MS = 30_000;
const HEARTBEAT_TIMEOUT_MS = 10_000;

export interface PgChangeFeedOptions {
  url: string;
  /** How long one connection attempt may take, ms. */
  connectTimeoutMs?: number;
  applicationName?: string;
  logger?: Logger;
}

export class PgChangeFeed {
  readonly #o: PgChangeFeedOptions;
  #client: pg.Client | undefined;
  /** True once LISTEN succeeded on the current client, until it fails. */
  #up = false;
  #closed = false;
  #changed = true;
  #bucketsChanged = true;
  #connects = 0;
  #backoffMs = RECONNECT_MIN_MS;
  #retryTimer: NodeJS.Timeout | undefined;
  #heartbeatTimer: NodeJS.Timeout | undefined;
  #pollTimer: NodeJS.Timeout | undefined;
  readonly #listeners = new Set<() => void>();
  /** Settles when the connection in progress is up or has failed (tests, open). */
  #connecting: Promise<void> | undefined;

  constructor(options: PgChangeFeedOptions) {
    this.#o = options;
  }

  /** Connects and LISTENs; resolves once listening (or once the first try failed: it goes on trying, polling meanwhile). */
  async start(): Promise<void> {
    this.#startPolling();
    await this.#connect();
  }

  /** Whether the LISTEN connection is up now. */
  get listening(): boolean {
    return this.#up;
  }

  /** Successful LISTEN connections so far (1 after start; each reconnect adds one). */
  get connects(): number {
    return this.#connects;
  }

  /** The server process id of the LISTEN connection (tests terminate it), if up. */
  get backendPid(): number | undefined {
    return this.#up ? (this.#client as unknown as { processID?: number } | undefined)?.processID : undefined;
  }

  /**
   * What was noticed since the last call. While the connection is down, each fallback poll counts
   * as a change of everything, so a caller rescans at most once a second (listing 10,000 buckets
   * on every pass of a busy worker would cost more than the notices save).
   */
  takeChanges(): StoreChanges {
    const out = { changed: this.#changed, bucketsChanged: this.#bucketsChanged };
    this.#changed = false;
    this.#bucketsChanged = false;
    return out;
  }

  onChange(listener: () => void): () => void {
    this.#listeners.add(listener);
    return () => this.#listeners.delete(listener);
  }

  async close(): Promise<void> {
    this.#closed = true;
    clearTimeout(this.#retryTimer);
    clearInterval(this.#pollTimer);
    clearInterval(this.#heartbeatTimer);
    this.#listeners.clear();
    await this.#connecting?.catch(() => undefined);
    const c = this.#client;
    this.#client = undefined;
    this.#up = false;
    if (c) await c.end().catch(() => undefined);
  }

  #notify(buckets: boolean): void {
    this.#changed = true;
    if (buckets) this.#bucketsChanged = true;
    for (const l of [...this.#listeners]) {
      try {
        l();
      } catch (e) {
        this.#o.logger?.error({ err: e }, 'change listener failed');
      }
    }
  }

  #startPolling(): void {
    if (this.#pollTimer !== undefined) return;
    this.#pollTimer = setInterval(() => {
      if (!this.#up && !this.#closed) this.#notify(true);
    }, POLL_FALLBACK_MS);
    this.#pollTimer.unref();
  }

  #connect(): Promise<void> {
    const attempt = (async () => {
      const client = new pg.Client({
        connectionString: this.#o.url,
        connectionTimeoutMillis: this.#o.connectTimeoutMs ?? 10_000,
        application_name: this.#o.applicationName ?? 'hookbucket-listen',
        keepAlive: true,
        query_timeout: HEARTBEAT_TIMEOUT_MS,
      });
      let failed = false;
      const fail = (e?: unknown) => {
        if (failed) return;
        failed = true;
        this.#lost(client, e);
      };
      client.on('error', fail);
      client.on('end', () => fail());
      client.on('notification', (n) => {
        if (n.channel === BUCKETS_CHANNEL) this.#notify(true);
        else if (n.channel === REQUESTS_CHANNEL) this.#notify(false);
      });
      this.#client = client;
      try {
        await client.connect();
        await client.query(`listen ${REQUESTS_CHANNEL}; listen ${BUCKETS_CHANNEL}`);
      } catch (e) {
        fail(e);
        return;
      }
      if (failed || this.#closed) return;
      const reconnect = this.#connects > 0;
      this.#connects++;
      this.#up = true;
      this.#backoffMs = RECONNECT_MIN_MS;
      if (reconnect) this.#o.logger?.info('LISTEN connection back: rescanning for due work');
      this.#startHeartbeat(client);
      // Whatever was sent while no one listened is lost: report a change of everything.
      this.#notify(true);
    })();
    this.#connecting = attempt.finally(() => {
      if (this.#connecting === tracked) this.#connecting = undefined;
    });
    const tracked = this.#connecting;
    return tracked;
  }

  #startHeartbeat(client: pg.Client): void {
    clearInterval(this.#heartbeatTimer);
    this.#heartbeatTimer = setInterval(() => {
      if (this.#client !== client) return;
      client.query('select 1').catch((e: unknown) => this.#lost(client, e));
    }, HEARTBEAT_MS);
    this.#heartbeatTimer.unref();
  }

  #lost(client: pg.Client, e: unknown): void {
    if (this.#client !== client) return;
    clearInterval(this.#heartbeatTimer);
    this.#up = false;
    this.#client = undefined;
    client.end().catch(() => undefined);
    if (this.#closed) return;
    this.#o.logger?.warn({ err: e, retry_ms: this.#backoffMs }, 'LISTEN connection lost; polling once a second until it is back');
    const wait = this.#backoffMs;
    this.#backoffMs = Math.min(RECONNECT_MAX_MS, this.#backoffMs * 2);
    clearTimeout(this.#retryTimer);
    this.#retryTimer = setTimeout(() => void this.#connect(), wait);
    this.#retryTimer.unref();
  }
}

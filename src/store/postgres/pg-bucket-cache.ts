import pg from 'pg';
import { sql, type Kysely } from 'kysely';
import type { Database } from '../schema.js';
import type { Bucket } from '../store.js';
import { AppError } from '../../shared/errors.js';
import { toBucket } from '../bucket-row.js';
import { BUCKETS_CHANNEL } from './pg-notify.js';

/**
 * The bucket cache behind PgStore.resolveBucket (ingest's hot path), the PostgreSQL twin of
 * SqliteStore's data_version + bucket_epoch check. Every bucket write bumps meta.bucket_epoch and
 * sends a NOTIFY on BUCKETS_CHANNEL in its transaction (any process, any dialect helper), so:
 *
 * - while a LISTEN connection is up, a notice drops the cache. A notice arrives just after its
 *   commit (a round trip later, about a millisecond on one host), so a lookup in that window may
 *   still see the bucket as it was; SQLite's check is synchronous and has no such window;
 * - whatever the listener does, the epoch row is read at most every `epochCheckMs` (one primary-key
 *   read, only while lookups come) and a moved epoch drops the cache: that bounds how stale a
 *   bucket can be before the first connect, while the listener reconnects (1 s, doubling to 30 s
 *   between tries) and when its connection died unnoticed; each (re)connect drops the cache too,
 *   since notices sent while it was away are lost;
 * - a load that overlapped a drop is not cached (a generation count), so a notice that arrives
 *   while an old row is being read cannot leave that old row cached.
 *
 * The LISTEN connection is opened on the first lookup, so CLI commands, which never resolve,
 * open none. Misses are not cached: a bucket created a moment ago is found at once.
 */

export interface BucketCacheOptions {
  /** The database URL (the same server as the pool; LISTEN needs a connection of its own). */
  url: string;
  connectTimeoutMs: number;
  applicationName: string;
  /** Longest a cached bucket is trusted without re-reading the epoch, ms (notices drop it sooner). */
  epochCheckMs: number;
  /**
   * Longest a lookup waits for the database, ms (ingest's --lock-timeout): past it, a cached bucket
   * is served (the ingest batch checks the bucket again under its row lock, with its own deadline),
   * and a miss fails with storage_error (503). A network that drops packets would otherwise hold
   * the request until TCP gives up, many minutes later. Omitted: no limit.
   */
  lookupTimeoutMs?: number;
  /** A monotonic clock in ms for that interval (staleness, not a domain time); default performance.now. */
  monotonicNow?: () => number;
}

/** A bucket lookup the database did not answer in time: storage_error, so ingest answers 503. */
class LookupTimeout extends AppError {
  constructor(ms: number) {
    super('storage_error', `the database did not answer a bucket lookup within ${ms} ms`);
  }
}

const RECONNECT_MIN_MS = 1_000;
const RECONNECT_MAX_MS = 30_000;

export class PgBucketCache {
  readonly #db: Kysely<Database>;
  readonly #options: BucketCacheOptions;
  readonly #cache = new Map<string, Bucket>();
  /** Moves on every drop; a load caches its row only if it did not move meanwhile. */
  #generation = 0;
  #seenEpoch = -1;
  #epochCheckedAt = -Infinity;
  #epochCheck: Promise<void> | undefined;
  #listener: pg.Client | undefined;
  #listening = false;
  #started = false;
  #closed = false;
  #retryMs = RECONNECT_MIN_MS;
  #retryTimer: NodeJS.Timeout | undefined;

  constructor(db: Kysely<Database>, options: BucketCacheOptions) {
    this.#db = db;
    this.#options = options;
  }

  /** Whether a LISTEN connection is up (for tests and diagnostics). */
  get listening(): boolean {
    return this.#listening;
  }

  /** Drops every cached bucket (this process wrote one, or a notice said another did). */
  invalidate(): void {
    this.#generation++;
    this.#cache.clear();
  }

  async resolve(name: string): Promise<Bucket | undefined> {
    if (!this.#started && !this.#closed) {
      this.#started = true;
      void this.#connect();
    }
    // Also while listening: a connection that died without a word (no RST, keepalive not yet
    // failed) would otherwise leave the cache stale until the OS noticed, hours by default.
    const check = this.#checkEpoch();
    if (check !== undefined) {
      const cached = this.#cache.get(name);
      try {
        await this.#bounded(check);
      } catch (e) {
        if (cached !== undefined && e instanceof LookupTimeout) return cached;
        throw e;
      }
    }
    const hit = this.#cache.get(name);
    if (hit !== undefined) return hit;
    const generation = this.#generation;
    const row = await this.#bounded(
      this.#db.selectFrom('buckets').selectAll().where('name', '=', name).where('deleting_at', 'is', null).executeTakeFirst(),
    );
    const bucket = row ? toBucket(row) : undefined;
    if (bucket && generation === this.#generation && !this.#closed) this.#cache.set(name, bucket);
    return bucket;
  }

  /** `p`, or a LookupTimeout after lookupTimeoutMs (the query itself goes on, and its answer is dropped). */
  #bounded<T>(p: Promise<T>): Promise<T> {
    const ms = this.#options.lookupTimeoutMs;
    if (ms === undefined) return p;
    p.catch(() => undefined);
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(new LookupTimeout(ms)), ms);
    });
    return Promise.race([p, late]).finally(() => clearTimeout(timer));
  }

  /** Re-reads the epoch at most every epochCheckMs; concurrent lookups share one read. */
  #checkEpoch(): Promise<void> | undefined {
    if (this.#epochCheck !== undefined) return this.#epochCheck;
    const now = (this.#options.monotonicNow ?? performance.now.bind(performance))();
    if (now - this.#epochCheckedAt < this.#options.epochCheckMs) return undefined;
    this.#epochCheckedAt = now;
    this.#epochCheck = (async () => {
      try {
        const row = await sql<{ value: number }>`select value from meta where key = 'bucket_epoch'`.execute(this.#db);
        const epoch = Number(row.rows[0]?.value ?? 0);
        if (epoch !== this.#seenEpoch) {
          this.#seenEpoch = epoch;
          this.invalidate();
        }
      } catch (e) {
        this.#epochCheckedAt = -Infinity; // the next lookup tries again
        throw e;
      } finally {
        this.#epochCheck = undefined;
      }
    })();
    return this.#epochCheck;
  }

  async #connect(): Promise<void> {
    if (this.#closed) return;
    const client = new pg.Client({
      connectionString: this.#options.url,
      connectionTimeoutMillis: this.#options.connectTimeoutMs,
      application_name: `${this.#options.applicationName}-buckets`,
      keepAlive: true,
    });
    this.#listener = client;
    let failed = false;
    const fail = () => {
      if (failed) return;
      failed = true;
      this.#listening = false;
      if (this.#listener === client) this.#listener = undefined;
      client.removeAllListeners('notification');
      client.end().catch(() => undefined);
      this.#scheduleReconnect();
    };
    client.on('error', fail);
    client.on('end', fail);
    client.on('notification', (n) => {
      if (n.channel === BUCKETS_CHANNEL) this.invalidate();
    });
    try {
      await client.connect();
      await client.query(`listen ${BUCKETS_CHANNEL}`);
    } catch {
      fail();
      return;
    }
    if (this.#closed || failed) {
      client.end().catch(() => undefined);
      return;
    }
    // Notices sent before LISTEN took effect are lost: start from an empty cache.
    this.invalidate();
    this.#listening = true;
    this.#retryMs = RECONNECT_MIN_MS;
  }

  #scheduleReconnect(): void {
    if (this.#closed || this.#retryTimer !== undefined) return;
    const wait = this.#retryMs;
    this.#retryMs = Math.min(RECONNECT_MAX_MS, this.#retryMs * 2);
    this.#retryTimer = setTimeout(() => {
      this.#retryTimer = undefined;
      void this.#connect();
    }, wait);
    // A reconnect never keeps the process alive on its own.
    this.#retryTimer.unref();
  }

  async close(): Promise<void> {
    this.#closed = true;
    this.#listening = false;
    if (this.#retryTimer !== undefined) clearTimeout(this.#retryTimer);
    this.#retryTimer = undefined;
    const client = this.#listener;
    this.#listener = undefined;
    if (client) {
      client.removeAllListeners('end');
      client.removeAllListeners('error');
      // An 'error' after end() (socket reset) must not become an unhandled event.
      client.on('error', () => undefined);
      await client.end().catch(() => undefined);
    }
    this.#cache.clear();
  }
}

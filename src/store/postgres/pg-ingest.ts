import { createHash, webcrypto } from 'node:crypto';
import { mkdir, statfs } from 'node:fs/promises';
import type pg from 'pg';
import type { Config } from '../../config/config.js';
import { AppError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { CapturedRequest, IngestSink, StorageHealth } from '../store.js';
import {
  MAX_BIND_PARAMS,
  MAX_STATEMENT_BYTES,
  writeIngestBatch,
  type BatchLimits,
  type BatchOutcome,
  type PgIngestRow,
  type PgRejectionCount,
} from './pg-ingest-batch.js';
import { pgStorageErrorCode } from './pg-error.js';
import { createPgPool } from './pg-pool.js';
import { settleWithin } from './pg-close.js';

export interface PgIngestOptions {
  /**
   * `db` is the postgres:// URL the sink's own pool connects to (unused when `pool` is given).
   * `spoolDir` (`--spool-dir`): the folder large chunked bodies spool to, the one --min-free-disk
   * watches here, since PostgreSQL's own disk is not ours to measure.
   */
  config: Pick<Config, 'db' | 'durability' | 'lockTimeoutMs' | 'minFreeDisk' | 'spoolDir'> & Partial<Pick<Config, 'dbPool'>>;
  logger: Logger;
  /** Write through this pool (close() leaves it open); without it the sink makes its own. */
  pool?: pg.Pool;
  /** Transactions in flight at most (and the own pool's size); default 4, or --db-pool if smaller. */
  maxBatches?: number;
  /** How often free disk space is measured (statfs), and an unreachable database probed. */
  diskCheckEveryMs?: number;
  /** Called after each committed batch that stored requests. */
  onCommitted?: () => void;
  /** Tests with a manual clock: first attempts due at their receipt time, not the database's now. */
  useCallerClock?: boolean;
  /** Statement caps (tests lower them to exercise the split). */
  limits?: Partial<BatchLimits>;
}

const DISK_CHECK_MS = 1000;
const REJECTION_FLUSH_MS = 1000;
/**
 * Concurrent group-commit transactions. Requests arriving while all are busy wait for the next one
 * and go in together (larger batches when commits are slow); more than one keeps a 100 MiB body
 * from holding up small requests' acknowledgements behind it.
 */
const DEFAULT_MAX_BATCHES = 4;
/** Session limits of the sink's own pool: a statement may carry a 100 MiB body (60 s is ~1.7 MiB/s). */
const STATEMENT_TIMEOUT_MS = 60_000;
/**
 * The server ends a transaction left idle this long (this process stalled with bucket and
 * bucket_due row locks held, which would stall claims). 30 s, since receiving one statement's
 * large Bind message also counts as idle on the server.
 */
const IDLE_IN_TRANSACTION_MS = 30_000;
/**
 * A batch still unanswered this long past its deadline, plus its bytes at this rate, is given up:
 * the connection is destroyed (a silent network drop would otherwise hang the query for the
 * kernel's TCP retransmission timeout, ~15 min) and its requests are answered 503.
 */
const WATCHDOG_GRACE_MS = 1000;
const MIN_SEND_BYTES_PER_MS = (16 * 1024 * 1024) / 1000; // 16 MiB/s
/** Bodies from this size are hashed on libuv's thread pool (WebCrypto) instead of the event loop. */
const ASYNC_HASH_BYTES = 256 * 1024;

const failureMessage = {
  store_busy: 'storage is busy, retry later',
  storage_full: 'storage cannot take writes',
  storage_error: 'storage cannot take writes',
} as const;
type FailureCode = keyof typeof failureMessage;

interface Item {
  seq: number;
  req: CapturedRequest;
  createDelivery: boolean;
  /** Epoch ms after which the request is answered 503 rather than wait longer for the database. */
  deadline: number;
}

interface Pending {
  resolve: () => void;
  reject: (e: AppError) => void;
}

/** Why a batch was not committed: a code for the 503, and whether the database seemed gone. */
class BatchFailure extends Error {
  constructor(
    readonly code: FailureCode,
    message: string,
    readonly connectionLost: boolean,
    options?: { cause?: unknown },
  ) {
    super(message, options);
  }
}

/**
 * The PostgreSQL ingest sink: group commit over a small pool. Requests submitted during one
 * event-loop turn (and those that arrive while every transaction slot is busy) go into one
 * transaction: multi-row INSERTs of requests, their first deliveries, the buckets' due times,
 * buffered rejection counts, and one NOTIFY. Each `submit()` resolves after its COMMIT succeeded,
 * and rejects with a storage code (the ingest route answers 503) when it did not or may not have.
 *
 * Duplicates: when the connection drops after COMMIT was sent (or the watchdog gives up such a
 * batch), the server may have committed it anyway; its requests are answered 503 all the same
 * (never a 2xx for a commit not seen), so a sender that retries after that 503 can have the request
 * stored twice, under two ids, and delivered twice. A consumer that needs exactly-once
 * de-duplicates on the sender's own delivery id header (X-GitHub-Delivery, webhook-id, …), which
 * both copies carry byte for byte.
 */
export class PgIngest implements IngestSink {
  readonly #opts: PgIngestOptions;
  readonly #log: Logger;
  readonly #pool: pg.Pool;
  readonly #ownPool: boolean;
  readonly #maxBatches: number;
  readonly #limits: BatchLimits;
  readonly #pending = new Map<number, Pending>();
  #outbox: Item[] = [];
  #rejections = new Map<string, PgRejectionCount>();
  #seq = 0;
  #inflight = 0;
  #flushScheduled = false;
  #diskTimer: NodeJS.Timeout | undefined;
  #rejectionTimer: NodeJS.Timeout | undefined;
  #expiryTimer: NodeJS.Timeout | undefined;
  #lowDisk: { free: number } | undefined;
  #lastFailure: { code: string; message: string; connectionLost: boolean } | undefined;
  #probing = false;
  #closed = false;
  #idleWaiters: Array<() => void> = [];

  private constructor(opts: PgIngestOptions) {
    this.#opts = opts;
    this.#log = opts.logger;
    this.#maxBatches = opts.maxBatches ?? Math.min(DEFAULT_MAX_BATCHES, opts.config.dbPool ?? DEFAULT_MAX_BATCHES);
    this.#limits = {
      maxStatementBytes: opts.limits?.maxStatementBytes ?? MAX_STATEMENT_BYTES,
      maxParams: opts.limits?.maxParams ?? MAX_BIND_PARAMS,
    };
    this.#ownPool = opts.pool === undefined;
    this.#pool =
      opts.pool ??
      createPgPool({
        url: opts.config.db,
        max: this.#maxBatches,
        statementTimeoutMs: STATEMENT_TIMEOUT_MS,
        idleInTransactionTimeoutMs: IDLE_IN_TRANSACTION_MS,
        // A connection that cannot be made within the lock timeout fails the batch (503).
        connectTimeoutMs: opts.config.lockTimeoutMs,
        synchronousCommit: opts.config.durability === 'normal' ? 'off' : 'on',
        applicationName: 'hookbucket-ingest',
      });
  }

  static async start(opts: PgIngestOptions): Promise<PgIngest> {
    const ingest = new PgIngest(opts);
    try {
      // Fails the start when the database cannot be reached at all, as SQLite's open does.
      await ingest.#pool.query('select 1');
      await mkdir(opts.config.spoolDir, { recursive: true, mode: 0o700 });
    } catch (e) {
      if (ingest.#ownPool) await ingest.#pool.end().catch(() => undefined);
      throw e;
    }
    await ingest.#checkDisk();
    ingest.#diskTimer = setInterval(() => {
      void ingest.#checkDisk();
      void ingest.#probe();
    }, opts.diskCheckEveryMs ?? DISK_CHECK_MS);
    ingest.#diskTimer.unref();
    ingest.#rejectionTimer = setInterval(() => ingest.#flush(true), REJECTION_FLUSH_MS);
    ingest.#rejectionTimer.unref();
    return ingest;
  }

  health(): StorageHealth {
    if (this.#closed) return { ok: false, code: 'storage_error', reason: 'ingest is closed' };
    if (this.#lowDisk) {
      return {
        ok: false,
        code: 'storage_full',
        reason: `free disk ${this.#lowDisk.free} bytes in the spool folder is under the floor of ${this.#opts.config.minFreeDisk}`,
      };
    }
    if (this.#lastFailure) return { ok: false, code: this.#lastFailure.code, reason: this.#lastFailure.message };
    return { ok: true };
  }

  /**
   * Whether a new request may be taken at all. A failed batch does not refuse (the next batch is
   * the probe that notices the database is back); a full spool disk does.
   */
  accepting(): StorageHealth {
    if (this.#closed || this.#lowDisk) return this.health();
    return { ok: true };
  }

  submit(req: CapturedRequest, options: { createDelivery: boolean }): Promise<void> {
    if (this.#closed) return Promise.reject(new AppError('storage_error', 'storage is closing'));
    const seq = ++this.#seq;
    this.#outbox.push({ seq, req, createDelivery: options.createDelivery, deadline: Date.now() + this.#opts.config.lockTimeoutMs });
    this.#schedule();
    return new Promise<void>((resolve, reject) => this.#pending.set(seq, { resolve, reject }));
  }

  countRejection(bucket: string, reason: string): void {
    const key = `${bucket}\u0000${reason}`;
    const prev = this.#rejections.get(key);
    const now = Date.now();
    if (prev) {
      prev[2] += 1;
      prev[3] = Math.max(prev[3], now);
    } else this.#rejections.set(key, [bucket, reason, 1, now]);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    clearInterval(this.#diskTimer);
    clearInterval(this.#rejectionTimer);
    this.#flush(true);
    // Every submitted request settles (committed or refused) before the pool closes.
    await this.#idle();
    // Counts refused by the last batch get one more try.
    if (this.#rejections.size > 0) {
      this.#flush(true);
      await this.#idle();
    }
    clearTimeout(this.#expiryTimer);
    if (this.#ownPool) await settleWithin(this.#pool.end());
  }

  #schedule(): void {
    if (this.#flushScheduled) return;
    this.#flushScheduled = true;
    setImmediate(() => {
      this.#flushScheduled = false;
      this.#flush(false);
    });
  }

  /** Starts a transaction for what is queued if a slot is free; `withLoneRejections`: even with no request queued. */
  #flush(withLoneRejections: boolean): void {
    if (this.#inflight >= this.#maxBatches) {
      this.#armExpiry();
      return;
    }
    if (this.#outbox.length === 0 && (!withLoneRejections || this.#rejections.size === 0)) return;
    const items = this.#outbox;
    const rejections = [...this.#rejections.values()];
    this.#outbox = [];
    this.#rejections = new Map();
    this.#inflight++;
    void this.#run(items, rejections).finally(() => {
      this.#inflight--;
      if (this.#outbox.length > 0) this.#schedule();
      else if (this.#inflight === 0) for (const f of this.#idleWaiters.splice(0)) f();
    });
  }

  /**
   * While every slot is busy (a slow or unreachable database), queued requests are answered 503 at
   * their own deadline rather than when a slot frees, which can be a watchdog period later.
   */
  #armExpiry(): void {
    if (this.#expiryTimer !== undefined || this.#outbox.length === 0) return;
    // The outbox is in arrival order, so its first item has the earliest deadline.
    this.#expiryTimer = setTimeout(
      () => {
        this.#expiryTimer = undefined;
        const now = Date.now();
        const expired = this.#outbox.filter((i) => i.deadline <= now);
        if (expired.length > 0) {
          this.#outbox = this.#outbox.filter((i) => i.deadline > now);
          const code = this.#lastFailure?.connectionLost ? 'storage_error' : 'store_busy';
          this.#fail(
            expired.map((i) => i.seq),
            new BatchFailure(code, 'no transaction slot within the lock timeout', false),
          );
          if (this.#outbox.length === 0 && this.#inflight === 0) for (const f of this.#idleWaiters.splice(0)) f();
        }
        this.#armExpiry();
      },
      Math.max(0, this.#outbox[0]!.deadline - Date.now()),
    );
  }

  #idle(): Promise<void> {
    if (this.#inflight === 0 && this.#outbox.length === 0) return Promise.resolve();
    return new Promise((r) => this.#idleWaiters.push(r));
  }

  async #run(items: Item[], rejections: PgRejectionCount[]): Promise<void> {
    let rows: PgIngestRow[];
    try {
      rows = await Promise.all(items.map(toRow));
    } catch (e) {
      this.#fail(
        items.map((i) => i.seq),
        new BatchFailure('storage_error', `hashing failed: ${String(e)}`, false, { cause: e }),
      );
      this.#restoreRejections(rejections);
      return;
    }
    // Requests that waited past their deadline for a free transaction slot are answered 503 now
    // rather than wait longer (as SQLite's writer does with its lock wait).
    const now = Date.now();
    const expired = items.filter((i) => i.deadline <= now).map((i) => i.seq);
    if (expired.length > 0) {
      this.#fail(expired, new BatchFailure('store_busy', 'no transaction slot within the lock timeout', false));
      const gone = new Set(expired);
      rows = rows.filter((r) => !gone.has(r.seq));
    }
    if (rows.length === 0 && rejections.length === 0) return;
    const deadline = items.reduce((d, i) => (i.deadline > now ? Math.min(d, i.deadline) : d), now + this.#opts.config.lockTimeoutMs);
    const started = performance.now();
    try {
      const outcome = await this.#commit(rows, rejections, deadline);
      if (this.#lastFailure) this.#log.info('database writes work again');
      this.#lastFailure = undefined;
      this.#lastAnsweredAt = performance.now();
      const missing = new Set(outcome.missing);
      for (const r of rows) {
        if (missing.has(r.seq)) this.#settle(r.seq)?.reject(new AppError('unknown_bucket', 'no such bucket'));
        else this.#settle(r.seq)?.resolve();
      }
      this.#log.trace({ count: rows.length, ms: performance.now() - started }, 'batch committed');
      if (outcome.stored.length > 0) this.#opts.onCommitted?.();
    } catch (e) {
      const f = e instanceof BatchFailure ? e : new BatchFailure('storage_error', String(e), false, { cause: e });
      if (f.code !== 'store_busy') this.#lastFailure = { code: f.code, message: f.message, connectionLost: f.connectionLost };
      this.#log.warn({ code: f.code, count: rows.length, msg: f.message, err: f.cause }, 'batch not committed');
      this.#restoreRejections(rejections);
      this.#fail(
        rows.map((r) => r.seq),
        f,
      );
    }
  }

  /**
   * One transaction on one pooled connection. Any failure rejects the whole batch; a failure at or
   * after COMMIT is an unknown outcome and is answered the same way (see the class comment on
   * duplicates).
   */
  async #commit(rows: PgIngestRow[], rejections: PgRejectionCount[], deadline: number): Promise<BatchOutcome> {
    const client = await this.#checkout(deadline);
    const bytes = rows.reduce((n, r) => n + r.body.byteLength, 0);
    // Set by the transaction as it goes; read by the watchdog and the error path.
    const at: { phase: 'work' | 'commit' } = { phase: 'work' };
    let released = false;
    // pg emits 'error' on a checked-out client whose connection drops (besides failing its query);
    // unheard, that would crash the process. The failing query is what we act on.
    const ignore = () => undefined;
    client.on('error', ignore);
    const release = (destroy?: Error) => {
      if (released) return;
      released = true;
      if (destroy) client.connection.stream.destroy();
      else client.off('error', ignore);
      client.release(destroy);
    };
    const work = (async () => {
      await client.query('begin');
      // Lock waits (a bucket being deleted, a claim holding the bucket's due row) end at the
      // batch's deadline; synchronous_commit per transaction, so a shared pool cannot weaken it.
      await client.query({
        text: `select set_config('lock_timeout', $1, true), set_config('synchronous_commit', $2, true)`,
        values: [`${Math.max(1, Math.floor(deadline - Date.now()))}ms`, this.#opts.config.durability === 'normal' ? 'off' : 'on'],
      });
      const outcome = await writeIngestBatch(client, rows, rejections, this.#limits, this.#opts.useCallerClock === true);
      at.phase = 'commit';
      await client.query('commit');
      return outcome;
    })();
    let timer: NodeJS.Timeout | undefined;
    const watchdog = new Promise<never>((_, reject) => {
      const ms = Math.max(0, deadline - Date.now()) + WATCHDOG_GRACE_MS + bytes / MIN_SEND_BYTES_PER_MS;
      timer = setTimeout(() => {
        // Before COMMIT was sent nothing can have been stored; after it, the outcome is unknown.
        const outcome = at.phase === 'commit' ? 'commit outcome unknown' : 'nothing committed';
        reject(new BatchFailure('storage_error', `database did not answer within ${Math.round(ms)} ms; ${outcome}`, true));
        release(new Error('ingest batch watchdog'));
      }, ms);
    });
    try {
      const outcome = await Promise.race([work, watchdog]);
      release();
      return outcome;
    } catch (e) {
      work.catch(() => undefined);
      if (e instanceof BatchFailure) throw e;
      const lost = isConnectionLoss(e);
      if (lost || at.phase === 'commit') release(e as Error);
      else {
        // A statement failed on a healthy connection: roll back and keep the connection.
        await client.query('rollback').then(
          () => release(),
          (r: unknown) => release(r as Error),
        );
      }
      const code = pgStorageErrorCode(e) ?? 'storage_error';
      const message = e instanceof Error ? e.message : String(e);
      throw new BatchFailure(code, at.phase === 'commit' ? `commit failed, outcome unknown: ${message}` : message, lost, { cause: e });
    } finally {
      clearTimeout(timer);
    }
  }

  /** A pooled connection by the deadline; a late one goes back to the pool. */
  async #checkout(deadline: number): Promise<pg.PoolClient> {
    const connecting = this.#pool.connect();
    let timer: NodeJS.Timeout | undefined;
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(
        () => {
          // Every connection busy: the database is slow (busy); fewer than the maximum open: a new
          // connection is still being made, so the server is slow to reach (an error).
          const exhausted = this.#pool.totalCount >= (this.#pool.options.max ?? 10);
          reject(
            exhausted
              ? new BatchFailure('store_busy', 'no database connection free within the lock timeout', false)
              : new BatchFailure('storage_error', 'database not reached within the lock timeout', true),
          );
          connecting.then(
            (c) => c.release(),
            () => undefined,
          );
        },
        Math.max(0, deadline - Date.now()),
      );
    });
    try {
      return await Promise.race([connecting, late]);
    } catch (e) {
      if (e instanceof BatchFailure) throw e;
      throw new BatchFailure(pgStorageErrorCode(e) ?? 'storage_error', e instanceof Error ? e.message : String(e), isConnectionLoss(e), {
        cause: e,
      });
    } finally {
      clearTimeout(timer);
    }
  }

  /**
   * While the last batch failed because the database was unreachable, a cheap query each second
   * tells /healthz when it is back, so a load balancer that stopped sending traffic on `degraded`
   * (and so no batch would probe) sees it recover.
   */
  /**
   * A `select 1` within the lock timeout: after a lost connection, until the database answers
   * again (so `degraded` clears with no traffic); and while idle, once a tick with no commit in
   * it, so a database that went silent (a dropped network, no RST) shows as degraded on /healthz
   * before traffic finds it.
   */
  /** When the database last answered (a commit or a probe), performance.now() ms. */
  #lastAnsweredAt = performance.now();

  async #probe(): Promise<void> {
    if (this.#probing) return;
    // Idle: no batch in flight (a batch in flight has its own deadline and watchdog, and a probe
    // would wait behind it for a connection) and none answered within the last tick.
    const idle = this.#inflight === 0 && performance.now() - this.#lastAnsweredAt >= (this.#opts.diskCheckEveryMs ?? DISK_CHECK_MS);
    if (!this.#lastFailure?.connectionLost && !idle) return;
    this.#probing = true;
    const waitMs = this.#opts.config.lockTimeoutMs;
    let timer: NodeJS.Timeout | undefined;
    try {
      const client = await this.#checkout(Date.now() + waitMs);
      const ignore = () => undefined;
      client.on('error', ignore);
      // A connection into a black hole never answers: destroyed after the wait, so the probe
      // cannot hang and stop every later probe.
      const hung = new Promise<never>((_, reject) => {
        timer = setTimeout(() => {
          client.connection.stream.destroy();
          reject(new Error('probe not answered'));
        }, waitMs);
      });
      try {
        const answered = client.query('select 1');
        answered.catch(() => undefined);
        await Promise.race([answered, hung]);
        client.off('error', ignore);
        client.release();
      } catch (e) {
        client.release(e as Error);
        throw e;
      }
      this.#lastAnsweredAt = performance.now();
      if (this.#lastFailure?.connectionLost) {
        this.#lastFailure = undefined;
        this.#log.info('database reachable again');
      }
    } catch (e) {
      // Unreachable (or still): degraded until a probe or a batch gets an answer.
      if (!this.#lastFailure) this.#log.warn({ err: e }, 'database not answering');
      this.#lastFailure = { code: 'storage_error', message: `database not answering: ${(e as Error).message}`, connectionLost: true };
    } finally {
      clearTimeout(timer);
      this.#probing = false;
    }
  }

  async #checkDisk(): Promise<void> {
    try {
      const s = await statfs(this.#opts.config.spoolDir);
      const free = s.bavail * s.bsize;
      const wasLow = this.#lowDisk !== undefined;
      this.#lowDisk = free < this.#opts.config.minFreeDisk ? { free } : undefined;
      if (wasLow !== (this.#lowDisk !== undefined)) {
        this.#log.warn(
          { free, floor: this.#opts.config.minFreeDisk },
          this.#lowDisk ? 'free disk under floor: ingest paused' : 'free disk recovered',
        );
      }
    } catch (e) {
      this.#log.warn({ err: e }, 'statfs failed');
    }
  }

  /**
   * The 503 for a batch not committed. When the failure came at or after COMMIT (the connection
   * dropped, the watchdog fired), the server may have stored the batch all the same: a sender's
   * retry after this 503 can then store a duplicate. Never a 2xx without a COMMIT seen to succeed.
   */
  #fail(seqs: number[], f: BatchFailure): void {
    const err = new AppError(f.code, failureMessage[f.code], { cause: f });
    for (const seq of seqs) this.#settle(seq)?.reject(err);
  }

  #settle(seq: number): Pending | undefined {
    const p = this.#pending.get(seq);
    this.#pending.delete(seq);
    return p;
  }

  /** Counts of a failed batch go out with a later one. */
  #restoreRejections(counts: PgRejectionCount[]): void {
    for (const [bucket, reason, count, lastAt] of counts) {
      const key = `${bucket}\u0000${reason}`;
      const prev = this.#rejections.get(key);
      if (prev) {
        prev[2] += count;
        prev[3] = Math.max(prev[3], lastAt);
      } else this.#rejections.set(key, [bucket, reason, count, lastAt]);
    }
  }
}

async function toRow(it: Item): Promise<PgIngestRow> {
  const { req } = it;
  const body = req.body;
  const sha256 =
    body.byteLength >= ASYNC_HASH_BYTES
      ? Buffer.from(await webcrypto.subtle.digest('SHA-256', body)).toString('hex')
      : createHash('sha256').update(body).digest('hex');
  return {
    seq: it.seq,
    id: req.id,
    bucket: req.bucket,
    receivedAt: req.receivedAt,
    method: req.method,
    path: req.path,
    query: req.query,
    headers: JSON.stringify(req.rawHeaders),
    body,
    sha256,
    peer: req.peer,
    trailers: req.rawTrailers && req.rawTrailers.length > 0 ? JSON.stringify(req.rawTrailers) : null,
    createDelivery: it.createDelivery,
    ...(req.disposition !== undefined ? { disposition: req.disposition } : {}),
    ...(req.verdict !== undefined ? { verdict: req.verdict } : {}),
    ...(req.dedup !== undefined ? { dedup: req.dedup } : {}),
  };
}

/** Whether the error means the connection is gone (the server stopped, a backend was terminated, the network dropped). */
function isConnectionLoss(e: unknown): boolean {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === 'string') {
    if (code.startsWith('08') || code === '57P01' || code === '57P02' || code === '57P03') return true;
    if (/^E[A-Z]+$/.test(code)) return true;
  }
  const message = (e as { message?: unknown } | null)?.message;
  return (
    typeof message === 'string' &&
    /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error|not queryable/i.test(message)
  );
}

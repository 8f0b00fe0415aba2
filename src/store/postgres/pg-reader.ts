/**
 * The admin reader on PostgreSQL: a PgStore of its own on a small read-only pool, so admin reads
 * never take the connections ingest and the CLI store use. The driver is asynchronous, so a long
 * read never holds the event loop; what the budget bounds here is the database's work and the
 * caller's wait:
 * - every statement on this pool has `statement_timeout` = the budget, so the server cancels it
 *   there (SQLSTATE 57014, reported as `query_timeout`) and its connection is free again;
 * - as a backstop (a call of several statements each within the budget, a server that stopped
 *   answering), a call is answered `query_timeout` BACKSTOP_MS after its budget; its connection
 *   then counts against the pool until the driver gives it back.
 * At most `poolMax` calls run at once and `maxQueued` wait; past that, `admin_busy`.
 */
import { AppError } from '../../shared/errors.js';
import type { Store } from '../store.js';
import {
  adminBusyError,
  DEFAULT_MAX_QUEUED,
  queryTimeoutError,
  readerClosedError,
  type ReadableMethod,
  type StoreReader,
  type StoreReaderDeps,
  type StoreReaderOptions,
} from '../store-reader.js';
import { pgStorageErrorCode } from './pg-error.js';
import { PgStore } from './pg-store.js';

export interface PgReaderOptions<M extends ReadableMethod> extends StoreReaderOptions<M> {
  url: string;
  /** Connections, and so calls running at once. Default 2. */
  poolMax?: number;
  connectTimeoutMs: number;
}

/** SQLSTATE query_canceled: statement_timeout (or a cancel request) stopped the statement. */
const QUERY_CANCELED = '57014';
/** SQLSTATE read_only_sql_transaction: a write on this pool (default_transaction_read_only). */
const READ_ONLY_SQL_TRANSACTION = '25006';

/**
 * How long after its budget a call is answered when the server has not cancelled it: later than
 * statement_timeout, so that a statement past the budget is normally reported as the server
 * cancelled it, with its connection already free.
 */
const BACKSTOP_MS = 250;

interface Waiter {
  start: () => void;
  fail: (e: AppError) => void;
}

export async function openPgReader<M extends ReadableMethod>(options: PgReaderOptions<M>, deps: StoreReaderDeps): Promise<StoreReader<M>> {
  const budgetMs = Math.max(1, Math.ceil(options.budgetMs));
  const poolMax = options.poolMax ?? 2;
  const maxQueued = options.maxQueued ?? DEFAULT_MAX_QUEUED;
  const store = await PgStore.open({
    url: options.url,
    max: poolMax,
    statementTimeoutMs: budgetMs,
    idleInTransactionTimeoutMs: budgetMs,
    connectTimeoutMs: options.connectTimeoutMs,
    synchronousCommit: 'on',
    readOnly: true,
    migrate: false,
    applicationName: 'hookbucket-admin-reads',
    clock: deps.clock,
    useCallerClock: deps.useCallerClock === true,
  });
  let running = 0;
  let closed = false;
  const queue: Waiter[] = [];

  const release = () => {
    running--;
    const next = queue.shift();
    if (next) {
      running++;
      next.start();
    }
  };

  const call = (method: M, args: unknown[]): Promise<unknown> => {
    if (closed) return Promise.reject(readerClosedError());
    if (running >= poolMax && queue.length >= maxQueued) return Promise.reject(adminBusyError(maxQueued));
    return new Promise<unknown>((resolve, reject) => {
      const start = () => {
        const timer = setTimeout(() => reject(queryTimeoutError(method, budgetMs)), budgetMs + BACKSTOP_MS);
        const fn = store[method] as (...a: unknown[]) => Promise<unknown>;
        fn.apply(store, args)
          .then(resolve, (e: unknown) => reject(readError(e, method, budgetMs)))
          .finally(() => {
            clearTimeout(timer);
            // The slot is free once the database is done with it, not when the caller was answered.
            release();
          });
      };
      if (running < poolMax) {
        running++;
        start();
      } else queue.push({ start, fail: reject });
    });
  };

  const methods = Object.fromEntries(options.methods.map((m) => [m, (...args: unknown[]) => call(m, args)]));
  return Object.assign(methods, {
    status: () => ({ threadsStarted: 0, abandoned: 0, queued: queue.length, running }),
    close: async () => {
      if (closed) return;
      closed = true;
      for (const w of queue.splice(0)) w.fail(readerClosedError());
      await store.close();
    },
  }) as unknown as StoreReader<M> & Pick<Store, M>;
}

/** A read's error as the reader reports it: a cancelled statement is `query_timeout`, driver storage errors AppErrors with their code. */
function readError(e: unknown, method: string, budgetMs: number): unknown {
  if (e instanceof AppError) return e;
  const code = (e as { code?: unknown } | null)?.code;
  if (code === QUERY_CANCELED) return queryTimeoutError(method, budgetMs, 'cancelled by the database');
  // A write on this read-only pool: storage_error, as SQLite's SQLITE_READONLY is.
  if (code === READ_ONLY_SQL_TRANSACTION)
    return new AppError('storage_error', `the admin reader is read-only: ${(e as Error).message}`, { cause: e });
  const storage = pgStorageErrorCode(e);
  return storage === undefined ? e : new AppError(storage, (e as Error).message, { cause: e });
}

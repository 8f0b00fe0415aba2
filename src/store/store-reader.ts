/**
 * A reader: some of the Store's read methods, served with a time budget per call, on a connection
 * (SQLite: a thread) of its own, so that a long admin read never holds the process's event loop or
 * its main connection. Dialect-neutral: the contract, the options and the errors; each dialect's
 * reader lives in its folder (sqlite/sqlite-reader.ts, postgres/pg-reader.ts) and open-store.ts
 * picks one.
 */
import type { Clock } from '../shared/clock.js';
import { AppError, type ErrorCode } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { Store } from './store.js';

/**
 * Store methods a reader may serve: every one returns a Promise of plain data (no iterator, no
 * handle), which the SQLite reader hands across threads by structured clone.
 */
export type ReadableMethod = Exclude<keyof Store, WriteMethod | 'iterateRequests' | 'openImporter' | 'close'>;

/** The Store's writes: never a reader's (its connection is read-only anyway: SQLite read-only, PostgreSQL read-only transactions). */
type WriteMethod =
  | 'createBucket'
  | 'updateBucket'
  | 'pauseBucket'
  | 'resumeBucket'
  | 'deleteBucket'
  | 'purgeDeleting'
  | 'prune'
  | 'createReplay'
  | 'heartbeat'
  | 'markStopped';

export interface ReaderStatus {
  /** Threads started so far (SQLite; the first one included). Always 0 on PostgreSQL. */
  threadsStarted: number;
  /** Threads ended because a read ran past its budget whose statement is still running (SQLite). */
  abandoned: number;
  /** Calls waiting for their turn. */
  queued: number;
  /** Calls running now. */
  running: number;
}

/** What a reader serves: the chosen methods, its figures, and close(). */
export type StoreReader<M extends ReadableMethod> = Pick<Store, M> & {
  status(): ReaderStatus;
  /** Refuses new calls, fails waiting ones, and ends the reader's connection (and thread). */
  close(): Promise<void>;
};

export interface StoreReaderOptions<M extends ReadableMethod> {
  methods: readonly M[];
  /** A call's time budget, ms: from when it starts running until its answer. Past it: `query_timeout`. */
  budgetMs: number;
  /** Calls that may wait for their turn (beyond those running); past it a call fails at once with `admin_busy`. Default 16. */
  maxQueued?: number;
  /**
   * SQLite: threads abandoned past their budget (their statement still running, a core busy) that
   * may be winding down while a fresh thread serves; past it no thread starts until one has
   * exited, and calls wait. Default 1.
   */
  maxAbandoned?: number;
  logger?: Logger;
}

export interface StoreReaderDeps {
  /** Stands for now in reads that look back from it (`tail`); the SQLite thread gets each call's now from here. */
  clock: Clock;
  /** PostgreSQL, tests with a manual clock: as OpenStoreDeps.useCallerClock (the main store's setting). */
  useCallerClock?: boolean;
}

export const DEFAULT_MAX_QUEUED = 16;

/** The error of a read that ran past its budget. */
export function queryTimeoutError(method: string, budgetMs: number, detail?: string): AppError {
  return new AppError(
    'query_timeout',
    `${method} ran past its ${budgetMs} ms budget${detail ? ` (${detail})` : ''}; narrow the query (a shorter time range, fewer filters that scan bodies) or try again`,
  );
}

/** The error of a call refused because too many are waiting. */
export function adminBusyError(waiting: number): AppError {
  return new AppError('admin_busy', `admin reads are busy: ${waiting} already waiting; try again shortly`);
}

/** The error of a call made after close(), or still waiting when close() ran. */
export function readerClosedError(): AppError {
  return new AppError('storage_error', 'the admin reader is closed');
}

/** An error carried across a thread as its code and message, made an AppError again. */
export function revivedError(code: string, message: string): AppError {
  return new AppError(code as ErrorCode, message);
}

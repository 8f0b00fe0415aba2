import type { Config } from '../config/config.js';
import { systemClock, type Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import { openStoreReader } from '../store/open-store.js';
import type { ReaderStatus } from '../store/store-reader.js';
import { STORE_READ_METHODS, type StoreReads } from './store-reads.js';

export interface OpenStoreReadsOptions {
  /** Each read's time budget, ms, from when it starts running; past it the read fails with `query_timeout` (503). */
  budgetMs: number;
  /** Reads that may wait behind the running ones; past it a read fails at once with `admin_busy` (503). Default 16. */
  maxQueued?: number;
  logger?: Logger;
  /** `tail` looks back from this clock's now (serve's clock). Default: the system clock. */
  clock?: Clock;
  /** PostgreSQL, tests with a manual clock: as openStore's useCallerClock. */
  useCallerClock?: boolean;
}

/** The admin API's reads with their budget, and how to end them. */
export type OpenedStoreReads = StoreReads & {
  /** Threads started, abandoned ones still running, calls waiting and running (for logs and metrics). */
  status(): ReaderStatus;
  /** Fails waiting reads and ends the reader; call it before closing the Store. */
  close(): Promise<void>;
};

/**
 * The admin API's StoreReads, off the event loop: on SQLite a worker thread with its own
 * read-only connection, on PostgreSQL a small read-only pool of its own (docs/api-reads.md).
 * Open it after the Store (which creates and migrates the database).
 */
export function openStoreReads(config: Config, options: OpenStoreReadsOptions): Promise<OpenedStoreReads> {
  return openStoreReader(
    config,
    { clock: options.clock ?? systemClock, ...(options.useCallerClock === undefined ? {} : { useCallerClock: options.useCallerClock }) },
    {
      methods: STORE_READ_METHODS,
      budgetMs: options.budgetMs,
      ...(options.maxQueued === undefined ? {} : { maxQueued: options.maxQueued }),
      ...(options.logger === undefined ? {} : { logger: options.logger }),
    },
  );
}

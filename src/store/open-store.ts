/**
 * The one place that picks a storage dialect, from `--db`: a `postgres://` or `postgresql://` URL
 * names a PostgreSQL server, anything else a SQLite file. Nothing is opened here: each part is
 * opened when asked for, so `serve` opens the store, the ingest sink and (unless --no-worker) the
 * drain store, `hookbucket worker` only the drain store, and a CLI command only the store. Each
 * call opens a new instance that the caller closes.
 */
import type { Config } from '../config/config.js';
import { isDatabaseUrl } from '../config/database-url.js';
import { redactDbUrl } from '../policy/redact.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import { AppError } from '../shared/errors.js';
import type { BackupOptions, BackupResult } from './backup.js';
import type { DataEnd } from './migrate-data/data-end.js';
import type { DrainStore, IngestSink, Store } from './store.js';
import type { ReadableMethod, StoreReader, StoreReaderOptions } from './store-reader.js';

export type Dialect = 'sqlite' | 'postgres';

export interface StoreOpeners {
  readonly dialect: Dialect;
  /** The database as logs and messages may show it: a URL's password redacted. */
  readonly location: string;
  /**
   * The CLI/API store (creating and migrating the database when missing). `lockWaitMs`: how long
   * a write waits for another connection's lock (default `--lock-timeout`; the CLI waits longer).
   */
  store(options?: { lockWaitMs?: number }): Promise<Store>;
  /**
   * The drain worker's store, on a connection of its own. `checkpoints`: run SQLite's WAL
   * checkpoints itself (a standalone worker); inside serve the ingest sink does them.
   */
  drainStore(options?: { checkpoints?: boolean; logger?: Logger }): Promise<DrainStore>;
  /** Ingest's group-commit sink; `onCommitted` runs after each batch commits (wakes the worker). */
  ingestSink(options: { logger: Logger; onCommitted?: () => void }): Promise<IngestSink>;
}

export function dialectOf(db: string): Dialect {
  return isDatabaseUrl(db) ? 'postgres' : 'sqlite';
}

export interface OpenStoreDeps {
  clock: Clock;
  /**
   * PostgreSQL only, for tests with a manual clock: each call's own time (the drain store's nowMs,
   * a request's receipt time, a replay's nowMs, the store's clock) stands for the database's
   * clock_timestamp() in due times and leases, as on SQLite.
   */
  useCallerClock?: boolean;
}

/**
 * Statement limits on PostgreSQL. A CLI command or an admin read may scan (`requests list
 * --search`, a 30-day `stats`), so its statements may run for minutes; nothing else of ours holds a
 * transaction open across its own I/O.
 */
const PG_STORE_STATEMENT_TIMEOUT_MS = 5 * 60_000; // 5 min
const PG_IDLE_IN_TRANSACTION_MS = 60_000; // 60 s
const PG_CONNECT_TIMEOUT_MS = 10_000; // 10 s

export function openStore(config: Config, deps: OpenStoreDeps): StoreOpeners {
  const location = redactDbUrl(config.db);
  if (dialectOf(config.db) === 'postgres') {
    const synchronousCommit = config.durability === 'full' ? 'on' : 'off';
    return {
      dialect: 'postgres',
      location,
      store: async (options = {}) => {
        const { PgStore } = await import('./postgres/pg-store.js');
        return PgStore.open({
          url: config.db,
          max: config.dbPool,
          statementTimeoutMs: PG_STORE_STATEMENT_TIMEOUT_MS,
          idleInTransactionTimeoutMs: PG_IDLE_IN_TRANSACTION_MS,
          connectTimeoutMs: PG_CONNECT_TIMEOUT_MS,
          synchronousCommit,
          applicationName: 'hookbucket',
          clock: deps.clock,
          useCallerClock: deps.useCallerClock === true,
          lockWaitMs: options.lockWaitMs ?? config.lockTimeoutMs,
        });
      },
      drainStore: async (options = {}) => {
        const { PgDrainStore } = await import('./postgres/pg-drain.js');
        return PgDrainStore.open({
          ...(options.logger ? { logger: options.logger } : {}),
          url: config.db,
          poolMax: Math.min(4, config.dbPool),
          synchronousCommit,
          connectTimeoutMs: PG_CONNECT_TIMEOUT_MS,
          useCallerClock: deps.useCallerClock === true,
        });
      },
      ingestSink: async (options) => {
        const { PgIngest } = await import('./postgres/pg-ingest.js');
        return PgIngest.start({
          config,
          logger: options.logger,
          useCallerClock: deps.useCallerClock === true,
          ...(options.onCommitted ? { onCommitted: options.onCommitted } : {}),
        });
      },
    };
  }
  return {
    dialect: 'sqlite',
    location,
    // Each part's module is loaded when it is opened: a CLI command loads neither the drain store
    // nor the ingest writer (a process start per command, so module loading counts).
    store: async (options = {}) => {
      const { SqliteStore } = await import('./sqlite/sqlite-store.js');
      return SqliteStore.open({
        path: config.db,
        durability: config.durability,
        busyTimeoutMs: options.lockWaitMs ?? config.lockTimeoutMs,
        clock: deps.clock,
      });
    },
    drainStore: async (options = {}) => {
      const { SqliteDrainStore } = await import('./sqlite/sqlite-drain.js');
      return SqliteDrainStore.open({ path: config.db, checkpoints: options.checkpoints ?? true });
    },
    ingestSink: async (options) => {
      const { SqliteIngest } = await import('./sqlite/sqlite-ingest.js');
      return SqliteIngest.start({ config, logger: options.logger, ...(options.onCommitted ? { onCommitted: options.onCommitted } : {}) });
    },
  };
}

/**
 * A reader for `serve`'s admin API: the Store's read methods named, each call with a time budget,
 * on a connection of its own (src/store/store-reader.ts). SQLite: a thread with a read-only
 * connection (sqlite/sqlite-reader.ts); the database must exist and be migrated (serve's store()
 * opened it first). PostgreSQL: a small read-only pool whose statement_timeout is the budget
 * (postgres/pg-reader.ts). Close it before the store.
 */
export async function openStoreReader<M extends ReadableMethod>(
  config: Config,
  deps: OpenStoreDeps,
  options: StoreReaderOptions<M>,
): Promise<StoreReader<M>> {
  const readerDeps = { clock: deps.clock, ...(deps.useCallerClock === undefined ? {} : { useCallerClock: deps.useCallerClock }) };
  if (dialectOf(config.db) === 'postgres') {
    const { openPgReader } = await import('./postgres/pg-reader.js');
    return openPgReader(
      { ...options, url: config.db, poolMax: Math.min(PG_READER_POOL_MAX, config.dbPool), connectTimeoutMs: PG_CONNECT_TIMEOUT_MS },
      readerDeps,
    );
  }
  const { openSqliteReader } = await import('./sqlite/sqlite-reader.js');
  return openSqliteReader({ ...options, path: config.db }, readerDeps);
}

/** Connections of the admin reader's pool on PostgreSQL: admin reads are few, and must not take ingest's. */
const PG_READER_POOL_MAX = 2;

/**
 * One side of `migrate-data` (src/store/migrate-data/): `db` as --db reads it. A SQLite source is
 * opened read-only and must exist; a SQLite target is created when missing. Neither is migrated
 * here (the engine migrates the target, and never the source).
 */
export async function openDataEnd(db: string, role: 'source' | 'target'): Promise<DataEnd> {
  if (dialectOf(db) === 'postgres') {
    const { openPgDataEnd } = await import('./postgres/pg-data-end.js');
    return openPgDataEnd(db);
  }
  const { openSqliteDataEnd } = await import('./sqlite/sqlite-data-end.js');
  return openSqliteDataEnd(db, role);
}

/**
 * `hookbucket backup`: a consistent copy of the database at `--db` into `file`, checked with
 * PRAGMA integrity_check (sqlite/sqlite-backup.ts). The database is never created or migrated here,
 * so a backup before an upgrade copies the old schema as it is. PostgreSQL refuses: pg_dump makes
 * its consistent copy (docs/deploy.md).
 */
export async function backupDatabase(db: string, file: string, options: BackupOptions): Promise<BackupResult> {
  if (dialectOf(db) === 'postgres') {
    throw new AppError(
      'backup_unsupported',
      `backup copies a SQLite database; on PostgreSQL (${redactDbUrl(db)}) use pg_dump, e.g. pg_dump --format=custom --file=hookbucket.dump <url>`,
    );
  }
  const { backupSqlite } = await import('./sqlite/sqlite-backup.js');
  return backupSqlite(db, file, options);
}

import { Kysely, Migrator, PostgresDialect } from 'kysely';
import pg from 'pg';
import { AppError } from '../../shared/errors.js';
import { migrationProvider } from '../migrations/postgres/index.js';
import { pgStorageErrorCode } from './pg-error.js';

export { pgStorageErrorCode };
import type { Database } from '../schema.js';

/** `--db` values that select PostgreSQL. */
export function isPostgresUrl(db: string): boolean {
  return /^postgres(ql)?:\/\//i.test(db);
}

// Type OIDs (pg_type): int8 (bigint, count(*)) and numeric (sum(bigint)) arrive as strings from
// `pg`, because they can exceed 2^53. Ours are epoch ms, byte counts and row counts, far below it.
const INT8_OID = 20;
const NUMERIC_OID = 1700;

/** Per-pool type parsers (never the global pg.types, which every pool in the process shares). */
const types = {
  getTypeParser(oid: number, format?: 'text' | 'binary') {
    if (oid === INT8_OID || oid === NUMERIC_OID) return (v: string) => (v === null ? null : Number(v));
    return pg.types.getTypeParser(oid, format as 'text');
  },
} as unknown as pg.CustomTypesConfig;

export interface PgPoolOptions {
  url: string;
  /** Connections at most (`--db-pool`). */
  max: number;
  /** Longest a statement may run (statement_timeout), ms. */
  statementTimeoutMs: number;
  /** A transaction left idle this long is ended by the server (idle_in_transaction_session_timeout), ms. */
  idleInTransactionTimeoutMs: number;
  /** How long to wait for a connection, ms (pool checkout and connect). */
  connectTimeoutMs: number;
  /** `--durability normal` maps to synchronous_commit = off (a crash of the server may lose the last commits). */
  synchronousCommit: 'on' | 'off';
  /** Shown in pg_stat_activity. */
  applicationName: string;
  /** Every transaction read-only (default_transaction_read_only): the admin reader's pool. */
  readOnly?: boolean;
}

/** A bounded pool whose every connection has the project's session settings. */
export function createPgPool(o: PgPoolOptions): pg.Pool {
  const pool = new pg.Pool({
    connectionString: o.url,
    max: o.max,
    types,
    statement_timeout: o.statementTimeoutMs,
    idle_in_transaction_session_timeout: o.idleInTransactionTimeoutMs,
    connectionTimeoutMillis: o.connectTimeoutMs,
    application_name: o.applicationName,
    options: `-c synchronous_commit=${o.synchronousCommit}${o.readOnly ? ' -c default_transaction_read_only=on' : ''}`,
  });
  // An idle connection the server closed (restart, pg_terminate_backend) emits 'error' on the pool;
  // unhandled, that would crash the process. The next checkout opens a new connection.
  pool.on('error', () => undefined);
  // A checked-out connection has no listener of the pool's: the server closing it between two
  // statements (inside a Kysely transaction, or just acquired) emits 'error' with no query to fail,
  // and unheard that crashed serve (reliability case 7q, 2 runs in 3: 57P01 from
  // pg_terminate_backend). The next statement on it fails instead, and the pool drops it at release
  // (pg-pool removes a client that is no longer queryable).
  pool.on('connect', (client) => client.on('error', () => undefined));
  return pool;
}

export function pgKysely(pool: pg.Pool): Kysely<Database> {
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}

/**
 * Runs pending migrations. Kysely's Migrator holds a transaction-level advisory lock on
 * PostgreSQL while it migrates, so processes starting at once run each migration once.
 */
// biome-ignore lint/suspicious/noExplicitAny: migrations run on a schema-less Kysely, as Kysely's migrator expects
export async function migratePostgres(db: Kysely<any>): Promise<void> {
  const migrator = new Migrator({
    db,
    provider: migrationProvider,
    migrationTableName: 'hookbucket_migration',
    migrationLockTableName: 'hookbucket_migration_lock',
  });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    const code = pgStorageErrorCode(error) ?? 'storage_error';
    throw new AppError(code, `migration ${failed?.migrationName ?? ''} failed: ${String((error as Error)?.message ?? error)}`, {
      cause: error,
    });
  }
}

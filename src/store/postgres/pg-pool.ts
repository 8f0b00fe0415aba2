import { Kysely, Migrator, PostgresDialect } from 'kysely';
import pg from 'pg';
import { AppError } from '../../shared/errors.js';
import { migrationProvider } from '../migrations/postgres/index.js';
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
    options: `-c synchronous_commit=${o.synchronousCommit}`,
  });
  // An idle connection the server closed (restart, pg_terminate_backend) emits 'error' on the pool;
  // unhandled, that would crash the process. The next checkout opens a new connection.
  pool.on('error', () => undefined);
  return pool;
}

export function pgKysely(pool: pg.Pool): Kysely<Database> {
  return new Kysely<Database>({ dialect: new PostgresDialect({ pool }) });
}

/**
 * Runs pending migrations. Kysely's Migrator holds a transaction-level advisory lock on
 * PostgreSQL while it migrates, so processes starting at once run each migration once.
 */
export async function migratePostgres(db: Kysely<any>): Promise<void> {
  const migrator = new Migrator({ db, provider: migrationProvider, migrationTableName: 'hookbucket_migration', migrationLockTableName: 'hookbucket_migration_lock' });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    const code = pgStorageErrorCode(error) ?? 'storage_error';
    throw new AppError(code, `migration ${failed?.migrationName ?? ''} failed: ${String((error as Error)?.message ?? error)}`, { cause: error });
  }
}

/**
 * What a PostgreSQL error means for the caller, from its SQLSTATE (PostgreSQL docs, appendix A)
 * or the driver's connection errors. Undefined: not a storage error (a bug, a constraint we check).
 */
export function pgStorageErrorCode(e: unknown): 'storage_full' | 'store_busy' | 'storage_error' | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    if (code === '53100') return 'storage_full'; // disk_full
    if (code.startsWith('53')) return 'storage_error'; // insufficient resources: memory, connections
    // lock_not_available, deadlock, serialization failure, query_canceled (statement_timeout)
    if (code === '55P03' || code === '40P01' || code === '40001' || code === '57014') return 'store_busy';
    if (code.startsWith('08') || code.startsWith('57P') || code.startsWith('58') || code === '25P03' || code === 'XX000') return 'storage_error';
    return undefined;
  }
  // The driver's own: the socket failed or the server went away mid-query.
  if (typeof code === 'string' && /^E(CONNREFUSED|CONNRESET|PIPE|TIMEDOUT|HOSTUNREACH|NETUNREACH|AI_AGAIN|NOTFOUND)$/.test(code)) return 'storage_error';
  const message = (e as { message?: unknown } | null)?.message;
  if (typeof message === 'string' && /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(message)) {
    return 'storage_error';
  }
  return undefined;
}

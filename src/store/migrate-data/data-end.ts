import type { Kysely } from 'kysely';
import type { Dialect } from '../open-store.js';
import type { Database } from '../schema.js';

/**
 * One side of `migrate-data`: a database of either dialect as a Kysely instance on today's schema
 * types, plus the few things that differ by dialect. Opened by openDataEnd (open-store.ts).
 */
export interface DataEnd {
  readonly dialect: Dialect;
  /** As logs and messages may show it (a URL's password redacted). */
  readonly location: string;
  readonly db: Kysely<Database>;
  /** The newest migration this program has (the same name in both dialects). */
  readonly programVersion: string;
  /** The newest migration applied to this database; null: none (not a hookbucket database). */
  appliedVersion(): Promise<string | null>;
  /** Runs pending migrations (the target only; the source is never written). */
  migrate(): Promise<void>;
  /** The clock leases are written in: the process's on SQLite, the server's on PostgreSQL. */
  nowMs(): Promise<number>;
  close(): Promise<void>;
}

/** Kysely's migration tables, named alike by both dialects' migrators. */
export const MIGRATION_TABLE = 'hookbucket_migration';
export const MIGRATION_LOCK_TABLE = 'hookbucket_migration_lock';

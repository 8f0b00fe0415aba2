import { existsSync } from 'node:fs';
import BetterSqlite3 from 'better-sqlite3';
import { Kysely, SqliteDialect, sql } from 'kysely';
import { AppError } from '../../shared/errors.js';
import type { DataEnd } from '../migrate-data/data-end.js';
import { MIGRATION_TABLE } from '../migrate-data/data-end.js';
import { migrationProvider } from '../migrations/sqlite/index.js';
import type { Database } from '../schema.js';
import { ImmediateSqliteDialect } from './immediate-dialect.js';
import { openSqlite } from './open.js';
import { migrate } from './sqlite-store.js';

/** How long a write waits for another connection's lock, ms (the CLI's wait). */
const BUSY_TIMEOUT_MS = 10_000; // 10 s

async function latestName(): Promise<string> {
  return Object.keys(await migrationProvider.getMigrations())
    .sort()
    .at(-1)!;
}

async function applied(db: Kysely<Database>): Promise<string | null> {
  const t = await sql<{ n: number }>`select count(*) as n from sqlite_master where type = 'table' and name = ${MIGRATION_TABLE}`.execute(
    db,
  );
  if (Number(t.rows[0]!.n) === 0) return null;
  const r = await sql<{ name: string | null }>`select max(name) as name from ${sql.table(MIGRATION_TABLE)}`.execute(db);
  return r.rows[0]?.name ?? null;
}

/**
 * A SQLite file as migrate-data's source (read-only: never created, never migrated) or target
 * (created when missing, migrated, written with BEGIN IMMEDIATE transactions).
 */
export async function openSqliteDataEnd(path: string, role: 'source' | 'target'): Promise<DataEnd> {
  const programVersion = await latestName();
  let raw: BetterSqlite3.Database;
  if (role === 'source') {
    if (!existsSync(path)) throw new AppError('not_found', `source database ${path} not found`);
    raw = new BetterSqlite3(path, { readonly: true, fileMustExist: true, timeout: BUSY_TIMEOUT_MS });
  } else {
    raw = openSqlite(path, { durability: 'full', busyTimeoutMs: BUSY_TIMEOUT_MS });
  }
  // Every target transaction reads (collisions, the cursor) and then writes: BEGIN IMMEDIATE.
  const db = new Kysely<Database>({
    dialect: role === 'target' ? new ImmediateSqliteDialect({ database: raw }) : new SqliteDialect({ database: raw }),
  });
  return {
    dialect: 'sqlite',
    location: path,
    db,
    programVersion,
    appliedVersion: () => applied(db),
    migrate: () => migrate(raw),
    nowMs: async () => Date.now(),
    close: async () => {
      await db.destroy();
    },
  };
}

import assert from 'node:assert/strict';
import { Kysely, Migrator, SqliteDialect } from 'kysely';
import { migrationProvider } from '../../src/store/migrations/sqlite/index.js';
import { openSqlite, type SqliteDb } from '../../src/store/sqlite/open.js';

/**
 * A database file migrated up to `migration` and no further, as an earlier release left it: a
 * migration's test fills it with that release's rows, closes it, then opens it with today's store.
 */
export async function databaseAt(path: string, migration: string): Promise<{ raw: SqliteDb; close: () => Promise<void> }> {
  const raw = openSqlite(path, { durability: 'full', busyTimeoutMs: 2000 });
  const db = new Kysely<unknown>({ dialect: new SqliteDialect({ database: raw }) });
  const migrator = new Migrator({
    db,
    provider: migrationProvider,
    migrationTableName: 'hookbucket_migration',
    migrationLockTableName: 'hookbucket_migration_lock',
  });
  const to = await migrator.migrateTo(migration);
  assert.equal(to.error, undefined);
  assert.equal(to.results?.at(-1)?.migrationName, migration);
  // Destroying the Kysely instance closes the connection too.
  return { raw, close: () => db.destroy() };
}

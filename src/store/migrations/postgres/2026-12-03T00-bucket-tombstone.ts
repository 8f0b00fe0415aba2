import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead (README.md here).
// The tombstone column of ../sqlite/2026-12-03T00-bucket-tombstone.ts. The SQLite version also
// turned names with rows but no bucket into tombstones; here foreign keys make such rows
// impossible, so there is nothing to repair.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('buckets').addColumn('deleting_at', 'bigint').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('buckets').dropColumn('deleting_at').execute();
}

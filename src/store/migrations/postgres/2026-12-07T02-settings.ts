import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Operator settings that every process of a database must agree on (the CLI, every serve and
// worker): one text value per key, written by `hookbucket settings set`. The first key is
// `destinations` (which addresses the drain worker may connect to); a missing row is the default.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('settings')
    .addColumn('key', 'text', (col) => col.primaryKey())
    .addColumn('value', 'text', (col) => col.notNull())
    .addColumn('updated_at', 'bigint', (col) => col.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('settings').execute();
}

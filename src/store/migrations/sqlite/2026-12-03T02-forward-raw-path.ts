import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Forwarded sub-paths lose their dot-segments unless a bucket asks for them as stored
// (--forward-raw-path). Existing buckets get the new, safe default: 0.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('buckets')
    .addColumn('forward_raw_path', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('buckets').dropColumn('forward_raw_path').execute();
}

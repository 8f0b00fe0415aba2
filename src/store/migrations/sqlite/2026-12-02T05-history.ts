import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Attempts by request (requests show, deletes by request) and by bucket and start (requests tail).

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.createIndex('attempts_request').on('attempts').columns(['request_id']).execute();
  await db.schema.createIndex('attempts_bucket_started').on('attempts').columns(['bucket', 'started_at']).execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('attempts_bucket_started').execute();
  await db.schema.dropIndex('attempts_request').execute();
}

import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Chunked trailers, kept with the request as evidence (they are not forwarded): JSON of the flat
// raw list [name, value, …] as received. Null when the request had none, so rows stored before
// this migration read as having none, and most rows cost nothing.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('requests').addColumn('trailers', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('requests').dropColumn('trailers').execute();
}

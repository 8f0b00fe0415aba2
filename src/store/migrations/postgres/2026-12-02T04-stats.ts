import { sql, type Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Stats and retention.

export async function up(db: Kysely<any>): Promise<void> {
  // `stats` success_rate: deliveries to the bucket destination that settled in a window, by final
  // state, read from the index alone (destination, always null here, is a column so that the
  // query's `destination is null` needs no table lookup). Partial, so ingest (which inserts
  // deliveries unsettled) and replays to other destinations maintain no entry; the drain adds one
  // when a delivery settles.
  await db.schema
    .createIndex('deliveries_settled')
    .on('deliveries')
    .columns(['bucket', 'settled_at', 'state', 'destination'])
    .where(sql<boolean>`destination is null and settled_at is not null`)
    .execute();
  // `--retain-state`: comma list of the terminal states per-bucket retention prunes; null: delivered only.
  await db.schema.alterTable('buckets').addColumn('retain_states', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropIndex('deliveries_settled').execute();
}

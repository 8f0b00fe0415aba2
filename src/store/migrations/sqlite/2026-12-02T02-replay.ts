import { sql, type Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Replays and the request's current delivery: `latest` marks, per request, the delivery to the
// bucket's destination with the highest generation (the one that gives the request its state),
// so listing by state is an index range instead of a correlated subquery per row.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .alterTable('deliveries')
    .addColumn('latest', 'integer', (c) => c.notNull().defaultTo(1))
    .execute();
  // Existing rows: only the highest generation to the bucket destination stays latest.
  await sql`update deliveries set latest = 0 where destination is not null or generation < (
    select max(o.generation) from deliveries o where o.request_id = deliveries.request_id and o.destination is null)`.execute(db);
  // Newest-first pages of one bucket's requests in one state (requests list --state, replay --state).
  await db.schema
    .createIndex('deliveries_latest_state')
    .on('deliveries')
    .columns(['bucket', 'state', 'request_id'])
    .where(sql.ref('latest'), '=', 1)
    .execute();
  await db.schema
    .createIndex('deliveries_replay')
    .on('deliveries')
    .columns(['replay_id'])
    .where(sql.ref('replay_id'), 'is not', null)
    .execute();

  await db.schema
    .createTable('replays')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('bucket', 'text', (c) => c.notNull())
    // JSON: the selectors as given (state, ids, since/until, filters, all).
    .addColumn('selection', 'text', (c) => c.notNull())
    // null: the bucket's destination; else a --to URL.
    .addColumn('destination', 'text')
    .addColumn('rate_count', 'real')
    .addColumn('rate_per_ms', 'integer')
    .addColumn('total', 'integer', (c) => c.notNull())
    .addColumn('superseded', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('replays_bucket').on('replays').columns(['bucket', 'created_at']).execute();

  // Per-bucket retention, applied by the server (null: keep forever).
  await db.schema.alterTable('buckets').addColumn('retain_ms', 'bigint').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('replays').execute();
}

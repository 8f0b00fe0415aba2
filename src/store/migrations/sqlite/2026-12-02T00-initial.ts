import { sql, type Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Portable column types only; ids are made in app code; times are epoch-ms integers.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('buckets')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('destination', 'text')
    .addColumn('max_body', 'integer', (c) => c.notNull())
    .addColumn('ack_status', 'integer', (c) => c.notNull().defaultTo(200))
    .addColumn('ack_body', 'text')
    .addColumn('ack_content_type', 'text')
    .addColumn('paused', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute();

  await db.schema
    .createTable('requests')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('bucket', 'text', (c) => c.notNull())
    .addColumn('received_at', 'bigint', (c) => c.notNull())
    .addColumn('method', 'text', (c) => c.notNull())
    .addColumn('path', 'text', (c) => c.notNull())
    .addColumn('query', 'text')
    .addColumn('headers', 'text', (c) => c.notNull())
    .addColumn('body', 'blob', (c) => c.notNull())
    .addColumn('size', 'integer', (c) => c.notNull())
    .addColumn('sha256', 'text', (c) => c.notNull())
    .addColumn('peer', 'text')
    .execute();
  // Newest-first listing per bucket; ids are time-ordered so (bucket, id) serves it.
  await db.schema.createIndex('requests_bucket_id').on('requests').columns(['bucket', 'id']).execute();

  await db.schema
    .createTable('deliveries')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('request_id', 'text', (c) => c.notNull())
    .addColumn('bucket', 'text', (c) => c.notNull())
    .addColumn('destination', 'text')
    .addColumn('generation', 'integer', (c) => c.notNull())
    .addColumn('state', 'text', (c) => c.notNull())
    .addColumn('attempts', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('next_attempt_at', 'bigint', (c) => c.notNull())
    .addColumn('lease_until', 'bigint')
    .addColumn('trigger', 'text', (c) => c.notNull())
    .addColumn('replay_id', 'text')
    .addColumn('deferrals', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('last_deferral_reason', 'text')
    .addColumn('created_at', 'bigint', (c) => c.notNull())
    .addColumn('updated_at', 'bigint', (c) => c.notNull())
    .execute();
  await db.schema.createIndex('deliveries_request').on('deliveries').columns(['request_id', 'generation']).execute();
  await db.schema.createIndex('deliveries_due').on('deliveries').columns(['state', 'next_attempt_at']).execute();
  await db.schema.createIndex('deliveries_bucket_state').on('deliveries').columns(['bucket', 'state']).execute();

  await db.schema
    .createTable('rejections')
    .addColumn('bucket', 'text', (c) => c.notNull())
    .addColumn('reason', 'text', (c) => c.notNull())
    .addColumn('count', 'integer', (c) => c.notNull())
    .addColumn('last_at', 'bigint', (c) => c.notNull())
    .addPrimaryKeyConstraint('rejections_pk', ['bucket', 'reason'])
    .execute();

  // Small counters other processes can poll cheaply; bucket_epoch changes on every bucket write so
  // a serving process knows when to reload its bucket cache.
  await db.schema
    .createTable('meta')
    .addColumn('key', 'text', (c) => c.primaryKey())
    .addColumn('value', 'integer', (c) => c.notNull())
    .execute();
  await sql`insert into meta (key, value) values ('bucket_epoch', 0)`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const t of ['meta', 'rejections', 'deliveries', 'requests', 'buckets']) {
    await db.schema.dropTable(t).execute();
  }
}

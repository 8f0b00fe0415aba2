import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead (README.md here).
// The PostgreSQL twin of ../sqlite/2026-12-02T01-drain.ts (double precision for fractions).

export async function up(db: Kysely<any>): Promise<void> {
  const bucketColumns: Array<[string, string, (c: any) => any]> = [
    ['rate_count', 'double precision', (c) => c],
    ['rate_per_ms', 'bigint', (c) => c],
    ['burst', 'integer', (c) => c.notNull().defaultTo(1)],
    ['concurrency', 'integer', (c) => c.notNull().defaultTo(10)],
    ['timeout_ms', 'bigint', (c) => c.notNull().defaultTo(10_000)],
    ['base_ms', 'bigint', (c) => c.notNull().defaultTo(30_000)],
    ['multiplier', 'double precision', (c) => c.notNull().defaultTo(3)],
    ['cap_ms', 'bigint', (c) => c.defaultTo(10_800_000)],
    ['max_attempts', 'integer', (c) => c.defaultTo(14)],
    ['give_up_ms', 'bigint', (c) => c],
    ['jitter', 'text', (c) => c.notNull().defaultTo('upper')],
    ['retry_on', 'text', (c) => c],
    ['retry_budget', 'double precision', (c) => c.notNull().defaultTo(0.1)],
    ['retry_floor', 'double precision', (c) => c.notNull().defaultTo(1)],
    ['forward_path', 'integer', (c) => c.notNull().defaultTo(1)],
    ['forward_headers', 'text', (c) => c.notNull().defaultTo('[]')],
    ['paused_at', 'bigint', (c) => c],
    ['paused_total_ms', 'bigint', (c) => c.notNull().defaultTo(0)],
  ];
  for (const [name, type, build] of bucketColumns) {
    await db.schema
      .alterTable('buckets')
      .addColumn(name, type as any, build)
      .execute();
  }

  const deliveryColumns: Array<[string, string, (c: any) => any]> = [
    ['first_attempt_at', 'bigint', (c) => c],
    ['paused_ms_at_first', 'bigint', (c) => c],
    ['lease_attempt', 'text', (c) => c],
    ['last_status', 'integer', (c) => c],
    ['last_error', 'text', (c) => c],
    ['last_attempt_at', 'bigint', (c) => c],
    ['settled_at', 'bigint', (c) => c],
    ['supersede_requested', 'integer', (c) => c.notNull().defaultTo(0)],
  ];
  for (const [name, type, build] of deliveryColumns) {
    await db.schema
      .alterTable('deliveries')
      .addColumn(name, type as any, build)
      .execute();
  }

  await db.schema.dropIndex('deliveries_bucket_state').execute();
  await db.schema.createIndex('deliveries_bucket_due').on('deliveries').columns(['bucket', 'state', 'next_attempt_at']).execute();

  await db.schema
    .createTable('attempts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('delivery_id', 'text', (c) => c.notNull().references('deliveries.id'))
    .addColumn('request_id', 'text', (c) => c.notNull())
    .addColumn('bucket', 'text', (c) => c.notNull())
    .addColumn('number', 'integer', (c) => c.notNull())
    .addColumn('url', 'text', (c) => c.notNull())
    .addColumn('started_at', 'bigint', (c) => c.notNull())
    .addColumn('duration_ms', 'bigint')
    .addColumn('status', 'integer')
    .addColumn('error_class', 'text')
    .addColumn('error_message', 'text')
    .addColumn('response_headers', 'text')
    .addColumn('response_body', 'bytea')
    .addColumn('response_truncated', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('outcome', 'text')
    .addColumn('reason', 'text')
    .addColumn('next_attempt_at', 'bigint')
    .addColumn('next_why', 'text')
    .execute();
  await db.schema.createIndex('attempts_delivery').on('attempts').columns(['delivery_id', 'started_at']).execute();

  await db.schema
    .createTable('worker_lease')
    .addColumn('name', 'text', (c) => c.primaryKey())
    .addColumn('holder', 'text', (c) => c.notNull())
    .addColumn('info', 'text', (c) => c.notNull())
    .addColumn('acquired_at', 'bigint', (c) => c.notNull())
    .addColumn('heartbeat_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('worker_lease').execute();
  await db.schema.dropTable('attempts').execute();
}

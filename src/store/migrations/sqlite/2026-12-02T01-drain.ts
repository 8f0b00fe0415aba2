import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// The drain worker: per-bucket delivery settings, delivery bookkeeping, one row per attempt, and
// the single-worker lease. Times are epoch-ms integers; durations are ms.

export async function up(db: Kysely<any>): Promise<void> {
  const bucketColumns: Array<[string, string, (c: any) => any]> = [
    // Rate as a token bucket: rate_count tokens per rate_per_ms; null = no rate cap.
    ['rate_count', 'real', (c) => c],
    ['rate_per_ms', 'integer', (c) => c],
    ['burst', 'integer', (c) => c.notNull().defaultTo(1)],
    ['concurrency', 'integer', (c) => c.notNull().defaultTo(10)],
    ['timeout_ms', 'integer', (c) => c.notNull().defaultTo(10_000)],
    ['base_ms', 'integer', (c) => c.notNull().defaultTo(30_000)],
    ['multiplier', 'real', (c) => c.notNull().defaultTo(3)],
    // null = uncapped
    ['cap_ms', 'bigint', (c) => c.defaultTo(10_800_000)],
    // Exactly one of max_attempts and give_up_ms is set.
    ['max_attempts', 'integer', (c) => c.defaultTo(14)],
    ['give_up_ms', 'bigint', (c) => c],
    ['jitter', 'text', (c) => c.notNull().defaultTo('upper')],
    // The --retry-on words; null = the default retried set.
    ['retry_on', 'text', (c) => c],
    ['retry_budget', 'real', (c) => c.notNull().defaultTo(0.1)],
    ['retry_floor', 'real', (c) => c.notNull().defaultTo(1)],
    ['forward_path', 'integer', (c) => c.notNull().defaultTo(1)],
    // JSON flat list [name, value, …] added to every forwarded request.
    ['forward_headers', 'text', (c) => c.notNull().defaultTo('[]')],
    // Pause bookkeeping, so paused time is not counted toward --give-up.
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
    // The bucket's paused_total_ms when the first attempt started.
    ['paused_ms_at_first', 'bigint', (c) => c],
    // The attempt that holds the lease while state = 'delivering'.
    ['lease_attempt', 'text', (c) => c],
    ['last_status', 'integer', (c) => c],
    ['last_error', 'text', (c) => c],
    ['last_attempt_at', 'bigint', (c) => c],
    // When it reached delivered, failed, exhausted or superseded.
    ['settled_at', 'bigint', (c) => c],
    // Set by a replay while an attempt is in flight: the attempt finishes, then the delivery is superseded.
    ['supersede_requested', 'integer', (c) => c.notNull().defaultTo(0)],
  ];
  for (const [name, type, build] of deliveryColumns) {
    await db.schema
      .alterTable('deliveries')
      .addColumn(name, type as any, build)
      .execute();
  }

  // The claim query walks one bucket's due deliveries in due order; this index replaces
  // (bucket, state), which it covers, so ingest maintains no extra B-tree.
  await db.schema.dropIndex('deliveries_bucket_state').execute();
  await db.schema.createIndex('deliveries_bucket_due').on('deliveries').columns(['bucket', 'state', 'next_attempt_at']).execute();

  await db.schema
    .createTable('attempts')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('delivery_id', 'text', (c) => c.notNull())
    .addColumn('request_id', 'text', (c) => c.notNull())
    .addColumn('bucket', 'text', (c) => c.notNull())
    .addColumn('number', 'integer', (c) => c.notNull())
    .addColumn('url', 'text', (c) => c.notNull())
    .addColumn('started_at', 'bigint', (c) => c.notNull())
    .addColumn('duration_ms', 'integer')
    .addColumn('status', 'integer')
    // refused, reset, dns, timeout, tls, network; lease_expired; shutdown
    .addColumn('error_class', 'text')
    .addColumn('error_message', 'text')
    .addColumn('response_headers', 'text')
    .addColumn('response_body', 'blob')
    .addColumn('response_truncated', 'integer', (c) => c.notNull().defaultTo(0))
    // null while in flight; delivered, retry, failed, exhausted, lease_expired, released
    .addColumn('outcome', 'text')
    .addColumn('reason', 'text')
    .addColumn('next_attempt_at', 'bigint')
    // schedule, retry_after, lease_expired, released
    .addColumn('next_why', 'text')
    .execute();
  await db.schema.createIndex('attempts_delivery').on('attempts').columns(['delivery_id', 'started_at']).execute();

  // One active drain worker per database: a heartbeat lease row.
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

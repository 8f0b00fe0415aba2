import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// The delivery state that lived in the worker's memory moves into rows the claim reads and writes
// (the PostgreSQL twin explains the columns): bucket_pacer (token bucket, retry budget window,
// Retry-After block), replay_pacer (each replay's own --rate), workers (every receiver and worker
// process, with a heartbeat) and attempts.worker_id. SQLite keeps one active worker (the
// worker_lease row); the rows make its Retry-After block and budget survive a restart, as on
// PostgreSQL. No foreign keys here: a bucket purge deletes the pacer rows itself, and a pacer row
// of an older bucket of the same name is told apart by bucket_created_at.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('bucket_pacer')
    .addColumn('bucket', 'text', (c) => c.primaryKey())
    .addColumn('bucket_created_at', 'integer', (c) => c.notNull())
    .addColumn('full_at', 'real', (c) => c.notNull().defaultTo(0))
    .addColumn('budget', 'text', (c) => c.notNull().defaultTo('[]'))
    .addColumn('blocked_until', 'integer', (c) => c.notNull().defaultTo(0))
    .addColumn('counted_at', 'integer', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .createTable('replay_pacer')
    .addColumn('replay_id', 'text', (c) => c.primaryKey())
    .addColumn('full_at', 'real', (c) => c.notNull().defaultTo(0))
    .execute();
  await db.schema
    .createTable('workers')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('roles', 'text', (c) => c.notNull())
    .addColumn('host', 'text', (c) => c.notNull())
    .addColumn('pid', 'integer', (c) => c.notNull())
    .addColumn('info', 'text', (c) => c.notNull())
    .addColumn('lease_ms', 'integer')
    .addColumn('started_at', 'integer', (c) => c.notNull())
    .addColumn('heartbeat_at', 'integer', (c) => c.notNull())
    .addColumn('expires_at', 'integer', (c) => c.notNull())
    .addColumn('stopped_at', 'integer')
    .execute();
  await db.schema.alterTable('attempts').addColumn('worker_id', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('attempts').dropColumn('worker_id').execute();
  await db.schema.dropTable('workers').execute();
  await db.schema.dropTable('replay_pacer').execute();
  await db.schema.dropTable('bucket_pacer').execute();
}

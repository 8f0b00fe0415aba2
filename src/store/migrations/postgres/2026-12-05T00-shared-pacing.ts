import { sql, type Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Many workers on one database (README "Several receivers and workers"). The delivery state that
// lived in one worker's memory moves into rows the claim locks:
// - bucket_pacer: per bucket, the token bucket (full_at, the time it is full again, in ms with a
//   fraction), the retry budget's 60 s window (a JSON list of [second, first attempts, retries]),
//   the Retry-After block (blocked_until, 0: none) and counted_at, the latest clock reading it was
//   moved at (the next claim never counts below it). bucket_created_at tells a bucket from a later
//   one of the same name. Rewritten in place on most claims: fillfactor 50 leaves room on each page
//   so updates stay HOT (no index touched: only the key is indexed).
// - replay_pacer: the token bucket of each replay with its own --rate.
// - workers: every receiver and worker process, with a heartbeat; attempts.worker_id names the
//   worker that made an attempt, so a dead worker's leased deliveries can be shown as such.
// Foreign keys cascade, so a bucket purge or a replay delete takes its pacer row with it.

export async function up(db: Kysely<any>): Promise<void> {
  await sql`create table bucket_pacer (
    bucket text primary key references buckets(name) on delete cascade,
    bucket_created_at bigint not null,
    full_at double precision not null default 0,
    budget text not null default '[]',
    blocked_until bigint not null default 0,
    counted_at bigint not null default 0
  ) with (fillfactor = 50)`.execute(db);
  await sql`create table replay_pacer (
    replay_id text primary key references replays(id) on delete cascade,
    full_at double precision not null default 0
  ) with (fillfactor = 50)`.execute(db);
  await db.schema
    .createTable('workers')
    .addColumn('id', 'text', (c) => c.primaryKey())
    .addColumn('roles', 'text', (c) => c.notNull())
    .addColumn('host', 'text', (c) => c.notNull())
    .addColumn('pid', 'integer', (c) => c.notNull())
    .addColumn('info', 'text', (c) => c.notNull())
    .addColumn('lease_ms', 'bigint')
    .addColumn('started_at', 'bigint', (c) => c.notNull())
    .addColumn('heartbeat_at', 'bigint', (c) => c.notNull())
    .addColumn('expires_at', 'bigint', (c) => c.notNull())
    .addColumn('stopped_at', 'bigint')
    .execute();
  await db.schema.alterTable('attempts').addColumn('worker_id', 'text').execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('attempts').dropColumn('worker_id').execute();
  await db.schema.dropTable('workers').execute();
  await db.schema.dropTable('replay_pacer').execute();
  await db.schema.dropTable('bucket_pacer').execute();
}

import { sql, type Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
//
// `bucket delete` becomes a tombstone (buckets.deleting_at set) whose rows are purged in short
// batches, so a failed or interrupted delete never leaves rows without a bucket. Before this,
// a delete that failed half-way (SQLITE_BUSY under ingest load) removed the bucket row and left its
// requests and deliveries behind; `bucket create <same name>` then had the worker deliver those old
// requests to the new destination. Every bucket name that has rows but no bucket row becomes a
// tombstone here, so those orphans are never delivered and the purge (`bucket delete`, or serve in
// the background) removes them.
//
// Kysely runs SQLite migrations outside a transaction, so this one takes the write lock itself
// and checks for the column first: a run cut short before it was recorded can run again.

/** The tombstone's max_body: 25 MiB, the default of the time (a tombstone stores nothing anyway). */
const TOMBSTONE_MAX_BODY = 25 * 1024 * 1024;

export async function up(db: Kysely<any>): Promise<void> {
  await sql`begin immediate`.execute(db);
  try {
    const cols = await sql<{ name: string }>`select name from pragma_table_info('buckets')`.execute(db);
    if (!cols.rows.some((c) => c.name === 'deleting_at')) {
      await db.schema.alterTable('buckets').addColumn('deleting_at', 'bigint').execute();
    }
    const now = Date.now();
    // Paused as well, so that even a reader that ignores deleting_at holds its deliveries.
    await sql`
      insert into buckets (name, destination, max_body, paused, paused_at, created_at, updated_at, deleting_at)
      select o.bucket, null, ${TOMBSTONE_MAX_BODY}, 1, ${now}, ${now}, ${now}, ${now}
      from (
        select distinct bucket from requests
        union select distinct bucket from deliveries
        union select distinct bucket from replays
        union select distinct bucket from rejections where bucket <> ''
      ) o
      where not exists (select 1 from buckets b where b.name = o.bucket)`.execute(db);
    await sql`update meta set value = value + 1 where key = 'bucket_epoch'`.execute(db);
    await sql`commit`.execute(db);
  } catch (e) {
    await sql`rollback`.execute(db).catch(() => undefined);
    throw e;
  }
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.alterTable('buckets').dropColumn('deleting_at').execute();
}

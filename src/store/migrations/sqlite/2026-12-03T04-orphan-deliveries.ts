import { sql, type Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
//
// 2026-12-03T00-bucket-tombstone turned names with rows but no bucket row into tombstones. A user
// who had already re-created the name (the leak: a delete failed half-way, then `bucket create`
// with a new destination) has a live bucket over the old bucket's rows, and the worker would send
// the old pending, retrying or in-flight deliveries to the new destination. Here those deliveries
// are settled `failed` with last_error `orphaned_by_delete`: never sent, still shown as evidence.
//
// Which deliveries belong to an earlier bucket: deliveries.created_at (set when the delivery row
// is written: ingest's receipt time, import's store time, a replay's own time) earlier than the
// live bucket's created_at. Ingest and import store only into a bucket that exists, so a delivery
// older than its bucket was made for an earlier bucket of that name. A replay of an old request
// made after the re-creation is the new operator's choice: its delivery is newer than the bucket
// and untouched. The request's received_at is not used, for that reason. Strictly earlier: a
// delivery in the bucket's own creation millisecond is left alone. Tombstones (deleting_at set) are
// skipped: the worker already claims nothing of them and their purge removes the rows.
//
// Kysely runs SQLite migrations outside a transaction, so this one takes the write lock itself;
// it only changes live rows to a settled state, so a run cut short can run again.

const ORPHANED = 'orphaned_by_delete';

export async function up(db: Kysely<any>): Promise<void> {
  await sql`begin immediate`.execute(db);
  try {
    const now = Date.now();
    const orphaned = sql`
      select d.id from deliveries d join buckets b on b.name = d.bucket
      where d.state in ('pending', 'retrying', 'delivering') and b.deleting_at is null and d.created_at < b.created_at`;
    // An attempt in flight when the old process stopped would otherwise stay open in the timeline.
    await sql`
      update attempts set outcome = 'failed', reason = ${ORPHANED}, error_message = ${ORPHANED}
      where outcome is null and id in (select lease_attempt from deliveries where lease_attempt is not null and id in (${orphaned}))`.execute(
      db,
    );
    await sql`
      update deliveries set state = 'failed', last_error = ${ORPHANED}, settled_at = ${now}, updated_at = ${now},
        lease_until = null, lease_attempt = null, supersede_requested = 0
      where id in (${orphaned})`.execute(db);
    await sql`commit`.execute(db);
  } catch (e) {
    await sql`rollback`.execute(db).catch(() => undefined);
    throw e;
  }
}

export async function down(): Promise<void> {
  // Settled deliveries are not made live again: that would re-open the leak this closes.
}

import { sql, type Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// When each bucket next has work due (src/store/sqlite/bucket-due.ts keeps it): the drain worker
// asks one indexed question per pass, "which buckets are due now?", instead of running a claim
// and two due queries for every bucket (10,000 idle buckets took ingest from 5,150 to 75 req/s).
// next_due_at is a lower bound in epoch ms; null: nothing waits. Ingest, completions, lease
// recovery, replays and bucket updates lower it; a claim sets it to what is left after it.
// Backfilled from the deliveries waiting now (pending or retrying). In-flight deliveries need no
// entry: lease expiry is found by its own query, and recovering one lowers its bucket's row.

export async function up(db: Kysely<any>): Promise<void> {
  await db.schema
    .createTable('bucket_due')
    .addColumn('bucket', 'text', (c) => c.primaryKey())
    .addColumn('next_due_at', 'bigint')
    .execute();
  // The due query is a range on this index; idle buckets (null) are not in the range at all.
  await db.schema.createIndex('bucket_due_next').on('bucket_due').columns(['next_due_at']).execute();
  // Two index lookups per bucket on deliveries_bucket_due_id (bucket, state, next_attempt_at, id).
  await sql`
    insert into bucket_due (bucket, next_due_at)
    select b.name, (select min(t.at) from (
        select min(d.next_attempt_at) as at from deliveries d where d.bucket = b.name and d.state = 'pending'
        union all
        select min(d.next_attempt_at) as at from deliveries d where d.bucket = b.name and d.state = 'retrying'
      ) as t)
    from buckets b`.execute(db);
}

export async function down(db: Kysely<any>): Promise<void> {
  await db.schema.dropTable('bucket_due').execute();
}

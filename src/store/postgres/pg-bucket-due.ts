import { sql, type Kysely } from 'kysely';
import type { Database } from '../schema.js';

/**
 * Lowers a bucket's next due time to `atMs`, in the caller's transaction: the same SQL as SQLite's
 * ../sqlite/bucket-due.ts (which explains the table); never raises it, and a bucket already due is
 * not written at all.
 */
export async function lowerDue(trx: Kysely<Database>, bucket: string, atMs: number): Promise<void> {
  await sql`insert into bucket_due (bucket, next_due_at) values (${bucket}, ${atMs})
    on conflict (bucket) do update set next_due_at = excluded.next_due_at
    where bucket_due.next_due_at is null or bucket_due.next_due_at > excluded.next_due_at`.execute(trx);
}

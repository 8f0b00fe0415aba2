/**
 * `requests verify` on PostgreSQL: the same as ../sqlite/sqlite-verdicts.ts in one transaction,
 * taking rows in the order ingest and replay take them (pg-replay.ts): the bucket row FOR SHARE,
 * its bucket_due row FOR UPDATE, then the requests by id. A released request's first delivery is
 * due at the database's now, as ingest's (pg-ingest-batch.ts), and the bucket's REQUESTS_CHANNEL
 * notice is sent at the commit.
 */
import { sql, type Kysely } from 'kysely';
import { bucketNotFound } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { Database } from '../schema.js';
import { deletingError, type VerdictUpdate, type VerdictsApplied } from '../store.js';
import { notify, REQUESTS_CHANNEL } from './pg-notify.js';
import { dueNow } from './pg-clock.js';
import { lowerDue } from './pg-bucket-due.js';

export async function pgApplyVerdicts(
  db: Kysely<Database>,
  bucket: string,
  updates: readonly VerdictUpdate[],
  nowMs: number,
  useCallerClock: boolean,
): Promise<VerdictsApplied> {
  return db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ destination: string | null; deleting_at: number | null }>`
      select destination, deleting_at from buckets where name = ${bucket} for share`.execute(trx);
    const row = rows[0];
    if (!row) throw bucketNotFound(bucket);
    if (row.deleting_at !== null) throw deletingError(bucket);
    const releasing = updates.some((u) => u.release && u.verdict.result === 'verified');
    if (releasing) await sql`select 1 from bucket_due where bucket = ${bucket} for update`.execute(trx);
    const sorted = [...updates].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    let updated = 0;
    const released: string[] = [];
    const dueAt = releasing ? await dueNow(trx, nowMs, useCallerClock) : nowMs;
    for (const u of sorted) {
      const r = await sql<{ disposition: string }>`
        update requests set verify_scheme = ${u.verdict.scheme}, verify_result = ${u.verdict.result}, verify_reason = ${u.verdict.reason}
        where id = ${u.id} and bucket = ${bucket} returning disposition`.execute(trx);
      const d = r.rows[0];
      if (!d) continue;
      updated++;
      if (!u.release || u.verdict.result !== 'verified' || d.disposition !== 'quarantined') continue;
      await sql`update requests set disposition = 'accepted' where id = ${u.id}`.execute(trx);
      released.push(u.id);
      if (row.destination !== null) {
        await trx
          .insertInto('deliveries')
          .values({
            id: newId(),
            request_id: u.id,
            bucket,
            destination: null,
            generation: 1,
            state: 'pending',
            attempts: 0,
            next_attempt_at: dueAt,
            lease_until: null,
            trigger: 'initial',
            replay_id: null,
            deferrals: 0,
            last_deferral_reason: null,
            created_at: nowMs,
            updated_at: nowMs,
            first_attempt_at: null,
            paused_ms_at_first: null,
            lease_attempt: null,
            last_status: null,
            last_error: null,
            last_attempt_at: null,
            settled_at: null,
            supersede_requested: 0,
            latest: 1,
          })
          .execute();
      }
    }
    if (released.length > 0 && row.destination !== null) {
      await lowerDue(trx, bucket, dueAt);
      await notify(trx, REQUESTS_CHANNEL, [bucket]);
    }
    return { updated, released };
  });
}

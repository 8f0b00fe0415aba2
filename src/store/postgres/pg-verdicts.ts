/**
 * `requests verify` on PostgreSQL: the same as ../sqlite/sqlite-verdicts.ts in one transaction,
 * taking rows in the order ingest and replay take them (pg-replay.ts): the bucket row FOR SHARE,
 * its bucket_due row FOR UPDATE, then the requests by id. A released request's first delivery is
 * due at the database's now, as ingest's (pg-ingest-batch.ts), and the bucket's REQUESTS_CHANNEL
 * notice is sent at the commit.
 *
 * Dedup (VerdictUpdate.dedup), as on SQLite: a released request is judged at its own arrival time;
 * a key held by another request (a verified retry, say) makes it that request's `duplicate`, with
 * no delivery. The keys are taken before the bucket_due row, the order ingest takes them in
 * (pg-ingest-batch.ts: dedup keys, then bucket_due), one upsert each in (key, id) order, so a
 * release and an ingest batch wait for each other instead of deadlocking. The upsert locks the
 * key's row whether or not it replaces it, so a concurrent ingest of the same key either commits
 * first (and is seen here as the holder) or waits and sees this request as the holder.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
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
    const holders = await takeKeys(trx, bucket, updates);
    if (releasing) await sql`select 1 from bucket_due where bucket = ${bucket} for update`.execute(trx);
    const sorted = [...updates].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    let updated = 0;
    const released: string[] = [];
    const duplicates: VerdictsApplied['duplicates'] = [];
    const dueAt = releasing ? await dueNow(trx, nowMs, useCallerClock) : nowMs;
    for (const u of sorted) {
      const r = await sql<{ disposition: string }>`
        update requests set verify_scheme = ${u.verdict.scheme}, verify_result = ${u.verdict.result}, verify_reason = ${u.verdict.reason}
        where id = ${u.id} and bucket = ${bucket} returning disposition`.execute(trx);
      const d = r.rows[0];
      if (!d) continue;
      updated++;
      if (!u.release || u.verdict.result !== 'verified' || d.disposition !== 'quarantined') continue;
      const holder = holders.get(u.id);
      if (holder !== undefined && u.dedup !== undefined) {
        await sql`update requests set disposition = 'duplicate', duplicate_of = ${holder}, dedup_key = ${u.dedup.key} where id = ${u.id}`.execute(
          trx,
        );
        duplicates.push({ id: u.id, duplicateOf: holder });
        continue;
      }
      await sql`update requests set disposition = 'accepted', dedup_key = coalesce(${u.dedup?.key ?? null}, dedup_key) where id = ${u.id}`.execute(
        trx,
      );
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
    return { updated, released, duplicates };
  });
}

/**
 * Takes the dedup keys of the quarantined requests to release (file comment); returns those held
 * by another request, each with its holder. A request whose key its own row already holds (a
 * concurrent `requests verify` released it first) counts as holding it.
 */
async function takeKeys(trx: Transaction<Database>, bucket: string, updates: readonly VerdictUpdate[]): Promise<Map<string, string>> {
  const held = new Map<string, string>();
  const keyed = updates.filter((u) => u.release && u.verdict.result === 'verified' && u.dedup !== undefined);
  if (keyed.length === 0) return held;
  // Read without a lock: the row is locked later, after bucket_due, in the order replay locks it.
  // A request released meanwhile by another run is skipped there; the key it took here is its own.
  const { rows } = await sql<{ id: string; received_at: number }>`
    select id, received_at from requests
    where id = any(${keyed.map((u) => u.id)}::text[]) and bucket = ${bucket} and disposition = 'quarantined'`.execute(trx);
  const receivedAt = new Map(rows.map((r) => [r.id, Number(r.received_at)]));
  const order = keyed
    .filter((u) => receivedAt.has(u.id))
    .sort((a, b) => (a.dedup!.key < b.dedup!.key ? -1 : a.dedup!.key > b.dedup!.key ? 1 : a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  for (const u of order) {
    const at = receivedAt.get(u.id)!;
    const took = await sql`
      insert into dedup_keys (bucket, key, request_id, expires_at) values (${bucket}, ${u.dedup!.key}, ${u.id}, ${at + u.dedup!.windowMs})
      on conflict (bucket, key) do update set request_id = excluded.request_id, expires_at = excluded.expires_at
      where dedup_keys.expires_at <= ${at}
      returning key`.execute(trx);
    if (took.rows.length > 0) continue;
    const h = await sql<{ request_id: string }>`
      select request_id from dedup_keys where bucket = ${bucket} and key = ${u.dedup!.key}`.execute(trx);
    const holder = h.rows[0]?.request_id;
    if (holder === undefined) throw new Error(`dedup key of bucket ${bucket} vanished inside the verify transaction`);
    if (holder !== u.id) held.set(u.id, holder);
  }
  return held;
}

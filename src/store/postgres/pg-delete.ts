/**
 * `bucket delete` on PostgreSQL: the tombstone, then the purge in short batches, as
 * src/store/sqlite/sqlite-delete.ts (read its header for the why), with these differences:
 *
 * - The tombstone transaction locks the bucket row FOR UPDATE before it looks for undelivered
 *   work. That lock conflicts with the FOR KEY SHARE that every insert referencing the bucket takes
 *   (foreign keys), so an ingest commit in flight finishes first and its deliveries are counted,
 *   and later ones wait for the tombstone and then see it. It bumps meta.bucket_epoch and queues a
 *   BUCKETS_CHANNEL notice, sent at its commit (other processes drop the bucket from their caches).
 * - Each purge batch locks the bucket row FOR UPDATE first too: two purgers (the CLI and serve's
 *   background pass) take turns, and the last batch, which deletes the bucket row, cannot race an
 *   insert into it. Rows go children first (attempts, deliveries, requests; then replays,
 *   rejections and the bucket row), because the foreign keys want it.
 * - Lock waits: purgeDeleting's `lockWaitMs` becomes `SET LOCAL lock_timeout` for each batch
 *   (SQLite's busy_timeout); a lock not granted in time fails the batch with SQLSTATE 55P03,
 *   store_busy through pgStorageErrorCode, and the pass stops with the tombstone standing.
 * - No reclaim step: PostgreSQL has no incremental_vacuum. Autovacuum makes the space reusable
 *   (pg-retention.ts says what the README should say about giving it back).
 *
 * Same batch bounds and gap as SQLite (PURGE_BATCH requests, PURGE_BATCH_BYTES, PURGE_GAP_MS), and
 * the same loops, errors and messages: ../purge.ts.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import { AppError, bucketNotFound } from '../../shared/errors.js';
import type { Database } from '../schema.js';
import { PURGE_BATCH, purgeEachDeleting, purgeIds, purgeToEnd, type PurgeStep } from '../purge.js';
import type { PurgeHooks, PurgeResult } from '../store.js';
import { notify, BUCKETS_CHANNEL } from './pg-notify.js';
import { pgStorageErrorCode } from './pg-error.js';

async function bumpEpoch(trx: Transaction<Database>): Promise<void> {
  await sql`update meta set value = value + 1 where key = 'bucket_epoch'`.execute(trx);
}

async function liveCount(db: Kysely<Database>, name: string): Promise<number> {
  const { rows } = await sql<{ n: number }>`
    select count(*) as n from deliveries where bucket = ${name} and state in ('pending', 'retrying', 'delivering')`.execute(db);
  return Number(rows[0]?.n ?? 0);
}

/** Turns the bucket into a deleting tombstone (a no-op on one already deleting). */
async function markDeleting(db: Kysely<Database>, name: string, force: boolean, nowMs: number): Promise<'marked' | 'already'> {
  const outcome = await db.transaction().execute(async (trx) => {
    const { rows } = await sql<{ deleting_at: number | null }>`select deleting_at from buckets where name = ${name} for update`.execute(
      trx,
    );
    const row = rows[0];
    if (!row) throw bucketNotFound(name);
    if (row.deleting_at !== null) return 'already' as const;
    // An existence probe under the lock (an index range); the count for the message is taken after.
    if (!force) {
      const { rows: live } = await sql<{ live: boolean }>`
        select exists (select 1 from deliveries where bucket = ${name} and state in ('pending', 'retrying', 'delivering')) as live`.execute(
        trx,
      );
      if (live[0]?.live) return 'not_empty' as const;
    }
    await sql`update buckets set deleting_at = ${nowMs}, updated_at = ${nowMs} where name = ${name} and deleting_at is null`.execute(trx);
    await bumpEpoch(trx);
    await notify(trx, BUCKETS_CHANNEL, [name]);
    return 'marked' as const;
  });
  if (outcome === 'not_empty') {
    const n = await liveCount(db, name);
    throw new AppError('bucket_not_empty', `bucket ${name} has ${n} undelivered request(s); use --force to delete them too`);
  }
  return outcome;
}

/** One purge transaction; `lockWaitMs` bounds each lock wait in it (lock_timeout). */
async function purgeBatch(db: Kysely<Database>, name: string, lockWaitMs?: number): Promise<PurgeStep> {
  return db.transaction().execute(async (trx) => {
    if (lockWaitMs !== undefined) {
      await sql`select set_config('lock_timeout', ${`${Math.max(0, Math.floor(lockWaitMs))}ms`}, true)`.execute(trx);
    }
    const { rows } = await sql<{ deleting_at: number | null }>`select deleting_at from buckets where name = ${name} for update`.execute(
      trx,
    );
    const row = rows[0];
    // Gone (another purger finished it), or a live bucket of that name: never purge a live bucket.
    if (!row || row.deleting_at === null) return { requests: 0, bytes: 0, done: true };
    const { rows: page } = await sql<{ id: string; size: number }>`
      select id, size from requests where bucket = ${name} order by id limit ${PURGE_BATCH}`.execute(trx);
    const { ids, bytes } = purgeIds(page);
    if (ids.length > 0) {
      await sql`delete from attempts where request_id = any(${ids}::text[])`.execute(trx);
      await sql`delete from deliveries where request_id = any(${ids}::text[])`.execute(trx);
      await sql`delete from requests where id = any(${ids}::text[])`.execute(trx);
      return { requests: ids.length, bytes, done: false };
    }
    // Rows whose request is already gone: the foreign keys make none, but an attempt row's
    // request_id is not one, so this stays bounded and faithful to SQLite all the same.
    const strays =
      Number(
        (await sql`delete from attempts where id in (select id from attempts where bucket = ${name} limit ${PURGE_BATCH})`.execute(trx))
          .numAffectedRows ?? 0n,
      ) +
      Number(
        (await sql`delete from deliveries where id in (select id from deliveries where bucket = ${name} limit ${PURGE_BATCH})`.execute(trx))
          .numAffectedRows ?? 0n,
      );
    if (strays > 0) return { requests: 0, bytes: 0, done: false };
    // The bucket's dedup keys, bounded like the rest.
    const keys = await sql`delete from dedup_keys where (bucket, key) in
      (select bucket, key from dedup_keys where bucket = ${name} limit ${PURGE_BATCH})`.execute(trx);
    if (Number(keys.numAffectedRows ?? 0n) > 0) return { requests: 0, bytes: 0, done: false };
    await sql`delete from replays where bucket = ${name}`.execute(trx);
    await sql`delete from rejections where bucket = ${name}`.execute(trx);
    await sql`delete from buckets where name = ${name} and deleting_at is not null`.execute(trx);
    await bumpEpoch(trx);
    await notify(trx, BUCKETS_CHANNEL, [name]);
    return { requests: 0, bytes: 0, done: true };
  });
}

/**
 * Store.deleteBucket: the tombstone in one short transaction (refused with undelivered work unless
 * forced), then the purge to the end. A purge that stops on a storage error leaves the tombstone
 * and says how to finish.
 */
export async function pgDeleteBucket(
  db: Kysely<Database>,
  name: string,
  options: { force: boolean },
  nowMs: number,
): Promise<{ requests: number }> {
  await markDeleting(db, name, options.force, nowMs);
  return purgeToEnd(
    name,
    () => purgeBatch(db, name),
    pgStorageErrorCode,
    async () => Number((await sql<{ n: number }>`select count(*) as n from requests where bucket = ${name}`.execute(db)).rows[0]?.n ?? 0),
  );
}

/**
 * Store.purgeDeleting: finishes every deleting bucket's purge, oldest tombstone first; stops on lock
 * trouble (store_busy), leaving the tombstone for the next pass. `nowMs` is not needed: the purge
 * only deletes (it is in the signature so every store operation takes the caller's clock).
 */
export async function pgPurgeDeleting(db: Kysely<Database>, hooks: PurgeHooks | undefined, nowMs: number): Promise<PurgeResult> {
  void nowMs;
  const h = hooks ?? {};
  const { rows: deleting } = await sql<{ name: string }>`
    select name from buckets where deleting_at is not null order by deleting_at, name collate "C"`.execute(db);
  return purgeEachDeleting(
    deleting.map((t) => t.name),
    (name) => purgeBatch(db, name, h.lockWaitMs),
    (e) => pgStorageErrorCode(e) === 'store_busy',
    h,
  );
}

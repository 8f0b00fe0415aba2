/**
 * `bucket delete` on SQLite: a tombstone first, then a purge in short batches.
 *
 * 1. markDeleting: one short IMMEDIATE transaction sets buckets.deleting_at and bumps the bucket
 *    epoch (other processes' caches drop the bucket). From then on ingest refuses the name (404,
 *    checked again inside each group commit), the worker claims nothing of it, and `bucket create`
 *    of the name is refused (`bucket_deleting`). The bucket stays listed, as deleting.
 * 2. purgeBatch, repeated: one IMMEDIATE transaction reads the next ids and deletes them with their
 *    deliveries and attempts, at most 500 requests and 8 MiB of bodies (a few ms of lock: ingest's
 *    group commits never wait long). Reading and deleting under the same lock means no batch acts
 *    on a stale read. The batch that finds nothing left removes the remaining replays and rejection
 *    counts and the tombstone itself, and the name is free.
 *
 * Lock trouble or a crash between batches stops the purge and never undoes it: the tombstone
 * stands, `bucket delete <name>` (no --force needed) or serve's background pass finishes it.
 * Before this, the bucket row went first and the rows after it; a delete that failed half-way left
 * rows without a bucket, and a new bucket of the same name had them delivered to its destination.
 */
import { AppError, bucketNotFound } from '../../shared/errors.js';
import { PURGE_BATCH, purgeIds, type PurgeStep } from '../purge.js';
import type { SqliteDb } from './open.js';

// The batch bounds and the gap between batches (PURGE_BATCH, PURGE_BATCH_BYTES, PURGE_GAP_MS, and
// why SQLite needs the gap) are in ../purge.ts, shared with PostgreSQL.

export interface DeletingBucket {
  name: string;
  deletingAt: number;
}

export type Purger = ReturnType<typeof createPurger>;

export { deletingError } from '../store.js';

export function createPurger(db: SqliteDb) {
  const s = {
    bucket: db.prepare('select deleting_at from buckets where name = ?'),
    live: db
      .prepare(`select exists (select 1 from deliveries where bucket = ? and state in ('pending', 'retrying', 'delivering'))`)
      .pluck(),
    liveCount: db.prepare(`select count(*) from deliveries where bucket = ? and state in ('pending', 'retrying', 'delivering')`).pluck(),
    mark: db.prepare('update buckets set deleting_at = ?, updated_at = ? where name = ? and deleting_at is null'),
    epoch: db.prepare(`update meta set value = value + 1 where key = 'bucket_epoch'`),
    page: db.prepare('select id, size from requests where bucket = ? order by id limit ?'),
    deleteAttempts: db.prepare('delete from attempts where request_id in (select value from json_each(?))'),
    deleteDeliveries: db.prepare('delete from deliveries where request_id in (select value from json_each(?))'),
    deleteRequests: db.prepare('delete from requests where id in (select value from json_each(?))'),
    // Rows whose request is already gone (none are made so; bounded all the same).
    strayAttempts: db.prepare('delete from attempts where id in (select id from attempts where bucket = ? limit ?)'),
    strayDeliveries: db.prepare('delete from deliveries where id in (select id from deliveries where bucket = ? limit ?)'),
    // The bucket's dedup keys (PRIMARY KEY (bucket, key) finds them), bounded like the rest.
    deleteDedupKeys: db.prepare('delete from dedup_keys where rowid in (select rowid from dedup_keys where bucket = ? limit ?)'),
    deleteReplayPacers: db.prepare('delete from replay_pacer where replay_id in (select id from replays where bucket = ?)'),
    deleteReplays: db.prepare('delete from replays where bucket = ?'),
    deletePacer: db.prepare('delete from bucket_pacer where bucket = ?'),
    deleteRejections: db.prepare('delete from rejections where bucket = ?'),
    deleteTombstone: db.prepare('delete from buckets where name = ? and deleting_at is not null'),
    deleting: db.prepare('select name, deleting_at from buckets where deleting_at is not null order by deleting_at, name'),
    hasRows: db
      .prepare(
        `select exists (select 1 from requests where bucket = @b) or exists (select 1 from deliveries where bucket = @b)
         or exists (select 1 from replays where bucket = @b) or exists (select 1 from rejections where bucket = @b)
         or exists (select 1 from dedup_keys where bucket = @b)`,
      )
      .pluck(),
  };

  const mark = db.transaction((name: string, force: boolean, nowMs: number): 'marked' | 'already' => {
    const row = s.bucket.get(name) as { deleting_at: number | null } | undefined;
    if (!row) throw bucketNotFound(name);
    if (row.deleting_at !== null) return 'already';
    // An existence probe under the lock (an index seek); the count for the message is taken after.
    if (!force && Number(s.live.get(name)) === 1) throw new AppError('bucket_not_empty', '');
    s.mark.run(nowMs, nowMs, name);
    s.epoch.run();
    return 'marked';
  });

  const batch = db.transaction((name: string): PurgeStep => {
    const row = s.bucket.get(name) as { deleting_at: number | null } | undefined;
    // Gone (another purger finished it), or a live bucket of that name: never purge a live bucket.
    if (!row || row.deleting_at === null) return { requests: 0, bytes: 0, done: true };
    const page = s.page.all(name, PURGE_BATCH) as Array<{ id: string; size: number }>;
    const { ids, bytes } = purgeIds(page);
    if (ids.length > 0) {
      const list = JSON.stringify(ids);
      s.deleteAttempts.run(list);
      s.deleteDeliveries.run(list);
      s.deleteRequests.run(list);
      return { requests: ids.length, bytes, done: false };
    }
    if (s.strayAttempts.run(name, PURGE_BATCH).changes + s.strayDeliveries.run(name, PURGE_BATCH).changes > 0) {
      return { requests: 0, bytes: 0, done: false };
    }
    if (s.deleteDedupKeys.run(name, PURGE_BATCH).changes > 0) return { requests: 0, bytes: 0, done: false };
    s.deleteReplayPacers.run(name);
    s.deleteReplays.run(name);
    s.deletePacer.run(name);
    s.deleteRejections.run(name);
    s.deleteTombstone.run(name);
    s.epoch.run();
    return { requests: 0, bytes: 0, done: true };
  });

  /**
   * Rows under a name that has no bucket row (left by a delete that failed before tombstones
   * existed) become a tombstone, inside the caller's transaction; true when it made one.
   */
  const adoptOrphans = (name: string, nowMs: number, maxBody: number): boolean => {
    if (Number(s.hasRows.get({ b: name })) !== 1) return false;
    db.prepare(
      `insert into buckets (name, destination, max_body, paused, paused_at, created_at, updated_at, deleting_at)
       values (?, null, ?, 1, ?, ?, ?, ?)`,
    ).run(name, maxBody, nowMs, nowMs, nowMs, nowMs);
    s.epoch.run();
    return true;
  };

  return {
    /** Turns the bucket into a deleting tombstone (a no-op on one already deleting). */
    markDeleting(name: string, force: boolean, nowMs: number): 'marked' | 'already' {
      try {
        return mark.immediate(name, force, nowMs);
      } catch (e) {
        if ((e as AppError).code === 'bucket_not_empty') {
          const n = Number(s.liveCount.get(name));
          throw new AppError('bucket_not_empty', `bucket ${name} has ${n} undelivered request(s); use --force to delete them too`);
        }
        throw e;
      }
    },
    /** One purge transaction. */
    purgeBatch(name: string): PurgeStep {
      return batch.immediate(name);
    },
    adoptOrphans,
    deleting(): DeletingBucket[] {
      return (s.deleting.all() as Array<{ name: string; deleting_at: number }>).map((r) => ({
        name: r.name,
        deletingAt: Number(r.deleting_at),
      }));
    },
  };
}

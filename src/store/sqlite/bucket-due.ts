/**
 * Which buckets have work due, kept in the database (table bucket_due, migration
 * 2026-12-03T03-bucket-due): one row per bucket with `next_due_at`, a lower bound in epoch ms on
 * when one of its deliveries can next be claimed (null: nothing waits). The drain worker asks one
 * indexed question per pass, "which unpaused, undeleted buckets are due now?", and claims from those only, so
 * a pass costs the same with 10 buckets or 10,000 idle ones.
 *
 * Who moves it:
 * - lowered (never raised) by whatever makes a delivery claimable: ingest's commit (a first
 *   attempt), a retry or a release recorded by the worker, lease recovery, a replay, and a bucket
 *   update (a destination set on a bucket without one makes its old rows deliverable again);
 * - set by a claim, in the claim's own transaction, to the earliest due time left in the bucket
 *   after it (still <= now when the claim stopped at its limit: the bucket stays due).
 *
 * Lowering is `… where next_due_at is null or next_due_at > ?`: a bucket already due is not
 * written at all, so a busy bucket's ingest commits pay one primary-key lookup per bucket per
 * batch, not a write. It is an upsert so a bucket made by any version (or a row lost to a
 * delete-and-recreate) is never missed. The same SQL runs on PostgreSQL (ON CONFLICT … DO UPDATE
 * … WHERE), and the index on next_due_at is a plain B-tree range there too (no skip scan needed,
 * unlike one query over every bucket's deliveries).
 *
 * Races: on SQLite a claim is one IMMEDIATE transaction, so no commit lands between its reading
 * what is left and its writing next_due_at. A PostgreSQL claim must lock the bucket's bucket_due
 * row first (SELECT … FOR UPDATE), or an ingest committing in between could be overwritten by a
 * later time and its delivery left unseen until the bucket's next lowering.
 *
 * Paused buckets keep their row as it is; the due query leaves them out by joining buckets, so a
 * resume makes them due again at once. A deleted bucket's row is ignored the same way.
 */
import { sql, type Kysely } from 'kysely';
import type { Statement } from 'better-sqlite3';
import type { SqliteDb } from './open.js';

const LOWER_ON_CONFLICT = `on conflict (bucket) do update set next_due_at = excluded.next_due_at
  where bucket_due.next_due_at is null or bucket_due.next_due_at > excluded.next_due_at`;

/** Lowers a bucket's next due time to `atMs` (args: bucket, atMs). */
export function lowerDueStatement(db: SqliteDb): Statement<[string, number]> {
  return db.prepare(`insert into bucket_due (bucket, next_due_at) values (?, ?) ${LOWER_ON_CONFLICT}`);
}

/** The same, for the bucket a delivery belongs to (args: atMs, deliveryId). */
export function lowerDueForDeliveryStatement(db: SqliteDb): Statement<[number, string]> {
  // `where` on the select is what SQLite's parser needs before an upsert's ON CONFLICT.
  return db.prepare(`insert into bucket_due (bucket, next_due_at) select bucket, ? from deliveries where id = ? ${LOWER_ON_CONFLICT}`);
}

/** Lowers a bucket's next due time inside a Kysely transaction (bucket writes in SqliteStore). */
// biome-ignore lint/suspicious/noExplicitAny: called inside transactions of several schema views
export async function lowerDue(trx: Kysely<any>, bucket: string, atMs: number): Promise<void> {
  await sql`insert into bucket_due (bucket, next_due_at) values (${bucket}, ${atMs}) ${sql.raw(LOWER_ON_CONFLICT)}`.execute(trx);
}

export interface BucketDue {
  /** Unpaused buckets with work due at `nowMs`. */
  dueBuckets(nowMs: number): string[];
  /** The earliest next due time after `nowMs` among unpaused buckets; null when none. */
  nextAfter(nowMs: number): number | null;
  /**
   * Sets the bucket's next due time to its earliest waiting delivery (inside the claim's
   * transaction, after the claim). A bucket without a destination counts only its `--to` rows.
   */
  settle(bucket: string, ownDestination: boolean): void;
}

// INDEXED BY and CROSS JOIN keep the next_due_at range of bucket_due as the outer loop: with
// statistics from ANALYZE (mostly null rows), SQLite otherwise chose to scan every row of
// bucket_due, or of buckets, which is exactly the per-bucket cost this table exists to avoid
// (test/store/sqlite/due-plan.test.ts). A PostgreSQL dialect writes the same query without the hint.
export const DUE_BUCKETS_SQL = `select d.bucket from bucket_due d indexed by bucket_due_next cross join buckets b on b.name = d.bucket
  where d.next_due_at <= ? and b.paused = 0 and b.deleting_at is null`;
export const NEXT_DUE_SQL = `select d.next_due_at from bucket_due d indexed by bucket_due_next cross join buckets b on b.name = d.bucket
  where d.next_due_at > ? and b.paused = 0 and b.deleting_at is null order by d.next_due_at limit 1`;

export function createBucketDue(db: SqliteDb): BucketDue {
  const due = db.prepare(DUE_BUCKETS_SQL).pluck();
  const next = db.prepare(NEXT_DUE_SQL).pluck();
  // States written into the SQL: better-sqlite3's SQLite has STAT4, which re-prepares a statement
  // whose bound value meets an indexed column. Each is one descent of deliveries_bucket_due_id.
  const earliest = (state: string, own: boolean) =>
    db
      .prepare(
        `select min(next_attempt_at) from deliveries where bucket = ? and state = '${state}'${own ? '' : ' and destination is not null'}`,
      )
      .pluck();
  const earliestOf = {
    own: [earliest('pending', true), earliest('retrying', true)],
    to: [earliest('pending', false), earliest('retrying', false)],
  };
  const set = db.prepare(
    `insert into bucket_due (bucket, next_due_at) values (?, ?) on conflict (bucket) do update set next_due_at = excluded.next_due_at`,
  );
  return {
    dueBuckets: (nowMs) => due.all(nowMs) as string[],
    nextAfter(nowMs) {
      const at = next.get(nowMs) as number | null | undefined;
      return at === undefined || at === null ? null : Number(at);
    },
    settle(bucket, ownDestination) {
      let min: number | null = null;
      for (const s of ownDestination ? earliestOf.own : earliestOf.to) {
        const at = s.get(bucket) as number | null;
        if (at !== null && (min === null || Number(at) < min)) min = Number(at);
      }
      set.run(bucket, min);
    },
  };
}

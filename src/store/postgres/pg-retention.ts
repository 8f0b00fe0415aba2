/**
 * Retention on PostgreSQL: `hookbucket prune` and the server's per-bucket `--retain`, with the same
 * walk, batch bounds and counts as src/store/sqlite/sqlite-retention.ts (read its header): each
 * batch is one short transaction that reads a page of candidates (oldest first, by id) and deletes
 * those that qualify, at most 500 requests and 8 MiB of bodies, children first (attempts,
 * deliveries, requests: the foreign keys want it).
 *
 * SQLite's write lock made "read, then delete" atomic; here the page's requests are locked
 * (FOR UPDATE, by id) before their liveness is read, by a statement that starts after the lock is
 * held (READ COMMITTED gives each statement a fresh snapshot). A replay locks the requests it
 * replays FOR NO KEY UPDATE (pg-replay.ts), which conflicts: either it committed first and its new
 * live delivery is seen (the request is kept), or it waits for this batch and finds the request
 * gone. A dry run locks nothing and reads each batch from one REPEATABLE READ snapshot.
 *
 * reclaimedBytes is always 0 on PostgreSQL: there is no incremental_vacuum. What the README should
 * say for PostgreSQL: "prune deletes the rows; autovacuum then marks their space reusable, and new
 * requests fill it, so the database stops growing but does not shrink. `reclaimed_bytes` is 0 on
 * PostgreSQL. To give the space back to the operating system, run `VACUUM FULL requests,
 * deliveries, attempts` (it rewrites the tables under an exclusive lock: ingest and the worker
 * wait while it runs) or use pg_repack, which does it with brief locks."
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import { bucketNotFound } from '../../shared/errors.js';
import type { Database } from '../schema.js';
import {
  choosePrunable,
  DEDUP_PRUNE_BATCH,
  PRUNE_BATCH,
  pruneWalk,
  walkStates,
  zeroCounts,
  type PruneCandidate,
  type PruneStep,
  type WalkState,
} from '../prune-walk.js';
import type { PruneHooks, PruneOptions, PruneResult } from '../store.js';

const affected = (r: { numAffectedRows?: bigint }) => Number(r.numAffectedRows ?? 0n);

export async function pgPrune(db: Kysely<Database>, o: PruneOptions, hooks: PruneHooks = {}): Promise<PruneResult> {
  // Every bucket (deleting ones too, as SQLite's listBuckets), in byte order of names (collate "C",
  // SQLite's BINARY), or the one named.
  let buckets: string[];
  if (o.bucket === undefined) {
    buckets = (await sql<{ name: string }>`select name from buckets order by name collate "C"`.execute(db)).rows.map((r) => r.name);
  } else {
    const found = await db.selectFrom('buckets').select('name').where('name', '=', o.bucket).executeTakeFirst();
    if (!found) throw bucketNotFound(o.bucket);
    buckets = [found.name];
  }

  const total: PruneResult = { ...zeroCounts(), buckets: {}, reclaimedBytes: 0 };
  const progress = (bucket: string) =>
    hooks.onProgress?.({ bucket, phase: 'delete', requests: total.requests, bytes: total.bytes, reclaimedBytes: total.reclaimedBytes });

  /** One batch: the next page of one state's candidates, and the deletion of those that qualify. */
  const batch = async (trx: Transaction<Database>, bucket: string, state: WalkState, after: string): Promise<PruneStep> => {
    const { rows: pageRows } =
      state === 'none'
        ? await sql<{
            id: string;
          }>`select id from requests where bucket = ${bucket} and id > ${after} order by id limit ${PRUNE_BATCH}`.execute(trx)
        : state === 'quarantined' || state === 'duplicate' || state === 'handshake'
          ? await sql<{ id: string }>`select id from requests where bucket = ${bucket} and disposition <> 'accepted'
              and disposition = ${state} and id > ${after} order by id limit ${PRUNE_BATCH}`.execute(trx)
          : await sql<{ id: string }>`select request_id as id from deliveries
            where latest = 1 and bucket = ${bucket} and state = ${state} and request_id > ${after} order by request_id limit ${PRUNE_BATCH}`.execute(
              trx,
            );
    const page = pageRows.map((r) => r.id);
    if (page.length === 0) return { done: true, next: after, counts: zeroCounts() };
    if (!o.dryRun) await sql`select id from requests where id = any(${page}::text[]) order by id for update`.execute(trx);
    // octet_length reads a bytea's length from its TOAST pointer, without fetching the body.
    const { rows } = await sql<PruneCandidate>`
      select r.id, r.received_at as at, octet_length(r.body) as size,
        exists (select 1 from deliveries l where l.request_id = r.id and l.state in ('pending', 'retrying', 'delivering')) as live,
        exists (select 1 from deliveries d where d.request_id = r.id and d.destination is null) as own
      from requests r where r.id = any(${page}::text[]) order by r.id`.execute(trx);
    const { take, step } = choosePrunable(state, page, rows, o.receivedBeforeMs);
    const counts = step.counts;
    if (take.length > 0) {
      if (o.dryRun) {
        const d = await sql<{ n: number }>`select count(*) as n from deliveries where request_id = any(${take}::text[])`.execute(trx);
        const a = await sql<{ n: number }>`
          select count(*) as n from attempts where delivery_id in (select id from deliveries where request_id = any(${take}::text[]))`.execute(
          trx,
        );
        counts.deliveries = Number(d.rows[0]?.n ?? 0);
        counts.attempts = Number(a.rows[0]?.n ?? 0);
      } else {
        counts.attempts = affected(
          await sql`delete from attempts where delivery_id in (select id from deliveries where request_id = any(${take}::text[]))`.execute(
            trx,
          ),
        );
        counts.deliveries = affected(await sql`delete from deliveries where request_id = any(${take}::text[])`.execute(trx));
        await sql`delete from requests where id = any(${take}::text[])`.execute(trx);
      }
    }
    return step;
  };
  const run = (bucket: string, state: WalkState, after: string) =>
    o.dryRun
      ? db
          .transaction()
          .setIsolationLevel('repeatable read')
          .setAccessMode('read only')
          .execute((trx) => batch(trx, bucket, state, after))
      : db.transaction().execute((trx) => batch(trx, bucket, state, after));

  await pruneWalk(total, buckets, walkStates(o.states), hooks, run, progress);
  // Expired dedup keys, bucket by bucket, in short transactions. SKIP LOCKED: a key an ingest batch
  // holds (it is taking it over) is left for the next pass rather than waited for.
  total.dedupKeys = 0;
  const nowMs = o.nowMs ?? Date.now();
  for (const bucket of buckets) {
    if (o.dryRun) {
      const r = await sql<{ n: number }>`select count(*) as n from dedup_keys where bucket = ${bucket} and expires_at <= ${nowMs}`.execute(
        db,
      );
      total.dedupKeys += Number(r.rows[0]?.n ?? 0);
      continue;
    }
    for (;;) {
      if (hooks.signal?.aborted) return total;
      const r = await sql`delete from dedup_keys where (bucket, key) in (select bucket, key from dedup_keys
        where bucket = ${bucket} and expires_at <= ${nowMs} limit ${DEDUP_PRUNE_BATCH} for update skip locked)`.execute(db);
      const n = affected(r);
      total.dedupKeys += n;
      if (n < DEDUP_PRUNE_BATCH) break;
    }
  }
  return total;
}

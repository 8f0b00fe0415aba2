/**
 * Retention on SQLite: `hookbucket prune` and the server's per-bucket `--retain` (the rules are in
 * src/retention/rules.ts).
 *
 * Each batch is one IMMEDIATE transaction (the write lock up front, so a busy lock waits in
 * busy_timeout instead of failing half-way) that reads a page of candidates and deletes the ones
 * that qualify, at most 500 requests and 8 MiB of bodies: a few milliseconds of lock, so ingest's
 * group commits never wait long. Reading and deleting in the same transaction means a replay that
 * lands between two batches is seen: a request that just got a live delivery is kept. Between
 * batches the event loop runs (the server keeps answering), then freed pages go back to the file
 * system in 256-page incremental_vacuum steps.
 *
 * Candidates are walked in id order (ids are time-ordered, so oldest first) from an index: for
 * delivered, failed and exhausted the partial deliveries_latest_state index, for none the bucket's
 * requests. A walk stops at the first page with nothing received before the cutoff.
 */
import type { PruneHooks, PruneOptions, PruneResult } from '../store.js';
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
import type { SqliteDb } from './open.js';

/** Pages per incremental_vacuum step (1 MiB at 4 KiB pages). */
const VACUUM_PAGES = 256;
/** PRAGMA auto_vacuum value for INCREMENTAL. */
const AUTO_VACUUM_INCREMENTAL = 2;

const yieldToEventLoop = () => new Promise<void>((resolve) => setImmediate(resolve));

export async function pruneRequests(
  db: SqliteDb,
  buckets: readonly string[],
  o: PruneOptions,
  hooks: PruneHooks = {},
): Promise<PruneResult> {
  const ids = '(select value from json_each(?))';
  const s = {
    pageByState: db
      .prepare(
        'select request_id from deliveries where latest = 1 and bucket = ? and state = ? and request_id > ? order by request_id limit ?',
      )
      .pluck(),
    pageAll: db.prepare('select id from requests where bucket = ? and id > ? order by id limit ?').pluck(),
    // The partial index requests_by_disposition (the literal term lets SQLite use it).
    pageByDisposition: db
      .prepare(`select id from requests where bucket = ? and disposition <> 'accepted' and disposition = ? and id > ? order by id limit ?`)
      .pluck(),
    deleteExpiredKeys: db.prepare(
      `delete from dedup_keys where rowid in (select rowid from dedup_keys where bucket = ? and expires_at <= ? limit ${DEDUP_PRUNE_BATCH})`,
    ),
    countExpiredKeys: db.prepare('select count(*) from dedup_keys where bucket = ? and expires_at <= ?').pluck(),
    // length(body) reads the length from the record header without the body's overflow pages.
    detail: db.prepare(
      `select r.id, r.received_at as at, length(r.body) as size,
         exists (select 1 from deliveries l where l.request_id = r.id and l.state in ('pending', 'retrying', 'delivering')) as live,
         exists (select 1 from deliveries d where d.request_id = r.id and d.destination is null) as own
       from requests r where r.id in ${ids} order by r.id`,
    ),
    countDeliveries: db.prepare(`select count(*) from deliveries where request_id in ${ids}`).pluck(),
    countAttempts: db
      .prepare(`select count(*) from attempts where delivery_id in (select id from deliveries where request_id in ${ids})`)
      .pluck(),
    // Attempts by delivery id: attempts_delivery (delivery_id, started_at) serves it.
    deleteAttempts: db.prepare(`delete from attempts where delivery_id in (select id from deliveries where request_id in ${ids})`),
    deleteDeliveries: db.prepare(`delete from deliveries where request_id in ${ids}`),
    deleteRequests: db.prepare(`delete from requests where id in ${ids}`),
  };

  const total: PruneResult = { ...zeroCounts(), buckets: {}, reclaimedBytes: 0 };
  const progress = (bucket: string, phase: 'delete' | 'reclaim') =>
    hooks.onProgress?.({ bucket, phase, requests: total.requests, bytes: total.bytes, reclaimedBytes: total.reclaimedBytes });

  /** One batch: the next page of one state's candidates, and the deletion of those that qualify. */
  const batch = (bucket: string, state: WalkState, after: string): PruneStep => {
    const page = (
      state === 'none'
        ? s.pageAll.all(bucket, after, PRUNE_BATCH)
        : state === 'quarantined' || state === 'duplicate' || state === 'handshake'
          ? s.pageByDisposition.all(bucket, state, after, PRUNE_BATCH)
          : s.pageByState.all(bucket, state, after, PRUNE_BATCH)
    ) as string[];
    if (page.length === 0) return { done: true, next: after, counts: zeroCounts() };
    const rows = s.detail.all(JSON.stringify(page)) as PruneCandidate[];
    const { take, step } = choosePrunable(state, page, rows, o.receivedBeforeMs);
    const counts = step.counts;
    if (take.length > 0) {
      const list = JSON.stringify(take);
      if (o.dryRun) {
        counts.deliveries = Number(s.countDeliveries.get(list));
        counts.attempts = Number(s.countAttempts.get(list));
      } else {
        counts.attempts = s.deleteAttempts.run(list).changes;
        counts.deliveries = s.deleteDeliveries.run(list).changes;
        s.deleteRequests.run(list);
      }
    }
    return step;
  };
  const tx = db.transaction(batch);
  const run = (bucket: string, state: WalkState, after: string) =>
    o.dryRun ? tx.deferred(bucket, state, after) : tx.immediate(bucket, state, after);

  await pruneWalk(total, buckets, walkStates(o.states), hooks, run, (bucket) => progress(bucket, 'delete'), yieldToEventLoop);
  // Expired dedup keys, bucket by bucket, in short write transactions.
  total.dedupKeys = 0;
  const nowMs = o.nowMs ?? Date.now();
  for (const bucket of buckets) {
    if (o.dryRun) {
      total.dedupKeys += Number(s.countExpiredKeys.get(bucket, nowMs));
      continue;
    }
    for (;;) {
      if (hooks.signal?.aborted) return total;
      const n = db.transaction(() => s.deleteExpiredKeys.run(bucket, nowMs).changes).immediate();
      total.dedupKeys += n;
      if (n < DEDUP_PRUNE_BATCH) break;
      await yieldToEventLoop();
    }
  }
  // Not after an aborted walk (its reclaim would stop at once all the same).
  if (!o.dryRun && total.requests > 0 && !hooks.signal?.aborted) await reclaim(db, hooks, total, () => progress('', 'reclaim'));
  return total;
}

/** Gives freed pages back to the file system in small steps, each its own short write. */
async function reclaim(db: SqliteDb, hooks: PruneHooks, total: PruneResult, progress: () => void): Promise<void> {
  // Only a file created with auto_vacuum=INCREMENTAL can give pages back this way; incremental_vacuum
  // is a no-op on any other, and the loop below would never see the freelist shrink.
  if (Number(db.pragma('auto_vacuum', { simple: true })) !== AUTO_VACUUM_INCREMENTAL) return;
  const pageSize = Number(db.pragma('page_size', { simple: true }));
  for (;;) {
    if (hooks.signal?.aborted) return;
    const free = Number(db.pragma('freelist_count', { simple: true }));
    if (free === 0) return;
    db.pragma(`incremental_vacuum(${VACUUM_PAGES})`);
    const after = Number(db.pragma('freelist_count', { simple: true }));
    // Another connection may be using the freed pages as fast as they go: stop rather than spin.
    if (after >= free) return;
    total.reclaimedBytes += (free - after) * pageSize;
    progress();
    await yieldToEventLoop();
  }
}

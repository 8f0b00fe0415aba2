/**
 * Replays on SQLite. A replay never erases what happened: each selected request gets a new
 * delivery whose generation is one more than the request's highest (counted per request, every
 * destination included), with a fresh attempt history; earlier generations and their attempts
 * stay as they are. The superseding rules (src/replay/replay.ts states them for people):
 *
 * - to the bucket's destination: an earlier pending or retrying delivery becomes `superseded` at
 *   once; one in flight is marked, finishes its attempt (recorded), then becomes `superseded`
 *   whatever the outcome, and the claim query skips the new generation until then;
 * - `--to <url>`: a delivery to that URL, which supersedes nothing and leaves the request's
 *   state alone (it follows the bucket destination's latest generation).
 *
 * Written in transactions of at most REPLAY_BATCH requests, so ingest never waits long for the lock.
 */
import { bucketNotFound } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { ReplaysTable } from '../schema.js';
import type { NewReplay, Replay, ReplayProgress } from '../store.js';
import { toReplay, toReplayProgress, type ReplayStateRow } from '../replay-rows.js';
import { lowerDueStatement } from './bucket-due.js';
import type { SqliteDb } from './open.js';
import { deletingError } from './sqlite-delete.js';

const REPLAY_BATCH = 500;

export function createReplay(db: SqliteDb, r: NewReplay): Replay {
  const maxGen = db.prepare('select coalesce(max(generation), 0) from deliveries where request_id = ?').pluck();
  const supersedeWaiting = db.prepare(
    `update deliveries set state = 'superseded', settled_at = ?, latest = 0, updated_at = ?
     where request_id = ? and destination is null and state in ('pending', 'retrying')`,
  );
  const supersedeInFlight = db.prepare(
    `update deliveries set supersede_requested = 1, latest = 0, updated_at = ?
     where request_id = ? and destination is null and state = 'delivering'`,
  );
  const notLatest = db.prepare(`update deliveries set latest = 0 where request_id = ? and destination is null and latest = 1`);
  const insert = db.prepare(
    `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, lease_until,
       trigger, replay_id, deferrals, last_deferral_reason, created_at, updated_at, latest)
     values (?, ?, ?, ?, ?, 'pending', 0, ?, null, 'replay', ?, 0, null, ?, ?, ?)`,
  );
  const exists = db.prepare('select 1 from requests where id = ? and bucket = ?').pluck();
  const insertReplay = db.prepare(
    `insert into replays (id, bucket, selection, destination, rate_count, rate_per_ms, total, superseded, created_at)
     values (?, ?, ?, ?, ?, ?, 0, 0, ?)`,
  );
  const addCounts = db.prepare('update replays set total = total + ?, superseded = superseded + ? where id = ?');
  const lowerDue = lowerDueStatement(db);

  const live = db.prepare('select deleting_at from buckets where name = ?');
  // A replay of a bucket that is gone or being deleted would add deliveries its purge removes.
  const mustBeLive = () => {
    const row = live.get(r.bucket) as { deleting_at: number | null } | undefined;
    if (!row) throw bucketNotFound(r.bucket);
    if (row.deleting_at !== null) throw deletingError(r.bucket);
  };

  db.transaction(() => {
    mustBeLive();
    insertReplay.run(r.id, r.bucket, JSON.stringify(r.selection), r.destination, r.rate?.count ?? null, r.rate?.perMs ?? null, r.nowMs);
  }).immediate();

  // A replay to the bucket destination of a request that was not accepted (quarantined, duplicate,
  // handshake: only when the replay named that state, select-replay.ts) delivers it: it becomes
  // accepted, like `requests verify --release`; its verdict and duplicate_of stay as evidence.
  const accept = db.prepare(`update requests set disposition = 'accepted' where id = ? and disposition <> 'accepted'`);
  const batch = db.transaction((ids: readonly string[]) => {
    mustBeLive();
    let total = 0;
    let superseded = 0;
    for (const id of ids) {
      if (exists.get(id, r.bucket) === undefined) continue;
      const generation = Number(maxGen.get(id)) + 1;
      if (r.destination === null) {
        superseded += supersedeWaiting.run(r.nowMs, r.nowMs, id).changes;
        superseded += supersedeInFlight.run(r.nowMs, id).changes;
        notLatest.run(id);
        accept.run(id);
      }
      insert.run(newId(), id, r.bucket, r.destination, generation, r.nowMs, r.id, r.nowMs, r.nowMs, r.destination === null ? 1 : 0);
      total++;
    }
    addCounts.run(total, superseded, r.id);
    // The new generations are due now (--to rows of a bucket without a destination too).
    if (total > 0) lowerDue.run(r.bucket, r.nowMs);
  });
  for (let i = 0; i < r.requestIds.length; i += REPLAY_BATCH) batch.immediate(r.requestIds.slice(i, i + REPLAY_BATCH));
  return getReplay(db, r.id)!;
}

export function getReplay(db: SqliteDb, id: string): Replay | undefined {
  const row = db.prepare('select * from replays where id = ?').get(id) as ReplaysTable | undefined;
  return row ? toReplay(row) : undefined;
}

export function listReplays(db: SqliteDb, options: { bucket?: string; limit: number }): Replay[] {
  const rows = (
    options.bucket === undefined
      ? db.prepare('select * from replays order by created_at desc, id desc limit ?').all(options.limit)
      : db.prepare('select * from replays where bucket = ? order by created_at desc, id desc limit ?').all(options.bucket, options.limit)
  ) as ReplaysTable[];
  return rows.map(toReplay);
}

export function replayProgress(db: SqliteDb, id: string): ReplayProgress {
  const rows = db
    .prepare('select state, count(*) n, max(settled_at) last from deliveries where replay_id = ? group by state')
    .all(id) as ReplayStateRow[];
  const paused =
    Number(
      db.prepare('select coalesce(max(b.paused), 0) from replays r join buckets b on b.name = r.bucket where r.id = ?').pluck().get(id),
    ) === 1;
  return toReplayProgress(rows, paused);
}

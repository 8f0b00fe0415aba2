/**
 * Replays on PostgreSQL: the same rules as src/store/sqlite/sqlite-replay.ts (a new generation per
 * selected request, one more than its highest over every destination; earlier pending or retrying
 * deliveries to the bucket destination superseded at once, one in flight marked
 * supersede_requested; `--to` rows supersede nothing), written in transactions of at most
 * REPLAY_BATCH requests.
 *
 * What SQLite's write lock gave for free is taken here row by row, always in this order (ingest's
 * too: bucket rows, then bucket_due; pg-ingest-batch.ts), so two writers never wait on each other
 * in a cycle:
 * 1. the bucket row FOR SHARE: a `bucket delete` (which takes it FOR UPDATE) cannot mark the bucket
 *    deleting while a batch is writing, and a batch never starts on a deleting bucket;
 * 2. the bucket's bucket_due row FOR UPDATE, before any delivery: a claim takes it first
 *    (bucket-due.ts) and may then record completions, so it must never find a delivery held by a
 *    batch that waits for its bucket_due row;
 * 3. the selected requests FOR NO KEY UPDATE, by id: two replays of the same request take turns,
 *    so they cannot both compute the same next generation (also for a request without any
 *    delivery, which has nothing else to lock); prune's FOR UPDATE waits for them too;
 * 4. the requests' deliveries FOR UPDATE, by id: a completion that commits between our reading a
 *    delivery as `delivering` and our marking it would otherwise turn it into `retrying` unseen
 *    (READ COMMITTED re-checks the UPDATE's WHERE on the new row and skips it), leaving two live
 *    generations. Locked first, the completion either committed before (we see `retrying` and
 *    supersede it) or waits for us (and sees supersede_requested).
 * bucket_due is lowered at the end, on the row already locked (or inserted when the bucket has
 * none yet). The bucket's REQUESTS_CHANNEL notice (new due work) is queued in the same
 * transaction, so it is sent at the commit and never before. A batch that PostgreSQL picks as a
 * deadlock victim (SQLSTATE 40P01: a writer took these rows in another order) rolled back whole,
 * so it runs again after a short pause, up to DEADLOCK_TRIES times.
 */
import { sql, type Kysely } from 'kysely';
import { bucketNotFound } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { Database, DeliveriesTable } from '../schema.js';
import { deletingError, type NewReplay, type Replay, type ReplayProgress } from '../store.js';
import { toReplay, toReplayProgress, type ReplayStateRow } from '../replay-rows.js';
import { notify, REQUESTS_CHANNEL } from './pg-notify.js';
import { dueNow } from './pg-clock.js';
import { lowerDue } from './pg-bucket-due.js';

const REPLAY_BATCH = 500;
/** Runs of one batch when it is a deadlock victim (each rolled back whole before the next). */
const DEADLOCK_TRIES = 3;
const DEADLOCK_BACKOFF_MS = 100; // then 200 ms before the third run

/** The bucket row, share-locked; a bucket gone or being deleted would get deliveries its purge removes. */
async function mustBeLive(trx: Kysely<Database>, bucket: string): Promise<void> {
  const { rows } = await sql<{ deleting_at: number | null }>`select deleting_at from buckets where name = ${bucket} for share`.execute(trx);
  const row = rows[0];
  if (!row) throw bucketNotFound(bucket);
  if (row.deleting_at !== null) throw deletingError(bucket);
}

const affected = (r: { numAffectedRows?: bigint }) => Number(r.numAffectedRows ?? 0n);

/**
 * Splits ids into rounds in which each id appears once (the k-th occurrence in round k), so the
 * set-based statements give what SQLite's per-id loop gives for a list that repeats an id.
 */
function rounds(ids: readonly string[]): string[][] {
  const seen = new Map<string, number>();
  const out: string[][] = [];
  for (const id of ids) {
    const k = seen.get(id) ?? 0;
    seen.set(id, k + 1);
    (out[k] ??= []).push(id);
  }
  return out;
}

async function replayBatch(trx: Kysely<Database>, r: NewReplay, ids: readonly string[], useCallerClock: boolean): Promise<void> {
  await mustBeLive(trx, r.bucket);
  // The new generations are due at the database's now (the worker's clock of record), not the
  // CLI host's; created_at and the superseded times keep the replay's own time.
  const dueAt = await dueNow(trx, r.nowMs, useCallerClock);
  await sql`select 1 from bucket_due where bucket = ${r.bucket} for update`.execute(trx);
  let total = 0;
  let superseded = 0;
  for (const round of rounds(ids)) {
    const { rows: found } = await sql<{ id: string }>`
      select id from requests where id = any(${round}::text[]) and bucket = ${r.bucket} order by id for no key update`.execute(trx);
    const present = new Set(found.map((f) => f.id));
    const own = round.filter((id) => present.has(id));
    if (own.length === 0) continue;
    await sql`select id from deliveries where request_id = any(${own}::text[]) order by id for update`.execute(trx);
    const { rows: gens } = await sql<{ request_id: string; g: number }>`
      select request_id, max(generation) as g from deliveries where request_id = any(${own}::text[]) group by request_id`.execute(trx);
    const maxGen = new Map(gens.map((g) => [g.request_id, Number(g.g)]));
    if (r.destination === null) {
      superseded += affected(
        await sql`update deliveries set state = 'superseded', settled_at = ${r.nowMs}, latest = 0, updated_at = ${r.nowMs}
          where request_id = any(${own}::text[]) and destination is null and state in ('pending', 'retrying')`.execute(trx),
      );
      superseded += affected(
        await sql`update deliveries set supersede_requested = 1, latest = 0, updated_at = ${r.nowMs}
          where request_id = any(${own}::text[]) and destination is null and state = 'delivering'`.execute(trx),
      );
      await sql`update deliveries set latest = 0 where request_id = any(${own}::text[]) and destination is null and latest = 1`.execute(
        trx,
      );
      // A named quarantined, duplicate or handshake request replayed to the bucket destination becomes
      // accepted (../sqlite/sqlite-replay.ts); its verdict and duplicate_of stay as evidence.
      await sql`update requests set disposition = 'accepted' where id = any(${own}::text[]) and disposition <> 'accepted'`.execute(trx);
    }
    const rows: DeliveriesTable[] = own.map((id) => ({
      id: newId(),
      request_id: id,
      bucket: r.bucket,
      destination: r.destination,
      generation: (maxGen.get(id) ?? 0) + 1,
      state: 'pending',
      attempts: 0,
      next_attempt_at: dueAt,
      lease_until: null,
      trigger: 'replay',
      replay_id: r.id,
      deferrals: 0,
      last_deferral_reason: null,
      created_at: r.nowMs,
      updated_at: r.nowMs,
      first_attempt_at: null,
      paused_ms_at_first: null,
      lease_attempt: null,
      last_status: null,
      last_error: null,
      last_attempt_at: null,
      settled_at: null,
      supersede_requested: 0,
      latest: r.destination === null ? 1 : 0,
    }));
    await trx.insertInto('deliveries').values(rows).execute();
    total += own.length;
  }
  await sql`update replays set total = total + ${total}, superseded = superseded + ${superseded} where id = ${r.id}`.execute(trx);
  if (total > 0) {
    // The new generations are due now (--to rows of a bucket without a destination too).
    await lowerDue(trx, r.bucket, dueAt);
    await notify(trx, REQUESTS_CHANNEL, [r.bucket]);
  }
}

/** `useCallerClock`: tests with a manual clock; new generations are due at `r.nowMs`, as on SQLite. */
export async function pgCreateReplay(db: Kysely<Database>, r: NewReplay, useCallerClock = false): Promise<Replay> {
  await db.transaction().execute(async (trx) => {
    await mustBeLive(trx, r.bucket);
    await trx
      .insertInto('replays')
      .values({
        id: r.id,
        bucket: r.bucket,
        selection: JSON.stringify(r.selection),
        destination: r.destination,
        rate_count: r.rate?.count ?? null,
        rate_per_ms: r.rate?.perMs ?? null,
        total: 0,
        superseded: 0,
        created_at: r.nowMs,
      })
      .execute();
  });
  for (let i = 0; i < r.requestIds.length; i += REPLAY_BATCH) {
    const ids = r.requestIds.slice(i, i + REPLAY_BATCH);
    for (let attempt = 1; ; attempt++) {
      try {
        await db.transaction().execute((trx) => replayBatch(trx, r, ids, useCallerClock));
        break;
      } catch (e) {
        if ((e as { code?: unknown }).code !== '40P01' || attempt >= DEADLOCK_TRIES) throw e;
        // The writer that won was waiting for our locks: let it take them and commit first, or an
        // immediate rerun can take them back before it wakes and close the same cycle again.
        await new Promise((resolve) => setTimeout(resolve, DEADLOCK_BACKOFF_MS * attempt));
      }
    }
  }
  return (await pgGetReplay(db, r.id))!;
}

export async function pgGetReplay(db: Kysely<Database>, id: string): Promise<Replay | undefined> {
  const row = await db.selectFrom('replays').selectAll().where('id', '=', id).executeTakeFirst();
  return row ? toReplay(row) : undefined;
}

export async function pgListReplays(db: Kysely<Database>, options: { bucket?: string; limit: number }): Promise<Replay[]> {
  let q = db.selectFrom('replays').selectAll();
  if (options.bucket !== undefined) q = q.where('bucket', '=', options.bucket);
  const rows = await q.orderBy('created_at', 'desc').orderBy('id', 'desc').limit(options.limit).execute();
  return rows.map(toReplay);
}

export async function pgReplayProgress(db: Kysely<Database>, id: string): Promise<ReplayProgress> {
  // One snapshot for both reads, as SQLite's single connection reads between two commits at most.
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .execute(async (trx) => {
      const { rows } = await sql<ReplayStateRow>`
        select state, count(*) as n, max(settled_at) as last from deliveries where replay_id = ${id} group by state`.execute(trx);
      const { rows: pausedRows } = await sql<{ paused: number }>`
        select coalesce(max(b.paused), 0) as paused from replays r join buckets b on b.name = r.bucket where r.id = ${id}`.execute(trx);
      const paused = Number(pausedRows[0]?.paused ?? 0) === 1;
      return toReplayProgress(rows, paused);
    });
}

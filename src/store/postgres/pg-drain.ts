/**
 * The drain worker's store on PostgreSQL: the claim, attempt rows, lease recovery, process
 * heartbeats and the LISTEN/NOTIFY change feed. Any number of workers use it at once
 * (sharedClaims). The SQLite twin is src/store/sqlite/sqlite-drain.ts; through the DrainStore
 * contract both give the same results.
 *
 * Claims: one READ COMMITTED transaction per bucket. It locks the bucket's pacer row FOR UPDATE
 * SKIP LOCKED (another worker holds it: that worker is claiming the bucket now, so this claim
 * returns `busy` at once, before any other lock, and the worker moves on), records the finished
 * attempts, reads the database clock, counts the bucket's deliveries under a live lease, walks its
 * due deliveries in due order with `FOR UPDATE SKIP LOCKED`, decides about each with the pure
 * admission decider (policy/admission.ts) on the pacer state from the row, claims (delivering,
 * lease, attempt row) or defers, sets the bucket's bucket_due row to what is left (bucket-due.ts
 * explains the table) and writes the pacer row back if it moved.
 *
 * Lock order, in every transaction here, so that two of them never wait on each other in a cycle:
 * 1. the claimed bucket's `buckets` row, FOR SHARE (a `bucket delete` or update waits for the claim,
 *    as SQLite's write lock makes it; ingest's foreign-key checks take FOR KEY SHARE, no conflict);
 * 1b. pacer rows: a claim's own, SKIP LOCKED; a completion that sets Retry-After blocks locks
 *    those buckets' rows in name order, in a transaction of its own (#block), waiting;
 * 2. bucket_due rows, FOR UPDATE, in bucket-name byte order (`collate "C"`, as a JavaScript sort
 *    gives): a claim's own bucket and the buckets its completions make due again. An ingest
 *    lowering a due time between the claim reading what is left and writing next_due_at would
 *    otherwise be overwritten by a later time;
 * 3. deliveries: the claim skips locked ones; completions and recovery update their own.
 * Other writers of bucket_due (ingest, replay, bucket updates) should take those rows in name
 * order too, and before any delivery row; a cycle is still broken by PostgreSQL's deadlock
 * detector (40P01, store_busy), after which the worker writes its results again.
 *
 * Clock: leases and due times use the database's clock (clock_timestamp(), read once per
 * transaction as epoch ms), never this process's, so several hosts agree on when a lease ends.
 * The contract's times come from the worker's clock; each transaction turns them into database
 * time by one offset, `dbNow - workerNow` (workerNow: the call's nowMs; for complete() alone, the
 * latest finishedAt of the batch), so durations are kept (a lease of 60 s, a retry in 30 s) and
 * every time written or compared is database time. Times handed back to the worker (a claim's
 * startedAt and firstAttemptAt, nextDueAt) are turned back into its clock. The admission decider
 * runs on the database clock too (never below the pacer row's counted_at), since the pacer state
 * it reads from the row is every worker's; the verdict's times go back by the same offset. Tests
 * pass `useCallerClock` to have the caller's now stand for the database clock.
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import type pg from 'pg';
import { afterLeaseExpiry, createClaimDecider, emptyVerdict, pacerConfigOf } from '../../policy/admission.js';
import { forwardTarget } from '../../policy/forward-target.js';
import type { Rate, TokenBucketState } from '../../policy/token-bucket.js';
import { newPacer, type PacerState } from '../../policy/pacer.js';
import { AppError } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { Logger } from '../../shared/logger.js';
import type { BucketPacerTable, BucketsTable, Database } from '../schema.js';
import { pacerFromRow, pacerRowChanged, pacerToRow, shiftPacer } from '../pacer-row.js';
import { deferralIncrements } from '../deferral-counts.js';
import {
  pausedMsAt,
  type AttemptResult,
  type Bucket,
  type ClaimedAttempt,
  type ClaimPolicyState,
  type ClaimResult,
  type DrainStore,
  type ExpiredDelivery,
  type ProcessBeat,
  type StoreChanges,
  type WorkerLeaseResult,
  type StoredSetting,
} from '../store.js';
import { selectSettings } from '../kysely/settings-queries.js';
import { toBucket } from '../bucket-row.js';
import { toVerdict } from '../provider-row.js';
import { DB_NOW } from './pg-clock.js';
import { PgChangeFeed } from './pg-change-feed.js';
import { pgStorageErrorCode } from './pg-error.js';
import { createPgPool, migratePostgres, pgKysely } from './pg-pool.js';
import { settleWithin } from './pg-close.js';
import { markProcessStopped, upsertProcess } from './pg-processes.js';

interface DueRow {
  id: string;
  request_id: string;
  attempts: number;
  state: 'pending' | 'retrying';
  trigger: 'initial' | 'replay';
  replay_id: string | null;
  next_attempt_at: number;
  destination: string | null;
  generation: number;
  first_attempt_at: number | null;
  paused_ms_at_first: number | null;
}

interface RequestRow {
  id: string;
  method: string;
  path: string;
  query: string | null;
  headers: string;
  body: Buffer;
  verify_scheme: string | null;
  verify_result: string | null;
  verify_reason: string | null;
  dedup_key: string | null;
}

const WORKER_LEASE = 'drain';

type Trx = Transaction<Database>;
type ClaimOptions = Parameters<DrainStore['claim']>[1];

const nothingClaimed = (pacer: PacerState = newPacer()): ClaimResult => ({
  claimed: [],
  verdict: emptyVerdict(pacer),
});

export interface PgDrainStoreOptions {
  url: string;
  /** Pool connections at most (the LISTEN connection is one more). */
  poolMax?: number;
  /**
   * The drain's commits use synchronous_commit = off by default, as the SQLite drain commits with
   * synchronous=NORMAL: an attempt record lost to a server crash means the delivery is attempted
   * again (delivery is at-least-once anyway). Ingest keeps its own setting.
   */
  synchronousCommit?: 'on' | 'off';
  statementTimeoutMs?: number;
  connectTimeoutMs?: number;
  /**
   * For tests with a manual clock: each call's own nowMs stands for the database clock
   * (clock_timestamp()), as on SQLite; a completion alone uses its latest finishedAt.
   */
  useCallerClock?: boolean;
  /** Run pending migrations first (default true). */
  migrate?: boolean;
  /** Start the LISTEN connection (default true). */
  listen?: boolean;
  logger?: Logger;
}

export class PgDrainStore implements DrainStore {
  /** Any number of workers claim at once: pacer rows, live-lease concurrency, no single-worker lease. */
  readonly sharedClaims = true;
  readonly #db: Kysely<Database>;
  readonly #feed: PgChangeFeed | undefined;
  readonly #callerClock: boolean;

  private constructor(db: Kysely<Database>, feed: PgChangeFeed | undefined, callerClock: boolean) {
    this.#db = db;
    this.#feed = feed;
    this.#callerClock = callerClock;
  }

  /** Opens a bounded pool and the LISTEN connection (migrating the database first unless told not to). */
  static async open(options: PgDrainStoreOptions): Promise<PgDrainStore> {
    const pool: pg.Pool = createPgPool({
      url: options.url,
      max: options.poolMax ?? 4,
      statementTimeoutMs: options.statementTimeoutMs ?? 30_000, // 30s
      idleInTransactionTimeoutMs: 60_000, // 60s: a claim holds no transaction across I/O of ours
      connectTimeoutMs: options.connectTimeoutMs ?? 10_000,
      synchronousCommit: options.synchronousCommit ?? 'off',
      applicationName: 'hookbucket-drain',
    });
    const db = pgKysely(pool);
    let feed: PgChangeFeed | undefined;
    try {
      if (options.migrate !== false) await migratePostgres(db);
      if (options.listen !== false) {
        feed = new PgChangeFeed({ url: options.url, connectTimeoutMs: options.connectTimeoutMs, logger: options.logger });
        await feed.start();
      }
      return new PgDrainStore(db, feed, options.useCallerClock === true);
    } catch (e) {
      await feed?.close();
      await db.destroy();
      throw e;
    }
  }

  /** The LISTEN connection (tests: its backend pid, reconnect count). */
  get changeFeed(): PgChangeFeed | undefined {
    return this.#feed;
  }

  /** Runs `fn` in a transaction; storage errors become AppErrors with the codes SQLite's store uses. */
  async #tx<T>(fn: (trx: Trx) => Promise<T>): Promise<T> {
    try {
      return await this.#db.transaction().execute(fn);
    } catch (e) {
      const code = pgStorageErrorCode(e);
      if (code === undefined) throw e;
      throw new AppError(code, `drain store: ${(e as Error).message}`, { cause: e });
    }
  }

  /** This transaction's now: the database clock, read once (or, for tests, the caller's now). */
  async #now(trx: Trx, callerNow: number): Promise<number> {
    if (this.#callerClock) return callerNow;
    const r = await sql<{ now: number }>`select ${DB_NOW} as now`.execute(trx);
    return Number(r.rows[0]!.now);
  }

  /**
   * Locks bucket_due rows in name order (step 2 of the lock order above): those of `buckets`, and
   * of every result's bucket, in one statement. Every result, not only retries and releases: lease
   * recovery takes the bucket_due row before the delivery and then the attempt, so a completion
   * that took the attempt and delivery rows first could deadlock with it (40P01, seen with the
   * two orders interleaved by hand); holding the bucket's row first makes them queue instead.
   */
  async #lockDue(trx: Trx, buckets: readonly string[], results: readonly AttemptResult[] = []): Promise<void> {
    const ids = results.map((r) => r.deliveryId);
    if (buckets.length === 0 && ids.length === 0) return;
    await sql`select bucket from bucket_due
      where bucket in (select unnest(${buckets}::text[]) union select bucket from deliveries where id = any(${ids}::text[]))
      order by bucket collate "C" for update`.execute(trx);
  }

  async #lowerDue(trx: Trx, bucket: string, atMs: number): Promise<void> {
    await sql`insert into bucket_due (bucket, next_due_at) values (${bucket}, ${atMs})
      on conflict (bucket) do update set next_due_at = excluded.next_due_at
      where bucket_due.next_due_at is null or bucket_due.next_due_at > excluded.next_due_at`.execute(trx);
  }

  /**
   * Completes attempt rows and moves their deliveries on, inside the caller's transaction, whose
   * bucket_due rows are locked already: one statement per kind of change for the whole batch
   * (attempts; retries, releases and settled deliveries; the due times they lower), each over
   * unnest() arrays. `offset` turns the worker's times into database time.
   */
  async #completeRows(trx: Trx, results: readonly AttemptResult[], offset: number): Promise<void> {
    if (results.length === 0) return;
    const col = <T>(f: (r: AttemptResult) => T) => results.map(f);
    const nextAt = (r: AttemptResult) => (r.nextAttemptAt === null ? null : r.nextAttemptAt + offset);
    await sql`update attempts a set duration_ms = v.duration_ms, status = v.status, error_class = v.error_class, error_message = v.error_message,
        response_headers = v.response_headers, response_body = v.response_body, response_truncated = v.response_truncated,
        outcome = coalesce(a.outcome, v.outcome), reason = coalesce(a.reason, v.reason),
        next_attempt_at = coalesce(a.next_attempt_at, v.next_attempt_at), next_why = coalesce(a.next_why, v.next_why)
      from unnest(${col((r) => r.attemptId)}::text[], ${col((r) => r.durationMs)}::bigint[], ${col((r) => r.status)}::int[],
                  ${col((r) => r.errorClass)}::text[], ${col((r) => r.errorMessage)}::text[],
                  ${col((r) => (r.responseHeaders === null ? null : JSON.stringify(r.responseHeaders)))}::text[], ${col((r) => r.responseBody)}::bytea[],
                  ${col((r) => (r.responseTruncated ? 1 : 0))}::int[], ${col((r) => r.outcome)}::text[], ${col((r) => r.reason)}::text[],
                  ${col(nextAt)}::bigint[], ${col((r) => r.nextWhy)}::text[])
        as v(id, duration_ms, status, error_class, error_message, response_headers, response_body, response_truncated, outcome, reason, next_attempt_at, next_why)
      where a.id = v.id`.execute(trx);

    const lastError = (r: AttemptResult) => r.errorClass ?? (r.status !== null && (r.status < 200 || r.status > 299) ? r.reason : null);
    const retries = results.filter((r) => r.outcome === 'retry');
    const releases = results.filter((r) => r.outcome === 'released');
    const settled = results.filter((r) => r.outcome !== 'retry' && r.outcome !== 'released');
    if (retries.length > 0) {
      await sql`update deliveries d set state = case when d.supersede_requested = 1 then 'superseded' else 'retrying' end,
          settled_at = case when d.supersede_requested = 1 then v.finished_at else null end,
          next_attempt_at = v.next_at, lease_until = null, lease_attempt = null, last_status = v.status, last_error = v.last_error, updated_at = v.finished_at
        from unnest(${retries.map((r) => r.deliveryId)}::text[], ${retries.map((r) => r.attemptId)}::text[], ${retries.map((r) => r.finishedAt + offset)}::bigint[],
                    ${retries.map(nextAt)}::bigint[], ${retries.map((r) => r.status)}::int[], ${retries.map(lastError)}::text[])
          as v(id, attempt_id, finished_at, next_at, status, last_error)
        where d.id = v.id and d.lease_attempt = v.attempt_id`.execute(trx);
    }
    if (releases.length > 0) {
      await sql`update deliveries d set state = case when d.supersede_requested = 1 then 'superseded' when d.attempts <= 1 then 'pending' else 'retrying' end,
          settled_at = case when d.supersede_requested = 1 then v.finished_at else null end,
          first_attempt_at = case when d.attempts <= 1 then null else d.first_attempt_at end,
          paused_ms_at_first = case when d.attempts <= 1 then null else d.paused_ms_at_first end,
          attempts = d.attempts - 1, next_attempt_at = v.next_at, lease_until = null, lease_attempt = null, updated_at = v.finished_at
        from unnest(${releases.map((r) => r.deliveryId)}::text[], ${releases.map((r) => r.attemptId)}::text[], ${releases.map((r) => r.finishedAt + offset)}::bigint[],
                    ${releases.map((r) => nextAt(r) ?? r.finishedAt + offset)}::bigint[])
          as v(id, attempt_id, finished_at, next_at)
        where d.id = v.id and d.lease_attempt = v.attempt_id`.execute(trx);
    }
    if (settled.length > 0) {
      await sql`update deliveries d set state = case when d.supersede_requested = 1 then 'superseded' else v.outcome end,
          lease_until = null, lease_attempt = null, last_status = v.status, last_error = v.last_error, settled_at = v.finished_at, updated_at = v.finished_at
        from unnest(${settled.map((r) => r.deliveryId)}::text[], ${settled.map((r) => r.attemptId)}::text[], ${settled.map((r) => r.finishedAt + offset)}::bigint[],
                    ${settled.map((r) => r.outcome)}::text[], ${settled.map((r) => r.status)}::int[], ${settled.map(lastError)}::text[])
          as v(id, attempt_id, finished_at, outcome, status, last_error)
        where d.id = v.id and d.lease_attempt = v.attempt_id`.execute(trx);
    }
    // A retry or a release makes the delivery due again: its bucket is due by then (bucket-due.ts).
    const lower = [...retries.filter((r) => r.nextAttemptAt !== null), ...releases];
    if (lower.length > 0) {
      await sql`insert into bucket_due (bucket, next_due_at)
          select d.bucket, min(v.at) from deliveries d
            join unnest(${lower.map((r) => r.deliveryId)}::text[], ${lower.map((r) => nextAt(r) ?? r.finishedAt + offset)}::bigint[]) as v(id, at) on d.id = v.id
          group by d.bucket order by d.bucket collate "C"
        on conflict (bucket) do update set next_due_at = excluded.next_due_at
        where bucket_due.next_due_at is null or bucket_due.next_due_at > excluded.next_due_at`.execute(trx);
    }
  }

  async listBuckets(): Promise<Bucket[]> {
    const rows = await this.#read(sql<BucketsTable>`select * from buckets where deleting_at is null order by name collate "C"`);
    return rows.map(toBucket);
  }

  async claim(bucket: Bucket, options: ClaimOptions, policy: ClaimPolicyState): Promise<ClaimResult> {
    let o = options;
    // A completion that sets a Retry-After block writes pacer rows (in name order): those go in a
    // transaction of their own first, so that a claim holds one pacer row at most and two workers
    // cannot wait on each other's.
    if (o.complete && o.complete.length > 0 && (o.limit <= 0 || o.complete.some((r) => r.block !== undefined))) {
      await this.#completeWith(o.complete, o.nowMs);
      o = { ...o, complete: [] };
    }
    if (o.limit <= 0) return nothingClaimed();
    const complete = o.complete ?? [];
    const result = await this.#tx(async (trx): Promise<ClaimResult & { unrecorded?: true }> => {
      // Lock order (file comment): the bucket row, its pacer row, bucket_due rows in name order,
      // then deliveries. The worker's bucket list may be a moment old: claim nothing of a bucket
      // that began deleting since, or that was deleted and made anew (whose rows would otherwise
      // go to the old bucket's destination until the list is read again). The settings come from
      // this row, not the worker's copy: every worker claims under the same rate and concurrency.
      const head = (await sql<BucketsTable>`select * from buckets where name = ${bucket.name} for share`.execute(trx)).rows[0];
      const current = head !== undefined && head.deleting_at === null && Number(head.created_at) === bucket.createdAt;
      // Step 1: the pacer row. Locked by another worker: it is claiming this bucket now; rotate on
      // at once, taking no other lock (its completions go in a transaction of their own, below).
      const row = current ? await this.#lockPacer(trx, bucket) : undefined;
      if (current && row === undefined) return { ...nothingClaimed(), busy: true, unrecorded: true };
      const fresh = current ? toBucket(head) : bucket;
      await this.#lockDue(trx, [bucket.name], complete);
      // Step 2: the clock, read after the locks, never below the time the pacer was last moved at;
      // step 3: the bucket's deliveries in flight under a live lease, whichever worker holds them.
      const clock = (await sql<{ now: number }>`select ${this.#nowSql(o.nowMs)} as now`.execute(trx)).rows[0]!;
      const dbNow = Math.max(Number(clock.now), Number(row?.counted_at ?? 0));
      const offset = dbNow - o.nowMs;
      if (complete.length > 0) await this.#completeRows(trx, complete, offset);
      if (!current || row === undefined) return nothingClaimed();
      const live = await this.#liveLeases(trx, bucket.name, dbNow);
      const pacer = pacerFromRow(row, bucket.createdAt);
      const limit = Math.min(o.limit, fresh.drain.concurrency - live);
      if (limit <= 0) return { ...nothingClaimed(shiftPacer(pacer, -offset)), full: true };

      const replays = await this.#replayPacing(trx, bucket.name);
      // Step 5: the pure decider, on the database clock.
      const decider = createClaimDecider({
        nowMs: dbNow,
        config: pacerConfigOf(fresh),
        pacer,
        replayRates: replays.rates,
        replayPacers: replays.pacers,
        aheadFrom: policy.aheadFrom,
        horizonMs: policy.horizonMs,
        aheadLimit: policy.aheadLimit,
      });
      const own = fresh.destination !== null;
      // Step 4: due deliveries, FOR UPDATE SKIP LOCKED, merged in due order; a retry held back by
      // the budget does not block first attempts behind it.
      const rows = (await this.#due(trx, bucket.name, own, dbNow, limit)).sort(
        (a, b) => a.next_attempt_at - b.next_attempt_at || (a.id < b.id ? -1 : 1),
      );
      const take: Array<{ row: DueRow; at: number }> = [];
      for (const r of rows) {
        if (take.length >= limit) break;
        const d = decider.decide({
          deliveryId: r.id,
          requestId: r.request_id,
          attempts: Number(r.attempts),
          state: r.state,
          trigger: r.trigger,
          replayId: r.replay_id,
          nextAttemptAt: Number(r.next_attempt_at),
        });
        if (d.kind === 'stop') break;
        if (d.kind === 'skip') continue;
        if (d.kind === 'defer') {
          await sql`update deliveries set deferrals = deferrals + 1, last_deferral_reason = ${d.reason}, updated_at = ${dbNow} where id = ${r.id}`.execute(
            trx,
          );
          continue;
        }
        take.push({ row: r, at: d.atMs });
      }
      // Step 6: the claims with their attempt rows, the bucket's next due time, the pacer state.
      const claimed = await this.#claimRows(trx, fresh, take, dbNow, o.nowMs, o.leaseUntilMs - o.nowMs, o.workerId ?? null);
      await this.#settleDue(trx, bucket.name, own);
      const verdict = decider.verdict();
      // Deferrals this claim recorded, by reason (deferral-counts.ts), before #writePacer may move
      // bucket_created_at: a row of an older bucket of that name starts from 0.
      const deferrals = deferralIncrements(verdict.deferred);
      if (deferrals !== null) {
        const [rate, budget, retryAfter, replayRate] = deferrals;
        const same = sql`bucket_created_at = ${bucket.createdAt}`;
        await sql`update bucket_pacer set
            deferred_rate = case when ${same} then deferred_rate else 0 end + ${rate},
            deferred_retry_budget = case when ${same} then deferred_retry_budget else 0 end + ${budget},
            deferred_retry_after = case when ${same} then deferred_retry_after else 0 end + ${retryAfter},
            deferred_replay_rate = case when ${same} then deferred_replay_rate else 0 end + ${replayRate}
          where bucket = ${bucket.name}`.execute(trx);
      }
      await this.#writePacer(trx, bucket, row, verdict.pacer, dbNow);
      await this.#writeReplayPacers(trx, verdict.replayTokens);
      return {
        claimed,
        verdict: {
          ...verdict,
          pacer: shiftPacer(verdict.pacer, -offset),
          wakeAt: verdict.wakeAt - offset,
          rateAt: verdict.rateAt - offset,
        },
      };
    });
    if (!result.unrecorded) return result;
    // Busy: the completions it carried are recorded now, on their own.
    if (complete.length > 0) await this.#completeWith(complete, o.nowMs);
    return { claimed: result.claimed, verdict: result.verdict, busy: true };
  }

  /** The bucket's deliveries in flight under a live lease, whichever worker holds them. */
  async #liveLeases(trx: Trx, bucket: string, dbNow: number): Promise<number> {
    const r = await sql<{
      n: number;
    }>`select count(*) as n from deliveries where bucket = ${bucket} and state = 'delivering' and lease_until > ${dbNow}`.execute(trx);
    return Number(r.rows[0]!.n);
  }

  /**
   * The bucket's pacer row, locked FOR UPDATE SKIP LOCKED (made on the bucket's first claim);
   * undefined when another transaction holds it. Never waits: a row that exists but was skipped
   * is another worker's now (a plain read tells it from a missing one without a lock).
   */
  async #lockPacer(trx: Trx, bucket: Bucket): Promise<BucketPacerTable | undefined> {
    const locked = await sql<BucketPacerTable>`select * from bucket_pacer where bucket = ${bucket.name} for update skip locked`.execute(
      trx,
    );
    if (locked.rows[0]) return locked.rows[0];
    const exists = await sql<{ n: number }>`select count(*) as n from bucket_pacer where bucket = ${bucket.name}`.execute(trx);
    if (Number(exists.rows[0]!.n) > 0) return undefined;
    // The bucket's first claim: the new row comes back locked by this transaction (two first
    // claims at once: the second waits for the first's commit, then finds the row and is busy).
    const made =
      await sql<BucketPacerTable>`insert into bucket_pacer (bucket, bucket_created_at) values (${bucket.name}, ${bucket.createdAt})
      on conflict (bucket) do nothing returning *`.execute(trx);
    return made.rows[0];
  }

  /** Writes the pacer state back when it moved (most claims of a bucket with no rate move the budget's window only). */
  async #writePacer(trx: Trx, bucket: Bucket, before: BucketPacerTable, next: PacerState, dbNow: number): Promise<void> {
    const cols = pacerToRow(next);
    if (Number(before.bucket_created_at) === bucket.createdAt && !pacerRowChanged(before, cols)) return;
    await sql`update bucket_pacer set bucket_created_at = ${bucket.createdAt}, full_at = ${cols.full_at}, budget = ${cols.budget},
        blocked_until = ${cols.blocked_until}, counted_at = ${dbNow}
      where bucket = ${bucket.name}`.execute(trx);
  }

  /** The bucket's replays that pace their own deliveries (`replay --rate`), with their token buckets. */
  async #replayPacing(trx: Trx, bucket: string): Promise<{ rates: Map<string, Rate>; pacers: Map<string, TokenBucketState> }> {
    const rows = await sql<{ id: string; rate_count: number; rate_per_ms: number; full_at: number | null }>`
      select r.id, r.rate_count, r.rate_per_ms, p.full_at from replays r left join replay_pacer p on p.replay_id = r.id
      where r.bucket = ${bucket} and r.rate_count is not null`.execute(trx);
    const rates = new Map<string, Rate>();
    const pacers = new Map<string, TokenBucketState>();
    for (const r of rows.rows) {
      rates.set(r.id, { count: Number(r.rate_count), perMs: Number(r.rate_per_ms) });
      if (r.full_at !== null) pacers.set(r.id, { fullAtMs: Number(r.full_at) });
    }
    return { rates, pacers };
  }

  async #writeReplayPacers(trx: Trx, moved: ReadonlyMap<string, TokenBucketState>): Promise<void> {
    if (moved.size === 0) return;
    const ids = [...moved.keys()].sort();
    await sql`insert into replay_pacer (replay_id, full_at)
      select v.id, v.full_at from unnest(${ids}::text[], ${ids.map((id) => moved.get(id)!.fullAtMs)}::float8[]) as v(id, full_at)
      on conflict (replay_id) do update set full_at = excluded.full_at`.execute(trx);
  }

  /**
   * The due deliveries, locked (SKIP LOCKED: a row another transaction holds is not waited for):
   * up to `limit` of each state, each an index range of deliveries_bucket_due_id, in one round
   * trip. A new generation waits while an older one to the same destination is still in flight
   * (replay): a request never has two attempts in flight to the bucket's destination.
   */
  async #due(trx: Trx, bucket: string, own: boolean, dbNow: number, limit: number): Promise<DueRow[]> {
    const n = Math.max(1, Math.floor(limit));
    const of = (state: 'pending' | 'retrying') => sql`
      select id, request_id, attempts, state, trigger, replay_id, next_attempt_at, destination, generation, first_attempt_at, paused_ms_at_first
      from deliveries d
      where bucket = ${bucket} and state = ${state} and next_attempt_at <= ${dbNow}
        ${own ? sql`` : sql`and destination is not null`}
        and not exists (select 1 from deliveries o where o.request_id = d.request_id and o.state = 'delivering'
                        and o.destination is null and d.destination is null)
      order by next_attempt_at, id limit ${n}
      for update of d skip locked`;
    // Locking clauses are not allowed on a UNION's arms, but are inside subqueries in FROM.
    const r = await sql<DueRow>`select * from (${of('pending')}) as p union all select * from (${of('retrying')}) as r`.execute(trx);
    return r.rows.map((x) => ({ ...x, attempts: Number(x.attempts), next_attempt_at: Number(x.next_attempt_at) }));
  }

  /**
   * Marks the rows delivering under the lease and starts their attempt rows (times in database
   * time): two statements for the whole batch, whatever its size. Each row's attempt starts at its
   * `at` (the claim's time, or a rate token's taken ahead), and its lease runs `leaseMs` from then.
   */
  async #claimRows(
    trx: Trx,
    bucket: Bucket,
    rows: ReadonlyArray<{ row: DueRow; at: number }>,
    dbNow: number,
    workerNow: number,
    leaseMs: number,
    workerId: string | null,
  ): Promise<ClaimedAttempt[]> {
    if (rows.length === 0) return [];
    const offset = dbNow - workerNow;
    const reqs =
      await sql<RequestRow>`select id, method, path, query, headers, body, verify_scheme, verify_result, verify_reason, dedup_key from requests where id = any(${rows.map((r) => r.row.request_id)}::text[])`.execute(
        trx,
      );
    const byId = new Map(reqs.rows.map((r) => [r.id, r]));
    const pausedNow = pausedMsAt(bucket, workerNow);
    const planned: Array<{ row: DueRow; at: number; req: RequestRow; attemptId: string; url: string; target: ClaimedAttempt['target'] }> =
      [];
    for (const { row, at } of rows) {
      const req = byId.get(row.request_id);
      if (!req) continue;
      const target = forwardTarget(
        row.destination ?? bucket.destination!,
        req.path,
        req.query,
        bucket.drain.forwardPath,
        bucket.drain.forwardRawPath,
      );
      planned.push({ row, at, req, attemptId: newId(), url: target.origin + target.path, target });
    }
    if (planned.length === 0) return [];
    // The rows are locked by this transaction (FOR UPDATE in #due); the state guard keeps the
    // update correct even so, as SQLite's does.
    const updated = await sql<{ id: string }>`
      update deliveries d set state = 'delivering', attempts = d.attempts + 1, lease_until = v.at + ${leaseMs}::bigint, lease_attempt = v.attempt_id,
        first_attempt_at = coalesce(d.first_attempt_at, v.at), paused_ms_at_first = coalesce(d.paused_ms_at_first, ${pausedNow}::bigint),
        last_attempt_at = v.at, updated_at = ${dbNow}::bigint
      from unnest(${planned.map((p) => p.row.id)}::text[], ${planned.map((p) => p.attemptId)}::text[], ${planned.map((p) => p.at)}::bigint[]) as v(id, attempt_id, at)
      where d.id = v.id and d.state in ('pending', 'retrying')
      returning d.id`.execute(trx);
    const done = new Set(updated.rows.map((r) => r.id));
    const taken = planned.filter((p) => done.has(p.row.id));
    if (taken.length === 0) return [];
    await sql`insert into attempts (id, delivery_id, request_id, bucket, number, url, started_at, response_truncated, worker_id)
      select v.id, v.delivery_id, v.request_id, ${bucket.name}, v.number, v.url, v.at, 0, ${workerId}::text
      from unnest(${taken.map((p) => p.attemptId)}::text[], ${taken.map((p) => p.row.id)}::text[], ${taken.map((p) => p.row.request_id)}::text[],
                  ${taken.map((p) => Number(p.row.attempts) + 1)}::int[], ${taken.map((p) => p.url)}::text[], ${taken.map((p) => p.at)}::bigint[])
        as v(id, delivery_id, request_id, number, url, at)`.execute(trx);
    return taken.map(({ row: r, at, req, attemptId, url, target }) => ({
      attemptId,
      deliveryId: r.id,
      requestId: r.request_id,
      bucket: bucket.name,
      generation: Number(r.generation),
      number: Number(r.attempts) + 1,
      trigger: r.trigger,
      replayId: r.replay_id,
      destination: r.destination,
      url,
      target,
      // In the worker's clock (file comment): it checks its own lease arithmetic against these.
      startedAt: at - offset,
      sendAfterMs: Math.max(0, at - dbNow),
      firstAttemptAt: r.first_attempt_at === null ? at - offset : Number(r.first_attempt_at) - offset,
      pausedMsAtFirst: r.paused_ms_at_first === null ? pausedNow : Number(r.paused_ms_at_first),
      method: req.method,
      path: req.path,
      query: req.query,
      rawHeaders: JSON.parse(req.headers) as string[],
      body: req.body,
      verdict: toVerdict(req),
      dedupKey: req.dedup_key,
    }));
  }

  /**
   * Sets the bucket's next due time to its earliest waiting delivery, after the claim, under the
   * bucket_due row lock taken at the start. A bucket without a destination counts only its `--to` rows.
   */
  async #settleDue(trx: Trx, bucket: string, own: boolean): Promise<void> {
    const to = own ? sql`` : sql`and destination is not null`;
    // Two descents of deliveries_bucket_due_id; least() ignores a null (no row in that state).
    await sql`insert into bucket_due (bucket, next_due_at)
      values (${bucket}, least((select min(next_attempt_at) from deliveries where bucket = ${bucket} and state = 'pending' ${to}),
                               (select min(next_attempt_at) from deliveries where bucket = ${bucket} and state = 'retrying' ${to})))
      on conflict (bucket) do update set next_due_at = excluded.next_due_at`.execute(trx);
  }

  async #completeWith(results: AttemptResult[], workerNow: number): Promise<void> {
    await this.#tx(async (trx) => {
      const dbNow = await this.#now(trx, workerNow);
      await this.#block(trx, results, dbNow - workerNow);
      await this.#lockDue(trx, [], results);
      await this.#completeRows(trx, results, dbNow - workerNow);
    });
  }

  /**
   * Keeps the Retry-After blocks the results set in their buckets' pacer rows (a block never
   * shortens one), locking the rows in name order (before any bucket_due row: the lock order), so
   * that two workers recording blocks for the same buckets queue instead of deadlocking.
   */
  async #block(trx: Trx, results: readonly AttemptResult[], offset: number): Promise<void> {
    const until = new Map<string, number>();
    for (const r of results) if (r.block) until.set(r.block.bucket, Math.max(until.get(r.block.bucket) ?? 0, r.block.untilMs + offset));
    if (until.size === 0) return;
    const names = [...until.keys()];
    await sql`insert into bucket_pacer (bucket, bucket_created_at, blocked_until)
        select b.name, b.created_at, v.until from unnest(${names}::text[], ${names.map((n) => Math.round(until.get(n)!))}::bigint[]) as v(bucket, until)
          join buckets b on b.name = v.bucket
        order by b.name collate "C"
      on conflict (bucket) do update set blocked_until = greatest(bucket_pacer.blocked_until, excluded.blocked_until)`.execute(trx);
  }

  async complete(results: AttemptResult[]): Promise<void> {
    if (results.length === 0) return;
    // No worker "now" comes with a completion: the latest finish stands for it (the batch was
    // written at or after it, so no retry is moved earlier than the worker chose).
    await this.#completeWith(results, Math.max(...results.map((r) => r.finishedAt)));
  }

  async recoverExpired(nowMs: number, buckets: readonly Bucket[]): Promise<ExpiredDelivery[]> {
    return this.#tx(async (trx) => {
      const dbNow = await this.#now(trx, nowMs);
      // Bucket_due rows first (lock order): the buckets are read unlocked, then the rows locked;
      // a row another transaction holds (a completion in progress) is left to it.
      const candidates = await sql<{ bucket: string }>`
        select distinct bucket from deliveries where state = 'delivering' and lease_until <= ${dbNow}`.execute(trx);
      if (candidates.rows.length === 0) return [];
      const names = candidates.rows.map((r) => r.bucket);
      await this.#lockDue(trx, names);
      const rows = (
        await sql<{ id: string; bucket: string; attempts: number; lease_attempt: string | null }>`
          select id, bucket, attempts, lease_attempt from deliveries
          where state = 'delivering' and lease_until <= ${dbNow} and bucket = any(${names}::text[])
          order by bucket collate "C", id for update skip locked`.execute(trx)
      ).rows;
      const byName = new Map(buckets.map((b) => [b.name, b]));
      const out: ExpiredDelivery[] = [];
      for (const r of rows) {
        const d: ExpiredDelivery = { deliveryId: r.id, bucket: r.bucket, attempts: Number(r.attempts) };
        const n = afterLeaseExpiry(byName.get(r.bucket), d.attempts, dbNow);
        if (r.lease_attempt !== null) {
          await sql`update attempts set outcome = 'lease_expired', error_class = 'lease_expired', reason = 'lease_expired',
                      next_attempt_at = ${n.kind === 'retry' ? n.atMs : null}::bigint, next_why = 'lease_expired'
                    where id = ${r.lease_attempt} and outcome is null`.execute(trx);
        }
        if (n.kind === 'retry') {
          await sql`update deliveries set state = case when supersede_requested = 1 then 'superseded' else 'retrying' end,
                      settled_at = case when supersede_requested = 1 then ${dbNow}::bigint else null end,
                      next_attempt_at = ${n.atMs}, lease_until = null, lease_attempt = null, last_error = 'lease_expired', updated_at = ${dbNow}
                    where id = ${r.id} and state = 'delivering'`.execute(trx);
          await this.#lowerDue(trx, r.bucket, n.atMs);
        } else {
          await sql`update deliveries set state = case when supersede_requested = 1 then 'superseded' else 'exhausted' end,
                      settled_at = ${dbNow}, lease_until = null, lease_attempt = null, last_error = 'lease_expired', updated_at = ${dbNow}
                    where id = ${r.id} and state = 'delivering'`.execute(trx);
        }
        out.push(d);
      }
      return out;
    });
  }

  /** The clock as SQL: clock_timestamp() as epoch ms, or (tests) the caller's now as a parameter. */
  #nowSql(callerNow: number) {
    return this.#callerClock ? sql<number>`${callerNow}::bigint` : DB_NOW;
  }

  /** One statement outside a transaction, with storage errors mapped as #tx maps them. */
  async #read<T>(query: { execute(db: Kysely<Database>): Promise<{ rows: T[] }> }): Promise<T[]> {
    try {
      return (await query.execute(this.#db)).rows;
    } catch (e) {
      const code = pgStorageErrorCode(e);
      if (code === undefined) throw e;
      throw new AppError(code, `drain store: ${(e as Error).message}`, { cause: e });
    }
  }

  // dueBuckets and nextDueAt are one statement each (a transaction of their own): the clock is
  // read once inside it, with no extra round trip.
  async dueBuckets(nowMs: number): Promise<string[]> {
    const rows = await this.#read(sql<{ bucket: string }>`with t as (select ${this.#nowSql(nowMs)} as now)
      select d.bucket from t, bucket_due d join buckets b on b.name = d.bucket
      where d.next_due_at <= t.now and b.paused = 0 and b.deleting_at is null order by d.next_due_at, d.bucket`);
    return rows.map((x) => x.bucket);
  }

  async nextDueAt(nowMs: number): Promise<number | null> {
    const rows = await this.#read(sql<{
      now: number;
      lease: number | null;
      due: number | null;
    }>`with t as (select ${this.#nowSql(nowMs)} as now)
      select t.now,
        (select min(lease_until) from deliveries where state = 'delivering') as lease,
        (select d.next_due_at from bucket_due d join buckets b on b.name = d.bucket
          where d.next_due_at > t.now and b.paused = 0 and b.deleting_at is null order by d.next_due_at limit 1) as due
      from t`);
    const { now, lease, due } = rows[0]!;
    const at = lease === null ? due : due === null ? lease : Math.min(Number(lease), Number(due));
    // Back into the worker's clock: it sleeps until then.
    return at === null ? null : Number(at) - (Number(now) - nowMs);
  }

  async acquireWorkerLease(holder: string, info: string, nowMs: number, ttlMs: number): Promise<WorkerLeaseResult> {
    return this.#tx(async (trx) => {
      const dbNow = await this.#now(trx, nowMs);
      await sql`insert into worker_lease (name, holder, info, acquired_at, heartbeat_at, expires_at)
                values (${WORKER_LEASE}, ${holder}, ${info}, ${dbNow}, ${dbNow}, ${dbNow + ttlMs})
                on conflict (name) do update set holder = excluded.holder, info = excluded.info,
                  acquired_at = case when worker_lease.holder = excluded.holder then worker_lease.acquired_at else excluded.acquired_at end,
                  heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at
                where worker_lease.holder = excluded.holder or worker_lease.expires_at <= excluded.heartbeat_at`.execute(trx);
      const row = (
        await sql<{ holder: string; info: string; acquired_at: number; heartbeat_at: number; expires_at: number }>`
          select holder, info, acquired_at, heartbeat_at, expires_at from worker_lease where name = ${WORKER_LEASE}`.execute(trx)
      ).rows[0];
      if (row && row.holder === holder) return { ok: true };
      return {
        ok: false,
        current: {
          holder: row?.holder ?? '?',
          info: row?.info ?? '',
          acquiredAt: Number(row?.acquired_at ?? 0),
          heartbeatAt: Number(row?.heartbeat_at ?? 0),
          expiresAt: Number(row?.expires_at ?? 0),
        },
      };
    });
  }

  async heartbeat(p: ProcessBeat, nowMs: number, ttlMs: number): Promise<void> {
    await this.#tx(async (trx) => {
      await upsertProcess(trx, p, await this.#now(trx, nowMs), ttlMs);
    });
  }

  async markStopped(id: string, nowMs: number): Promise<void> {
    await this.#tx(async (trx) => {
      await markProcessStopped(trx, id, await this.#now(trx, nowMs));
    });
  }

  async releaseWorkerLease(holder: string): Promise<void> {
    await this.#tx(async (trx) => {
      await sql`delete from worker_lease where name = ${WORKER_LEASE} and holder = ${holder}`.execute(trx);
    });
  }

  /** What other connections committed since the last call (LISTEN notices; a rescan after a reconnect). */
  async takeChanges(): Promise<StoreChanges> {
    return this.#feed?.takeChanges() ?? { changed: true, bucketsChanged: true };
  }

  /** Calls `listener` when a notice arrives (and once a second while the LISTEN connection is down). */
  onChange(listener: () => void): () => void {
    return this.#feed?.onChange(listener) ?? (() => undefined);
  }

  async getSettings(): Promise<StoredSetting[]> {
    try {
      return await selectSettings(this.#db);
    } catch (e) {
      const code = pgStorageErrorCode(e);
      if (code === undefined) throw e;
      throw new AppError(code, `drain store: ${(e as Error).message}`, { cause: e });
    }
  }

  async close(): Promise<void> {
    if (this.#feed) await settleWithin(this.#feed.close());
    await settleWithin(this.#db.destroy());
  }
}

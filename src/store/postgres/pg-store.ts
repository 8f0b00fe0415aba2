import { CompiledQuery, Kysely, PostgresDialect, sql } from 'kysely';
import { AppError, bucketNotFound } from '../../shared/errors.js';
import type { Clock } from '../../shared/clock.js';
import type { BucketsTable, Database, WorkersTable } from '../schema.js';
import {
  deletingError,
  type Bucket,
  type BucketCounts,
  type BucketOverviewPage,
  type BucketOverviewQuery,
  type BucketPatch,
  type DeliveryHistory,
  type ListRequestsOptions,
  type NewBucket,
  type NewReplay,
  type VerdictUpdate,
  type VerdictsApplied,
  type PruneHooks,
  type PruneOptions,
  type PruneResult,
  type PurgeHooks,
  type PurgeResult,
  type Replay,
  type ReplayProgress,
  type IterateOptions,
  type RequestBatch,
  type RequestBatchCursor,
  type RequestFilter,
  type RequestImporter,
  type RequestPage,
  type StatsQuery,
  type StatsSample,
  type StorageSize,
  type Store,
  type StoredRequest,
  type TailAttemptsPage,
  type TailCursor,
  type TailEvent,
  type WorkerHolder,
  type ProcessBeat,
  type ProcessRecord,
  type StoredSetting,
} from '../store.js';
import { selectSettings, upsertSetting } from '../kysely/settings-queries.js';
import { bucketPatchColumns, newBucketColumns, pauseColumns, resumeColumns, toBucket } from '../bucket-row.js';
import { selectBucket, selectRejections, writtenBucket } from '../kysely/bucket-queries.js';
import { selectStoredRequest } from '../kysely/request-queries.js';
import { PgBucketCache } from './pg-bucket-cache.js';
import { lowerDue } from './pg-bucket-due.js';
import { createPgRequestImporter } from './pg-import.js';
import { pgAllBucketCounts } from './pg-bucket-counts.js';
import { pgBucketOverview } from './pg-overview.js';
import { pgDeleteBucket, pgPurgeDeleting } from './pg-delete.js';
import { pgRequestHistory, pgTail, pgTailAttemptsPage, pgTailRequestsPage } from './pg-history.js';
import { BUCKETS_CHANNEL, notify } from './pg-notify.js';
import { createPgPool, migratePostgres, type PgPoolOptions } from './pg-pool.js';
import { pgApplyVerdicts } from './pg-verdicts.js';
import { pgCreateReplay, pgGetReplay, pgListReplays, pgReplayProgress } from './pg-replay.js';
import { pgCountMatching, pgIterateMatching, pgMatchingBatch, pgQueryPage } from './pg-request-query.js';
import { pgPrune } from './pg-retention.js';
import { pgStatsSamples } from './pg-stats.js';
import { DB_NOW, dueNow } from './pg-clock.js';
import { markProcessStopped, upsertProcess } from './pg-processes.js';
import { toProcessRecord } from '../process-row.js';
import { settleWithin } from './pg-close.js';

export interface PgStoreOptions extends PgPoolOptions {
  clock: Clock;
  /**
   * How long resolveBucket trusts its cache without re-reading meta.bucket_epoch, ms: the bound on
   * staleness when no notice arrives (before LISTEN is up, while it reconnects, a dead connection).
   * Notices drop the cache as bucket writes commit.
   */
  bucketEpochCheckMs?: number;
  /**
   * How long a write waits for a row lock another connection holds (lock_timeout), ms; then it
   * fails with store_busy, as a SQLite write does after its busy timeout. Omitted: the server's.
   */
  lockWaitMs?: number;
  /**
   * Tests with a manual clock: due times (a replay's new generations, a bucket update's rows) and
   * the worker lease's expiry are compared on the store's clock, as on SQLite, not the database's.
   */
  useCallerClock?: boolean;
  /** false: do not migrate (the admin reader, whose pool is read-only; serve's store migrated already). Default true. */
  migrate?: boolean;
}

/** The fallback re-read of meta.bucket_epoch: as often as the worker's fallback poll (issue 12). */
const DEFAULT_EPOCH_CHECK_MS = 1_000; // 1s

/**
 * The CLI/API store on PostgreSQL: the twin of SqliteStore, with the same results, errors and
 * ordering through the Store contract. Replays, stats, retention and bucket deletion live in their
 * own pg-*.ts files; bucket writes bump meta.bucket_epoch and NOTIFY BUCKETS_CHANNEL in their
 * transaction, so other processes' caches and the worker notice them.
 */
export class PgStore implements Store {
  readonly #db: Kysely<Database>;
  readonly #clock: Clock;
  readonly #useCallerClock: boolean;
  readonly #buckets: PgBucketCache;

  private constructor(db: Kysely<Database>, options: PgStoreOptions) {
    this.#db = db;
    this.#clock = options.clock;
    this.#useCallerClock = options.useCallerClock === true;
    this.#buckets = new PgBucketCache(db, {
      url: options.url,
      connectTimeoutMs: options.connectTimeoutMs,
      applicationName: options.applicationName,
      epochCheckMs: options.bucketEpochCheckMs ?? DEFAULT_EPOCH_CHECK_MS,
      ...(options.lockWaitMs === undefined ? {} : { lookupTimeoutMs: options.lockWaitMs }),
    });
  }

  /** Creates the pool, migrates unless told not to (safe from several processes at once) and returns the store. */
  static async open(options: PgStoreOptions): Promise<PgStore> {
    const lockWaitMs = options.lockWaitMs;
    const db = new Kysely<Database>({
      dialect: new PostgresDialect({
        pool: createPgPool(options),
        // Once per new connection of the pool; set_config with a parameter, never a value in SQL text.
        ...(lockWaitMs === undefined
          ? {}
          : {
              onCreateConnection: async (c) => {
                // At least 1 ms: lock_timeout = 0 would mean no limit at all.
                const ms = Math.max(1, Math.floor(lockWaitMs));
                await c.executeQuery(CompiledQuery.raw(`select set_config('lock_timeout', $1, false)`, [`${ms}ms`]));
              },
            }),
      }),
    });
    try {
      if (options.migrate !== false) await migratePostgres(db);
    } catch (e) {
      await db.destroy().catch(() => undefined);
      throw e;
    }
    return new PgStore(db, options);
  }

  /** Whether resolveBucket's LISTEN connection is up (tests and diagnostics). */
  get listeningForBuckets(): boolean {
    return this.#buckets.listening;
  }

  async resolveBucket(name: string): Promise<Bucket | undefined> {
    return this.#buckets.resolve(name);
  }

  async getBucket(name: string): Promise<Bucket | undefined> {
    return selectBucket(this.#db, name);
  }

  async listBuckets(): Promise<Bucket[]> {
    // Byte order, as SQLite's binary collation sorts, whatever the database's collation.
    const rows = await this.#db.selectFrom('buckets').selectAll().orderBy(sql`name collate "C"`).execute();
    return rows.map(toBucket);
  }

  async createBucket(b: NewBucket): Promise<Bucket> {
    const now = this.#clock.now();
    let outcome: 'created' | 'deleting' | 'exists';
    try {
      outcome = await this.#db.transaction().execute(async (trx) => {
        const existing = await trx.selectFrom('buckets').select('deleting_at').where('name', '=', b.name).executeTakeFirst();
        if (existing) return existing.deleting_at === null ? 'exists' : 'deleting';
        // No orphan adoption as on SQLite: foreign keys keep requests, deliveries and replays from
        // outliving their bucket, and ingest counts a refusal for a gone bucket under ''.
        await trx.insertInto('buckets').values(newBucketColumns(b, now)).execute();
        await bucketsChanged(trx, b.name);
        return 'created';
      });
    } catch (e) {
      // unique_violation: another process created it between our check and our insert.
      if ((e as { code?: string }).code === '23505') outcome = 'exists';
      else throw e;
    }
    this.#buckets.invalidate();
    if (outcome === 'exists') throw new AppError('bucket_exists', `bucket ${b.name} already exists`);
    if (outcome === 'deleting') throw deletingError(b.name);
    return (await this.getBucket(b.name))!;
  }

  async updateBucket(name: string, patch: BucketPatch): Promise<Bucket> {
    const values = bucketPatchColumns(patch, this.#clock.now());
    const found = await this.#db.transaction().execute(async (trx) => {
      // FOR UPDATE: a delete marking the tombstone waits for this, or this for it.
      const row = await trx.selectFrom('buckets').select('deleting_at').where('name', '=', name).forUpdate().executeTakeFirst();
      if (!row) return 'missing';
      if (row.deleting_at !== null) return 'deleting';
      await trx.updateTable('buckets').set(values).where('name', '=', name).execute();
      await bucketsChanged(trx, name);
      // Its waiting rows are looked at again from the next pass: a destination set on a bucket
      // without one makes them deliverable (../sqlite/bucket-due.ts).
      await lowerDue(trx, name, await dueNow(trx, values.updated_at!, this.#useCallerClock));
      return 'updated';
    });
    this.#buckets.invalidate();
    return writtenBucket(this.#db, name, found);
  }

  async pauseBucket(name: string): Promise<Bucket> {
    const now = this.#clock.now();
    return this.#setPaused(name, (b) => pauseColumns(b, now));
  }

  async resumeBucket(name: string): Promise<Bucket> {
    const now = this.#clock.now();
    return this.#setPaused(name, (b) => resumeColumns(b, now));
  }

  async #setPaused(name: string, change: (b: Bucket) => Partial<BucketsTable>): Promise<Bucket> {
    const updated = await this.#db.transaction().execute(async (trx) => {
      // FOR UPDATE: two pauses or resumes at once add the paused time once (SQLite's IMMEDIATE lock).
      const row = await trx.selectFrom('buckets').selectAll().where('name', '=', name).forUpdate().executeTakeFirst();
      if (!row) return 'missing';
      if (row.deleting_at !== null) return 'deleting';
      const values = change(toBucket(row));
      if (Object.keys(values).length === 0) return 'updated';
      await trx.updateTable('buckets').set(values).where('name', '=', name).execute();
      await bucketsChanged(trx, name);
      return 'updated';
    });
    this.#buckets.invalidate();
    return writtenBucket(this.#db, name, updated);
  }

  async deleteBucket(name: string, options: { force: boolean }): Promise<{ requests: number }> {
    try {
      return await pgDeleteBucket(this.#db, name, options, this.#clock.now());
    } finally {
      this.#buckets.invalidate();
    }
  }

  async purgeDeleting(hooks?: PurgeHooks): Promise<PurgeResult> {
    try {
      return await pgPurgeDeleting(this.#db, hooks, this.#clock.now());
    } finally {
      this.#buckets.invalidate();
    }
  }

  async bucketCounts(name: string): Promise<BucketCounts> {
    return (await pgAllBucketCounts(this.#db, name)).get(name) ?? { requests: 0, bytes: 0, states: {}, rejections: {} };
  }

  async allBucketCounts(): Promise<Map<string, BucketCounts>> {
    return pgAllBucketCounts(this.#db);
  }

  async unattributedRejections(): Promise<Record<string, number>> {
    return selectRejections(this.#db, '');
  }

  async bucketOverview(query: BucketOverviewQuery): Promise<BucketOverviewPage> {
    return pgBucketOverview(this.#db, query);
  }

  async listRequests(bucket: string, filter: RequestFilter, page: ListRequestsOptions): Promise<RequestPage> {
    const b = await this.#existing(bucket);
    const { requests, more } = await pgQueryPage(this.#db, bucket, filter, b.paused, {
      order: 'desc',
      limit: page.limit,
      ...(page.before !== undefined ? { before: page.before } : {}),
    });
    return { requests, nextCursor: more ? requests[requests.length - 1]!.id : null };
  }

  async *iterateRequests(bucket: string, filter: RequestFilter, options: IterateOptions = {}): AsyncIterable<StoredRequest> {
    const b = await this.#existing(bucket);
    yield* pgIterateMatching(this.#db, bucket, filter, b.paused, options.limit);
  }

  async requestBatch(
    bucket: string,
    filter: RequestFilter,
    cursor: RequestBatchCursor | null,
    options: IterateOptions = {},
  ): Promise<RequestBatch> {
    const b = await this.#existing(bucket);
    return pgMatchingBatch(this.#db, bucket, filter, b.paused, cursor, options.limit);
  }

  async countRequests(bucket: string, filter: RequestFilter): Promise<number> {
    const b = await this.#existing(bucket);
    return pgCountMatching(this.#db, bucket, filter, b.paused);
  }

  async getRequest(id: string): Promise<StoredRequest | undefined> {
    return selectStoredRequest(this.#db, id);
  }

  async requestHistory(id: string): Promise<DeliveryHistory[]> {
    return pgRequestHistory(this.#db, id);
  }

  async applyVerdicts(bucket: string, updates: readonly VerdictUpdate[], nowMs: number): Promise<VerdictsApplied> {
    return pgApplyVerdicts(this.#db, bucket, updates, nowMs, this.#useCallerClock);
  }

  async createReplay(input: NewReplay): Promise<Replay> {
    return pgCreateReplay(this.#db, input, this.#useCallerClock);
  }

  async getReplay(id: string): Promise<Replay | undefined> {
    return pgGetReplay(this.#db, id);
  }

  async listReplays(options: { bucket?: string; limit: number }): Promise<Replay[]> {
    return pgListReplays(this.#db, options);
  }

  async replayProgress(id: string): Promise<ReplayProgress> {
    return pgReplayProgress(this.#db, id);
  }

  async activeWorker(nowMs: number): Promise<WorkerHolder | undefined> {
    // The lease row is written in the database's time (pg-drain.ts): compared on the same clock.
    const row = await this.#db
      .selectFrom('worker_lease')
      .selectAll()
      .where('name', '=', 'drain')
      .where('expires_at', '>', this.#useCallerClock ? sql<number>`${nowMs}::bigint` : DB_NOW)
      .executeTakeFirst();
    if (!row) return undefined;
    return {
      holder: row.holder,
      info: row.info,
      acquiredAt: Number(row.acquired_at),
      heartbeatAt: Number(row.heartbeat_at),
      expiresAt: Number(row.expires_at),
    };
  }

  async heartbeat(p: ProcessBeat, nowMs: number, ttlMs: number): Promise<void> {
    await this.#db.transaction().execute(async (trx) => upsertProcess(trx, p, await dueNow(trx, nowMs, this.#useCallerClock), ttlMs));
  }

  async markStopped(id: string, nowMs: number): Promise<void> {
    await markProcessStopped(this.#db, id, await dueNow(this.#db, nowMs, this.#useCallerClock));
  }

  async processes(nowMs: number, options: { limit?: number } = {}): Promise<ProcessRecord[]> {
    // Heartbeats are written in the database's time: `alive` is judged on the same clock.
    const now = await dueNow(this.#db, nowMs, this.#useCallerClock);
    const held = await sql<{ id: string | null; n: number }>`
      select a.worker_id as id, count(*) as n from deliveries d join attempts a on a.id = d.lease_attempt where d.state = 'delivering' group by a.worker_id`.execute(
      this.#db,
    );
    const inflight = new Map(held.rows.map((h) => [h.id, Number(h.n)]));
    const ids = held.rows.flatMap((h) => (h.id === null ? [] : [h.id]));
    // Every live process and every one still holding a delivery, then the newest others up to the limit.
    const rows = (
      await sql<WorkersTable>`select * from workers where (stopped_at is null and expires_at > ${now}) or id = any(${ids}::text[])
        union select * from (select * from workers order by started_at desc, id limit ${options.limit ?? 100}) as newest
        order by started_at desc, id`.execute(this.#db)
    ).rows;
    return rows.map((r) => toProcessRecord(r, now, inflight.get(r.id) ?? 0));
  }

  async tail(bucket: string | readonly string[], cursor: TailCursor): Promise<{ events: TailEvent[]; cursor: TailCursor }> {
    const names = typeof bucket === 'string' ? [bucket] : [...bucket];
    const rows = (
      await sql<{ name: string; paused: number }>`select name, paused from buckets where name = any(${names}::text[])`.execute(this.#db)
    ).rows;
    if (typeof bucket === 'string' && rows.length === 0) throw bucketNotFound(bucket);
    const paused = new Set(rows.filter((r) => Number(r.paused) === 1).map((r) => r.name));
    return pgTail(this.#db, names, cursor, this.#clock.now(), paused);
  }

  async tailRequestsPage(bucket: string, afterId: string, limit: number): Promise<TailEvent[]> {
    const b = await this.#existing(bucket);
    return pgTailRequestsPage(this.#db, bucket, afterId, limit, b.paused);
  }

  async tailAttemptsPage(bucket: string, page: TailAttemptsPage, limit: number): Promise<TailEvent[]> {
    return pgTailAttemptsPage(this.#db, bucket, page, limit);
  }

  async statsSamples(query: StatsQuery): Promise<{ buckets: StatsSample[]; unattributedRejections: Record<string, number> }> {
    return pgStatsSamples(this.#db, query);
  }

  async storageSize(): Promise<StorageSize> {
    const r = await sql<{ bytes: number }>`select pg_database_size(current_database()) as bytes`.execute(this.#db);
    return { databaseBytes: Number(r.rows[0]!.bytes), walBytes: null };
  }

  async prune(options: PruneOptions, hooks: PruneHooks = {}): Promise<PruneResult> {
    return pgPrune(this.#db, { ...options, nowMs: options.nowMs ?? this.#clock.now() }, hooks);
  }

  /**
   * A writer for `requests import`: each batch one transaction on this store's pool, committed with
   * synchronous_commit = on (pg-import.ts).
   */
  async getSettings(): Promise<StoredSetting[]> {
    return selectSettings(this.#db);
  }

  async putSetting(key: string, value: string): Promise<StoredSetting> {
    return upsertSetting(this.#db, key, value, this.#clock.now());
  }

  async openImporter(): Promise<RequestImporter> {
    return createPgRequestImporter(this.#db, this.#clock);
  }

  async close(): Promise<void> {
    await settleWithin(this.#buckets.close());
    // Ends the pool (Kysely's PostgresDialect ends the pg.Pool it was given).
    await settleWithin(this.#db.destroy());
  }

  async #existing(bucket: string): Promise<Bucket> {
    const b = await this.getBucket(bucket);
    if (!b) throw bucketNotFound(bucket);
    return b;
  }
}

/**
 * Every bucket write, in its transaction: the epoch other processes' caches compare, and a notice
 * sent at commit (resolveBucket's cache, the worker's bucket list).
 */
async function bucketsChanged(trx: Kysely<Database>, name: string): Promise<void> {
  await trx
    .updateTable('meta')
    .set((eb) => ({ value: eb('value', '+', 1) }))
    .where('key', '=', 'bucket_epoch')
    .execute();
  await notify(trx, BUCKETS_CHANNEL, [name]);
}

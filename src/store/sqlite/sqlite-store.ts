import { stat } from 'node:fs/promises';
import { Kysely, Migrator, SqliteDialect, sql, type Selectable } from 'kysely';
import type { Durability } from '../../config/config.js';
import { AppError, bucketNotFound } from '../../shared/errors.js';
import type { Clock } from '../../shared/clock.js';
import { migrationProvider } from '../migrations/sqlite/index.js';
import type { BucketsTable, Database, WorkersTable } from '../schema.js';
import { PROCESS_KEEP_MS, toProcessRecord } from '../process-row.js';
import { LIST_PROCESSES_SQL, processParams, PRUNE_PROCESSES_SQL, STOP_PROCESS_SQL, UPSERT_PROCESS_SQL } from './sqlite-processes.js';

/** The write-lock wait of a receiver's heartbeat (see heartbeat()). */
const PROCESS_BEAT_LOCK_WAIT_MS = 50;
import type {
  BucketOverviewPage,
  BucketOverviewQuery,
  ProcessBeat,
  ProcessRecord,
  DeliveryHistory,
  NewReplay,
  VerdictUpdate,
  VerdictsApplied,
  Replay,
  ReplayProgress,
  TailAttemptsPage,
  TailCursor,
  TailEvent,
  WorkerHolder,
  Bucket,
  BucketCounts,
  BucketPatch,
  ListRequestsOptions,
  IterateOptions,
  RequestBatch,
  RequestBatchCursor,
  RequestFilter,
  RequestPage,
  NewBucket,
  PruneHooks,
  PruneOptions,
  PruneResult,
  PurgeHooks,
  PurgeResult,
  StatsQuery,
  StatsSample,
  StorageSize,
  RequestImporter,
  Store,
  StoredRequest,
  StoredSetting,
} from '../store.js';
import { selectSettings, upsertSetting } from '../kysely/settings-queries.js';
import { DEFAULT_MAX_BODY } from '../bucket-defaults.js';
import { bucketPatchColumns, newBucketColumns, pauseColumns, resumeColumns, toBucket } from '../bucket-row.js';
import { selectBucket, selectRejections, writtenBucket } from '../kysely/bucket-queries.js';
import { pause, PURGE_GAP_MS, purgeEachDeleting, purgeToEnd } from '../purge.js';
import { latestStateSql, selectStoredRequest } from '../kysely/request-queries.js';
import { lowerDue } from './bucket-due.js';
import { ImmediateSqliteDialect } from './immediate-dialect.js';
import { openSqlite, openSqliteReadOnly, type SqliteDb } from './open.js';
import { sqliteStorageErrorCode } from './sqlite-error.js';
import { createPurger, deletingError, type Purger } from './sqlite-delete.js';
import { countMatching, iterateMatching, matchingBatch, queryPage } from './request-query.js';
import { requestHistory, tail, tailAttemptsPage, tailRequestsPage } from './sqlite-history.js';
import { pruneRequests } from './sqlite-retention.js';
import { statsSamples } from './sqlite-stats.js';
import { allBucketCounts } from './sqlite-bucket-counts.js';
import { bucketOverview } from './sqlite-overview.js';
import { applyVerdicts } from './sqlite-verdicts.js';
import { createReplay, getReplay, listReplays, replayProgress } from './sqlite-replay.js';
import { asyncImporter, openRequestImporter } from './sqlite-import.js';

export interface SqliteStoreOptions {
  path: string;
  durability: Durability;
  busyTimeoutMs: number;
  clock: Clock;
}

/** Pages released per incremental_vacuum step (1 MiB at 4 KiB pages). */
const VACUUM_PAGES = 256;

export class SqliteStore implements Store {
  readonly #raw: SqliteDb;
  readonly #db: Kysely<Database>;
  readonly #clock: Clock;
  readonly #options: SqliteStoreOptions;
  readonly #purger: Purger;
  // Bucket cache for the ingest hot path. PRAGMA data_version changes when another connection
  // commits; only then is the (tiny) bucket_epoch row read, and only if it moved is the cache dropped.
  readonly #dataVersion;
  readonly #bucketEpoch;
  readonly #bucketByName;
  #seenDataVersion = -1;
  #seenEpoch = -1;
  #cache = new Map<string, Bucket | null>();

  private constructor(raw: SqliteDb, options: SqliteStoreOptions) {
    this.#raw = raw;
    this.#clock = options.clock;
    this.#options = options;
    // Every Kysely transaction here reads, then writes: BEGIN IMMEDIATE (immediate-dialect.ts).
    this.#db = new Kysely<Database>({ dialect: new ImmediateSqliteDialect({ database: raw }) });
    this.#purger = createPurger(raw);
    this.#dataVersion = raw.prepare('pragma data_version').pluck();
    this.#bucketEpoch = raw.prepare(`select value from meta where key = 'bucket_epoch'`).pluck();
    // A deleting bucket (tombstone) is not found: ingest answers 404 for it.
    this.#bucketByName = raw.prepare('select * from buckets where name = ? and deleting_at is null');
  }

  /** Opens (creating when missing) and migrates the database. */
  static async open(options: SqliteStoreOptions): Promise<SqliteStore> {
    const raw = openSqlite(options.path, { durability: options.durability, busyTimeoutMs: options.busyTimeoutMs });
    try {
      await migrate(raw);
    } catch (e) {
      raw.close();
      throw e;
    }
    return new SqliteStore(raw, options);
  }

  /**
   * Opens an existing, migrated database read-only (the admin reader's thread, reader-thread.ts):
   * never created, never migrated, and refused with `schema_mismatch` unless its schema is this
   * program's. Only reads work on it; a write fails with SQLITE_READONLY (storage_error).
   */
  static async openReadOnly(options: Pick<SqliteStoreOptions, 'path' | 'busyTimeoutMs' | 'clock'>): Promise<SqliteStore> {
    const raw = openSqliteReadOnly(options.path, options.busyTimeoutMs);
    try {
      await requireLatestSchema(raw, options.path);
    } catch (e) {
      raw.close();
      throw e;
    }
    // durability is the importer's only, which a read-only store never opens.
    return new SqliteStore(raw, { ...options, durability: 'normal' });
  }

  async getSettings(): Promise<StoredSetting[]> {
    return selectSettings(this.#db);
  }

  async putSetting(key: string, value: string): Promise<StoredSetting> {
    return upsertSetting(this.#db, key, value, this.#clock.now());
  }

  async openImporter(): Promise<RequestImporter> {
    return asyncImporter(openRequestImporter({ path: this.#options.path, busyTimeoutMs: this.#options.busyTimeoutMs, clock: this.#clock }));
  }

  /** For tests and diagnostics only: a single pragma value. */
  pragma(name: string): unknown {
    return this.#raw.pragma(name, { simple: true });
  }

  async resolveBucket(name: string): Promise<Bucket | undefined> {
    const dv = this.#dataVersion.get() as number;
    if (dv !== this.#seenDataVersion) {
      this.#seenDataVersion = dv;
      const epoch = this.#bucketEpoch.get() as number;
      if (epoch !== this.#seenEpoch) {
        this.#seenEpoch = epoch;
        this.#cache.clear();
      }
    }
    const hit = this.#cache.get(name);
    if (hit !== undefined) return hit ?? undefined;
    const row = this.#bucketByName.get(name) as Selectable<BucketsTable> | undefined;
    const bucket = row ? toBucket(row) : undefined;
    // Misses are not cached: a bucket created a moment ago by the CLI must be found right away.
    if (bucket) this.#cache.set(name, bucket);
    return bucket;
  }

  async getBucket(name: string): Promise<Bucket | undefined> {
    return selectBucket(this.#db, name);
  }

  async listBuckets(): Promise<Bucket[]> {
    const rows = await this.#db.selectFrom('buckets').selectAll().orderBy('name').execute();
    return rows.map(toBucket);
  }

  async createBucket(b: NewBucket): Promise<Bucket> {
    const now = this.#clock.now();
    let outcome: 'created' | 'deleting' | 'exists' | 'orphans';
    try {
      outcome = await this.#db.transaction().execute(async (trx) => {
        const existing = await trx.selectFrom('buckets').select('deleting_at').where('name', '=', b.name).executeTakeFirst();
        if (existing) return existing.deleting_at === null ? 'exists' : 'deleting';
        // Rows of an earlier bucket of this name without its bucket row (a delete that failed
        // before tombstones existed) must never reach the new destination: they become a
        // tombstone, and the name is free once they are purged.
        if (this.#purger.adoptOrphans(b.name, now, DEFAULT_MAX_BODY)) return 'orphans';
        await trx.insertInto('buckets').values(newBucketColumns(b, now)).execute();
        await bumpEpoch(trx);
        return 'created';
      });
    } catch (e) {
      if ((e as { code?: string }).code === 'SQLITE_CONSTRAINT_PRIMARYKEY') outcome = 'exists';
      else throw e;
    }
    if (outcome === 'exists') throw new AppError('bucket_exists', `bucket ${b.name} already exists`);
    if (outcome === 'orphans') {
      throw new AppError(
        'bucket_deleting',
        `bucket ${b.name} still has rows of an earlier bucket of that name (a delete that did not finish): they are now a deleting bucket; finish it with: hookbucket bucket delete ${b.name}`,
      );
    }
    if (outcome === 'deleting') throw deletingError(b.name);
    return (await this.getBucket(b.name))!;
  }

  async updateBucket(name: string, patch: BucketPatch): Promise<Bucket> {
    const values = bucketPatchColumns(patch, this.#clock.now());
    const found = await this.#db.transaction().execute(async (trx) => {
      const row = await trx.selectFrom('buckets').select('deleting_at').where('name', '=', name).executeTakeFirst();
      if (!row) return 'missing';
      if (row.deleting_at !== null) return 'deleting';
      await trx.updateTable('buckets').set(values).where('name', '=', name).execute();
      await bumpEpoch(trx);
      // Its waiting rows are looked at again from the next pass: a destination set on a bucket
      // without one makes them deliverable (bucket-due.ts).
      await lowerDue(trx, name, values.updated_at!);
      return 'updated';
    });
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
      const row = await trx.selectFrom('buckets').selectAll().where('name', '=', name).executeTakeFirst();
      if (!row) return 'missing';
      if (row.deleting_at !== null) return 'deleting';
      const values = change(toBucket(row));
      if (Object.keys(values).length === 0) return 'updated';
      await trx.updateTable('buckets').set(values).where('name', '=', name).execute();
      await bumpEpoch(trx);
      return 'updated';
    });
    return writtenBucket(this.#db, name, updated);
  }

  async deleteBucket(name: string, options: { force: boolean }): Promise<{ requests: number }> {
    // First the tombstone, in one short transaction: from here on nothing of the bucket is
    // stored or sent, whatever happens to the purge.
    this.#purger.markDeleting(name, options.force, this.#clock.now());
    const purged = await purgeToEnd(
      name,
      () => this.#purger.purgeBatch(name),
      sqliteStorageErrorCode,
      async () => (await this.bucketCounts(name)).requests,
    );
    await this.#reclaim();
    return purged;
  }

  async purgeDeleting(hooks: PurgeHooks = {}): Promise<PurgeResult> {
    const result = await purgeEachDeleting(
      this.#purger.deleting().map((t) => t.name),
      (name) => this.#withLockWait(hooks.lockWaitMs, () => this.#purger.purgeBatch(name)),
      (e) => sqliteStorageErrorCode(e) === 'store_busy',
      hooks,
    );
    // Not after a pass that stopped on lock trouble or was aborted: the next pass reclaims.
    if (result.requests > 0 && result.stopped === undefined && !hooks.signal?.aborted) await this.#reclaim(hooks.signal, hooks.lockWaitMs);
    return result;
  }

  /** Runs a synchronous write with another busy_timeout, restored before anything else can run. */
  #withLockWait<T>(ms: number | undefined, fn: () => T): T {
    if (ms === undefined) return fn();
    const before = this.#raw.pragma('busy_timeout', { simple: true }) as number;
    this.#raw.pragma(`busy_timeout = ${Math.max(0, Math.floor(ms))}`);
    try {
      return fn();
    } finally {
      this.#raw.pragma(`busy_timeout = ${before}`);
    }
  }

  /**
   * Gives freed pages back to the file system in small steps, each its own short write with the
   * purge's gap after it (PURGE_GAP_MS: other writers get in). Best effort: the rows are gone
   * already, and pages left free are reused by the next writes. `lockWaitMs`: serve's background
   * purge runs on the main thread, so each step waits as briefly for the lock as its batches do.
   */
  async #reclaim(signal?: AbortSignal, lockWaitMs?: number): Promise<void> {
    try {
      for (let i = 0; i < 100_000 && !signal?.aborted; i++) {
        const free = this.#raw.pragma('freelist_count', { simple: true }) as number;
        if (free === 0) return;
        this.#withLockWait(lockWaitMs, () => this.#raw.pragma(`incremental_vacuum(${VACUUM_PAGES})`));
        // Another connection may be using the freed pages as fast as they go: stop rather than spin.
        if ((this.#raw.pragma('freelist_count', { simple: true }) as number) >= free) return;
        await pause(PURGE_GAP_MS, signal);
      }
    } catch (e) {
      if (!sqliteStorageErrorCode(e)) throw e;
    }
  }

  async bucketCounts(name: string): Promise<BucketCounts> {
    const totals = await this.#db
      .selectFrom('requests')
      .select((eb) => [eb.fn.countAll<number>().as('n'), eb.fn.coalesce(eb.fn.sum<number>('size'), sql<number>`0`).as('bytes')])
      .where('bucket', '=', name)
      .executeTakeFirstOrThrow();
    const bucket = await this.getBucket(name);
    const states = await this.#db
      .selectFrom('requests as r')
      .select([sql<string>`${latestStateSql(pausedLit(bucket?.paused ?? false))}`.as('state'), (eb) => eb.fn.countAll<number>().as('n')])
      .where('r.bucket', '=', name)
      .groupBy('state')
      .execute();
    const rejections = await this.#db.selectFrom('rejections').select(['reason', 'count']).where('bucket', '=', name).execute();
    return {
      requests: Number(totals.n),
      bytes: Number(totals.bytes),
      states: Object.fromEntries(states.map((s) => [s.state, Number(s.n)])),
      rejections: Object.fromEntries(rejections.map((r) => [r.reason, Number(r.count)])),
    };
  }

  async allBucketCounts(): Promise<Map<string, BucketCounts>> {
    return allBucketCounts(this.#raw);
  }

  async unattributedRejections(): Promise<Record<string, number>> {
    return selectRejections(this.#db, '');
  }

  async bucketOverview(query: BucketOverviewQuery): Promise<BucketOverviewPage> {
    return bucketOverview(this.#raw, query);
  }

  async listRequests(bucket: string, filter: RequestFilter, page: ListRequestsOptions): Promise<RequestPage> {
    const b = await this.getBucket(bucket);
    if (!b) throw bucketNotFound(bucket);
    const { requests, more } = queryPage(this.#raw, bucket, filter, b.paused, {
      order: 'desc',
      limit: page.limit,
      ...(page.before !== undefined ? { before: page.before } : {}),
    });
    return { requests, nextCursor: more ? requests[requests.length - 1]!.id : null };
  }

  async *iterateRequests(bucket: string, filter: RequestFilter, options: IterateOptions = {}): AsyncIterable<StoredRequest> {
    const b = await this.getBucket(bucket);
    if (!b) throw bucketNotFound(bucket);
    yield* iterateMatching(this.#raw, bucket, filter, b.paused, options.limit);
  }

  async requestBatch(
    bucket: string,
    filter: RequestFilter,
    cursor: RequestBatchCursor | null,
    options: IterateOptions = {},
  ): Promise<RequestBatch> {
    const b = await this.getBucket(bucket);
    if (!b) throw bucketNotFound(bucket);
    return matchingBatch(this.#raw, bucket, filter, b.paused, cursor, options.limit);
  }

  async countRequests(bucket: string, filter: RequestFilter): Promise<number> {
    const b = await this.getBucket(bucket);
    if (!b) throw bucketNotFound(bucket);
    return countMatching(this.#raw, bucket, filter, b.paused);
  }

  async getRequest(id: string): Promise<StoredRequest | undefined> {
    return selectStoredRequest(this.#db, id);
  }

  async requestHistory(id: string): Promise<DeliveryHistory[]> {
    return requestHistory(this.#raw, id);
  }

  async applyVerdicts(bucket: string, updates: readonly VerdictUpdate[], nowMs: number): Promise<VerdictsApplied> {
    return applyVerdicts(this.#raw, bucket, updates, nowMs);
  }

  async createReplay(input: NewReplay): Promise<Replay> {
    return createReplay(this.#raw, input);
  }

  async getReplay(id: string): Promise<Replay | undefined> {
    return getReplay(this.#raw, id);
  }

  async listReplays(options: { bucket?: string; limit: number }): Promise<Replay[]> {
    return listReplays(this.#raw, options);
  }

  async replayProgress(id: string): Promise<ReplayProgress> {
    return replayProgress(this.#raw, id);
  }

  async activeWorker(nowMs: number): Promise<WorkerHolder | undefined> {
    const row = this.#raw.prepare(`select * from worker_lease where name = 'drain' and expires_at > ?`).get(nowMs) as
      | { holder: string; info: string; acquired_at: number; heartbeat_at: number; expires_at: number }
      | undefined;
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
    // A short lock wait: this connection writes on the event loop, which ingest shares; a beat
    // that cannot get the lock at once fails and the next one, a third of the TTL later, tries again.
    this.#withLockWait(PROCESS_BEAT_LOCK_WAIT_MS, () =>
      this.#raw.transaction(() => {
        this.#raw.prepare(UPSERT_PROCESS_SQL).run(processParams(p, nowMs, ttlMs));
        this.#raw.prepare(PRUNE_PROCESSES_SQL).run(nowMs - PROCESS_KEEP_MS);
      })(),
    );
  }

  async markStopped(id: string, nowMs: number): Promise<void> {
    this.#withLockWait(PROCESS_BEAT_LOCK_WAIT_MS, () => this.#raw.prepare(STOP_PROCESS_SQL).run(nowMs, nowMs, id));
  }

  async processes(nowMs: number, options: { limit?: number } = {}): Promise<ProcessRecord[]> {
    const held = this.#raw
      .prepare(
        `select a.worker_id as id, count(*) as n from deliveries d join attempts a on a.id = d.lease_attempt where d.state = 'delivering' group by a.worker_id`,
      )
      .all() as Array<{ id: string | null; n: number }>;
    const inflight = new Map(held.map((h) => [h.id, Number(h.n)]));
    const ids = JSON.stringify(held.flatMap((h) => (h.id === null ? [] : [h.id])));
    const rows = this.#raw.prepare(LIST_PROCESSES_SQL).all({ now: nowMs, held: ids, limit: options.limit ?? 100 }) as WorkersTable[];
    return rows.map((r) => toProcessRecord(r, nowMs, inflight.get(r.id) ?? 0));
  }

  async tail(bucket: string | readonly string[], cursor: TailCursor): Promise<{ events: TailEvent[]; cursor: TailCursor }> {
    const names = typeof bucket === 'string' ? [bucket] : bucket;
    const rows = this.#raw
      .prepare('select name, paused from buckets where name in (select value from json_each(?))')
      .all(JSON.stringify(names)) as Array<{ name: string; paused: number }>;
    if (typeof bucket === 'string' && rows.length === 0) throw bucketNotFound(bucket);
    const paused = new Set(rows.filter((r) => Number(r.paused) === 1).map((r) => r.name));
    return tail(this.#raw, names, cursor, this.#clock.now(), paused);
  }

  async tailRequestsPage(bucket: string, afterId: string, limit: number): Promise<TailEvent[]> {
    const b = await this.getBucket(bucket);
    if (!b) throw bucketNotFound(bucket);
    return tailRequestsPage(this.#raw, bucket, afterId, limit, b.paused);
  }

  async tailAttemptsPage(bucket: string, page: TailAttemptsPage, limit: number): Promise<TailEvent[]> {
    return tailAttemptsPage(this.#raw, bucket, page, limit);
  }

  async statsSamples(query: StatsQuery): Promise<{ buckets: StatsSample[]; unattributedRejections: Record<string, number> }> {
    // Every bucket but the ones being deleted, whose held rows would read as a growing backlog to
    // `health --fail-on` (named, a deleting bucket still shows its figures); only the names and
    // pause flags (10,000 full bucket rows cost more than the figures).
    const buckets =
      query.bucket === undefined
        ? (
            this.#raw.prepare('select name, paused from buckets where deleting_at is null order by name').all() as Array<{
              name: string;
              paused: number;
            }>
          ).map((r) => ({ name: r.name, paused: Number(r.paused) === 1 }))
        : [await this.getBucket(query.bucket)];
    if (buckets[0] === undefined && query.bucket !== undefined) throw bucketNotFound(query.bucket);
    return statsSamples(this.#raw, buckets as Array<Pick<Bucket, 'name' | 'paused'>>, query);
  }

  async storageSize(): Promise<StorageSize> {
    // File sizes, not page_count * page_size: what the disk holds (freed pages included) is what
    // an operator watching the volume needs; the -wal file grows between checkpoints.
    return { databaseBytes: await fileSize(this.#options.path), walBytes: await fileSize(`${this.#options.path}-wal`) };
  }

  async prune(options: PruneOptions, hooks: PruneHooks = {}): Promise<PruneResult> {
    const buckets = options.bucket === undefined ? await this.listBuckets() : [await this.getBucket(options.bucket)];
    if (buckets[0] === undefined && options.bucket !== undefined) throw bucketNotFound(options.bucket);
    return pruneRequests(
      this.#raw,
      (buckets as Bucket[]).map((b) => b.name),
      { ...options, nowMs: options.nowMs ?? this.#clock.now() },
      hooks,
    );
  }

  async close(): Promise<void> {
    await this.#db.destroy();
  }
}

/** A file's size in bytes; 0 when it does not exist (no -wal yet, or `:memory:`). */
async function fileSize(path: string): Promise<number> {
  try {
    return (await stat(path)).size;
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'ENOENT') return 0;
    throw e;
  }
}

const pausedLit = (paused: boolean) => sql.lit(paused ? 1 : 0);

async function bumpEpoch(trx: Kysely<Database>): Promise<void> {
  await trx
    .updateTable('meta')
    .set((eb) => ({ value: eb('value', '+', 1) }))
    .where('key', '=', 'bucket_epoch')
    .execute();
}

/** Refuses a database whose last applied migration is not this program's last (not migrated yet, or by a newer program). */
async function requireLatestSchema(raw: SqliteDb, path: string): Promise<void> {
  const latest = Object.keys(await migrationProvider.getMigrations())
    .sort()
    .at(-1)!;
  const hasTable = raw
    .prepare(`select count(*) from sqlite_master where type = 'table' and name = 'hookbucket_migration'`)
    .pluck()
    .get() as number;
  const applied =
    hasTable === 0 ? null : ((raw.prepare('select max(name) from hookbucket_migration').pluck().get() as string | null) ?? null);
  if (applied !== latest) {
    throw new AppError(
      'schema_mismatch',
      `database ${path} is at schema ${applied ?? '(none)'}, this program's is ${latest}: start serve (or any command that opens it read-write) with this program first`,
    );
  }
}

/** Runs pending migrations; safe to run again and from several processes (each migration is one transaction). */
export async function migrate(raw: SqliteDb): Promise<void> {
  const db = new Kysely<unknown>({ dialect: new SqliteDialect({ database: raw }) });
  const migrator = new Migrator({
    db,
    provider: migrationProvider,
    migrationTableName: 'hookbucket_migration',
    migrationLockTableName: 'hookbucket_migration_lock',
  });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    throw new AppError('storage_error', `migration ${failed?.migrationName ?? ''} failed: ${String((error as Error)?.message ?? error)}`, {
      cause: error,
    });
  }
}

import { Kysely, Migrator, SqliteDialect, sql, type RawBuilder, type Selectable } from 'kysely';
import type { Durability } from '../../config/config.js';
import { AppError } from '../../shared/errors.js';
import type { Clock } from '../../shared/clock.js';
import { migrationProvider } from '../migrations/sqlite/index.js';
import type { BucketsTable, Database, WorkersTable } from '../schema.js';
import { toProcessRecord } from '../process-row.js';

/** The write-lock wait of a receiver's heartbeat (see heartbeat()). */
const PROCESS_BEAT_LOCK_WAIT_MS = 50;
import type {
  ProcessBeat,
  ProcessRecord,
  DeliveryHistory,
  NewReplay,
  Replay,
  ReplayProgress,
  TailCursor,
  TailEvent,
  WorkerHolder,
  Bucket,
  BucketCounts,
  BucketPatch,
  ListRequestsOptions,
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
  RequestState,
  RequestSummary,
  RequestImporter,
  Store,
  StoredRequest,
} from '../store.js';
import { DEFAULT_DRAIN, DEFAULT_MAX_BODY } from '../bucket-defaults.js';
import { drainColumns, retentionColumns, toBucket } from '../bucket-row.js';
import { lowerDue } from './bucket-due.js';
import { ImmediateSqliteDialect } from './immediate-dialect.js';
import { openSqlite, type SqliteDb } from './open.js';
import { sqliteStorageErrorCode } from './sqlite-error.js';
import { createPurger, deletingError, PURGE_GAP_MS, type Purger } from './sqlite-delete.js';
import { countMatching, iterateMatching, queryPage } from './request-query.js';
import { requestHistory, tail } from './sqlite-history.js';
import { pruneRequests } from './sqlite-retention.js';
import { statsSamples } from './sqlite-stats.js';
import { allBucketCounts } from './sqlite-bucket-counts.js';
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

/** Waits `ms`, or less when the signal aborts. */
const pause = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });

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
    const row = await this.#db.selectFrom('buckets').selectAll().where('name', '=', name).executeTakeFirst();
    return row ? toBucket(row) : undefined;
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
        await trx
          .insertInto('buckets')
          .values({
            name: b.name,
            destination: b.destination ?? null,
            max_body: b.maxBody ?? DEFAULT_MAX_BODY,
            ack_status: b.ackStatus ?? 200,
            ack_body: b.ackBody ?? null,
            ack_content_type: b.ackContentType ?? null,
            paused: 0,
            created_at: now,
            updated_at: now,
            paused_at: null,
            paused_total_ms: 0,
            ...retentionColumns({ retainMs: b.retainMs ?? null, ...(b.retainStates ? { retainStates: b.retainStates } : {}) }),
            // Every drain setting is given here, defaults filled in, so every column is set.
            ...(drainColumns({ ...DEFAULT_DRAIN, ...b.drain }) as DrainColumns),
          })
          .execute();
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
    const values: Partial<BucketsTable> = { updated_at: this.#clock.now() };
    if (patch.destination !== undefined) values.destination = patch.destination;
    if (patch.maxBody !== undefined) values.max_body = patch.maxBody;
    if (patch.ackStatus !== undefined) values.ack_status = patch.ackStatus;
    if (patch.ackBody !== undefined) values.ack_body = patch.ackBody;
    if (patch.ackContentType !== undefined) values.ack_content_type = patch.ackContentType;
    if (patch.drain !== undefined) Object.assign(values, drainColumns(patch.drain));
    Object.assign(values, retentionColumns(patch));
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
    if (found === 'missing') throw new AppError('not_found', `bucket ${name} not found`);
    if (found === 'deleting') throw deletingError(name);
    return (await this.getBucket(name))!;
  }

  async pauseBucket(name: string): Promise<Bucket> {
    const now = this.#clock.now();
    return this.#setPaused(name, (b) => (b.paused ? {} : { paused: 1, paused_at: now, updated_at: now }));
  }

  async resumeBucket(name: string): Promise<Bucket> {
    const now = this.#clock.now();
    return this.#setPaused(name, (b) =>
      b.paused ? { paused: 0, paused_at: null, paused_total_ms: b.pausedTotalMs + Math.max(0, now - (b.pausedAt ?? now)), updated_at: now } : {},
    );
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
    if (updated === 'missing') throw new AppError('not_found', `bucket ${name} not found`);
    if (updated === 'deleting') throw deletingError(name);
    return (await this.getBucket(name))!;
  }

  async deleteBucket(name: string, options: { force: boolean }): Promise<{ requests: number }> {
    // First the tombstone, in one short transaction: from here on nothing of the bucket is
    // stored or sent, whatever happens to the purge.
    this.#purger.markDeleting(name, options.force, this.#clock.now());
    let requests = 0;
    try {
      for (;;) {
        const step = this.#purger.purgeBatch(name);
        requests += step.requests;
        if (step.done) break;
        await pause(PURGE_GAP_MS);
      }
    } catch (e) {
      const code = sqliteStorageErrorCode(e);
      if (!code) throw e;
      const left = await this.bucketCounts(name).then((c) => c.requests).catch(() => undefined);
      throw new AppError(
        code,
        `bucket ${name} is deleting; the purge stopped after ${requests} request(s)${left === undefined ? '' : ` with ${left} left`} (${(e as Error).message}): ` +
          `nothing of it is stored or sent any more; run hookbucket bucket delete ${name} again to finish (a running serve also finishes it in the background)`,
        { cause: e },
      );
    }
    await this.#reclaim();
    return { requests };
  }

  async purgeDeleting(hooks: PurgeHooks = {}): Promise<PurgeResult> {
    const result: PurgeResult = { finished: [], requests: 0, bytes: 0 };
    for (const t of this.#purger.deleting()) {
      for (;;) {
        if (hooks.signal?.aborted) return result;
        let step;
        try {
          step = this.#withLockWait(hooks.lockWaitMs, () => this.#purger.purgeBatch(t.name));
        } catch (e) {
          // Lock trouble: the tombstone stands; the next round goes on from here.
          if (sqliteStorageErrorCode(e) === 'store_busy') return { ...result, stopped: (e as Error).message };
          throw e;
        }
        result.requests += step.requests;
        result.bytes += step.bytes;
        if (step.done) {
          result.finished.push(t.name);
          break;
        }
        await pause(PURGE_GAP_MS, hooks.signal);
      }
    }
    if (result.requests > 0) await this.#reclaim(hooks.signal, hooks.lockWaitMs);
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
    const rows = await this.#db.selectFrom('rejections').select(['reason', 'count']).where('bucket', '=', '').execute();
    return Object.fromEntries(rows.map((r) => [r.reason, Number(r.count)]));
  }

  async listRequests(bucket: string, filter: RequestFilter, page: ListRequestsOptions): Promise<RequestPage> {
    const b = await this.getBucket(bucket);
    if (!b) throw new AppError('not_found', `bucket ${bucket} not found`);
    const { requests, more } = queryPage(this.#raw, bucket, filter, b.paused, {
      order: 'desc',
      limit: page.limit,
      ...(page.before !== undefined ? { before: page.before } : {}),
    });
    return { requests, nextCursor: more ? requests[requests.length - 1]!.id : null };
  }

  async *iterateRequests(bucket: string, filter: RequestFilter): AsyncIterable<StoredRequest> {
    const b = await this.getBucket(bucket);
    if (!b) throw new AppError('not_found', `bucket ${bucket} not found`);
    yield* iterateMatching(this.#raw, bucket, filter, b.paused);
  }

  async countRequests(bucket: string, filter: RequestFilter): Promise<number> {
    const b = await this.getBucket(bucket);
    if (!b) throw new AppError('not_found', `bucket ${bucket} not found`);
    return countMatching(this.#raw, bucket, filter, b.paused);
  }

  async getRequest(id: string): Promise<StoredRequest | undefined> {
    const row = await this.#db
      .selectFrom('requests as r')
      .innerJoin('buckets as b', 'b.name', 'r.bucket')
      .selectAll('r')
      .select(sql<RequestState>`${latestStateSql(sql.ref('b.paused'))}`.as('state'))
      .where('r.id', '=', id)
      .executeTakeFirst();
    if (!row) return undefined;
    return {
      id: row.id,
      bucket: row.bucket,
      receivedAt: Number(row.received_at),
      method: row.method,
      path: row.path,
      query: row.query,
      rawHeaders: JSON.parse(row.headers) as string[],
      body: row.body,
      size: Number(row.size),
      sha256: row.sha256,
      peer: row.peer,
      state: row.state,
      rawTrailers: row.trailers === null ? [] : (JSON.parse(row.trailers) as string[]),
    };
  }

  async requestHistory(id: string): Promise<DeliveryHistory[]> {
    return requestHistory(this.#raw, id);
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
    return { holder: row.holder, info: row.info, acquiredAt: Number(row.acquired_at), heartbeatAt: Number(row.heartbeat_at), expiresAt: Number(row.expires_at) };
  }

  async heartbeat(p: ProcessBeat, nowMs: number, ttlMs: number): Promise<void> {
    // A short lock wait: this connection writes on the event loop, which ingest shares; a beat
    // that cannot get the lock at once fails and the next one, a third of the TTL later, tries again.
    this.#withLockWait(PROCESS_BEAT_LOCK_WAIT_MS, () =>
      this.#raw
        .prepare(
          `insert into workers (id, roles, host, pid, info, lease_ms, started_at, heartbeat_at, expires_at, stopped_at)
           values (@id, @roles, @host, @pid, @info, @lease_ms, @now, @now, @expires_at, null)
           on conflict (id) do update set roles = excluded.roles, info = excluded.info, lease_ms = excluded.lease_ms,
             heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at, stopped_at = null`,
        )
        .run({ id: p.id, roles: p.roles.join(','), host: p.host, pid: p.pid, info: p.info, lease_ms: p.leaseMs, now: nowMs, expires_at: nowMs + ttlMs }),
    );
  }

  async markStopped(id: string, nowMs: number): Promise<void> {
    this.#withLockWait(PROCESS_BEAT_LOCK_WAIT_MS, () => this.#raw.prepare('update workers set stopped_at = ?, expires_at = min(expires_at, ?) where id = ?').run(nowMs, nowMs, id));
  }

  async processes(nowMs: number, options: { limit?: number } = {}): Promise<ProcessRecord[]> {
    const rows = this.#raw.prepare('select * from workers order by started_at desc, id limit ?').all(options.limit ?? 100) as WorkersTable[];
    const held = this.#raw
      .prepare(`select a.worker_id as id, count(*) as n from deliveries d join attempts a on a.id = d.lease_attempt where d.state = 'delivering' group by a.worker_id`)
      .all() as Array<{ id: string | null; n: number }>;
    const inflight = new Map(held.map((h) => [h.id, Number(h.n)]));
    return rows.map((r) => toProcessRecord(r, nowMs, inflight.get(r.id) ?? 0));
  }

  async tail(bucket: string, cursor: TailCursor): Promise<{ events: TailEvent[]; cursor: TailCursor }> {
    const b = await this.getBucket(bucket);
    if (!b) throw new AppError('not_found', `bucket ${bucket} not found`);
    return tail(this.#raw, bucket, cursor, this.#clock.now(), b.paused);
  }

  async statsSamples(query: StatsQuery): Promise<{ buckets: StatsSample[]; unattributedRejections: Record<string, number> }> {
    // Every bucket but the ones being deleted, whose held rows would read as a growing backlog to
    // `health --fail-on` (named, a deleting bucket still shows its figures); only the names and
    // pause flags (10,000 full bucket rows cost more than the figures).
    const buckets =
      query.bucket === undefined
        ? (this.#raw.prepare('select name, paused from buckets where deleting_at is null order by name').all() as Array<{ name: string; paused: number }>).map(
            (r) => ({ name: r.name, paused: Number(r.paused) === 1 }),
          )
        : [await this.getBucket(query.bucket)];
    if (buckets[0] === undefined && query.bucket !== undefined) throw new AppError('not_found', `bucket ${query.bucket} not found`);
    return statsSamples(this.#raw, buckets as Array<Pick<Bucket, 'name' | 'paused'>>, query);
  }

  async prune(options: PruneOptions, hooks: PruneHooks = {}): Promise<PruneResult> {
    const buckets = options.bucket === undefined ? await this.listBuckets() : [await this.getBucket(options.bucket)];
    if (buckets[0] === undefined && options.bucket !== undefined) throw new AppError('not_found', `bucket ${options.bucket} not found`);
    return pruneRequests(this.#raw, (buckets as Bucket[]).map((b) => b.name), options, hooks);
  }

  async close(): Promise<void> {
    await this.#db.destroy();
  }
}

/**
 * The request state: the latest generation's delivery to the bucket destination, 'held' when the
 * bucket is paused (`paused` is an SQL expression: a literal or the joined `b.paused` column).
 */
function latestStateSql(paused: RawBuilder<unknown>) {
  // `latest = 1` marks that delivery (maintained by ingest and replay); deliveries_request finds it.
  const latest = sql`(select d.state from deliveries d where d.request_id = r.id and d.latest = 1)`;
  return sql`coalesce(case when ${paused} = 1 and ${latest} in ('pending', 'retrying') then 'held' else ${latest} end, 'none')`;
}

const pausedLit = (paused: boolean) => sql.lit(paused ? 1 : 0);

type DrainColumns = Omit<BucketsTable, 'name' | 'destination' | 'max_body' | 'ack_status' | 'ack_body' | 'ack_content_type' | 'paused' | 'created_at' | 'updated_at' | 'paused_at' | 'paused_total_ms'>;

async function bumpEpoch(trx: Kysely<Database>): Promise<void> {
  await trx.updateTable('meta').set((eb) => ({ value: eb('value', '+', 1) })).where('key', '=', 'bucket_epoch').execute();
}

/** Runs pending migrations; safe to run again and from several processes (each migration is one transaction). */
export async function migrate(raw: SqliteDb): Promise<void> {
  const db = new Kysely<unknown>({ dialect: new SqliteDialect({ database: raw }) });
  const migrator = new Migrator({ db, provider: migrationProvider, migrationTableName: 'hookbucket_migration', migrationLockTableName: 'hookbucket_migration_lock' });
  const { error, results } = await migrator.migrateToLatest();
  const failed = results?.find((r) => r.status === 'Error');
  if (error || failed) {
    throw new AppError('storage_error', `migration ${failed?.migrationName ?? ''} failed: ${String((error as Error)?.message ?? error)}`, { cause: error });
  }
}

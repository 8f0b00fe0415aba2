import type { Insertable } from 'kysely';
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { Kysely, SqliteDialect, sql } from 'kysely';
import { UUID } from 'uuidv7';
import type { AttemptsTable, Database, DeliveriesTable, DeliveryState, RequestsTable } from '../../../src/store/schema.js';
import type { NewReplay, PruneOptions, PruneResult, StatsQuery } from '../../../src/store/store.js';
import { createPgPool, migratePostgres, pgKysely } from '../../../src/store/postgres/pg-pool.js';
import { pgCreateReplay, pgReplayProgress } from '../../../src/store/postgres/pg-replay.js';
import { pgPrune } from '../../../src/store/postgres/pg-retention.js';
import { pgStatsSamples } from '../../../src/store/postgres/pg-stats.js';
import { openSqlite, type SqliteDb } from '../../../src/store/sqlite/open.js';
import { createReplay, replayProgress } from '../../../src/store/sqlite/sqlite-replay.js';
import { pruneRequests } from '../../../src/store/sqlite/sqlite-retention.js';
import { statsSamples } from '../../../src/store/sqlite/sqlite-stats.js';
import { migrate as migrateSqlite } from '../../../src/store/sqlite/sqlite-store.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, type TestDatabase } from '../../helpers/pg-database.js';
import { tempDir } from '../../helpers/temp-dir.js';

/** The fixtures' times stand for the database clock (useCallerClock), as on SQLite. */
const createReplayAtCallerClock = (db: Parameters<typeof pgCreateReplay>[0], r: Parameters<typeof pgCreateReplay>[1]) =>
  pgCreateReplay(db, r, true);

/**
 * The same rows in a SQLite file and a PostgreSQL database, then the same replay, progress, stats
 * and prune calls on each: the results must be equal (delivery ids aside, which are made fresh).
 * The contract suite checks the Store as a whole; this pins these functions to SQLite's.
 */

const server = pgTestServer();
const T0 = 1_764_800_000_000;
const MIN = 60_000;

/** mulberry32: a small seeded generator, so the fixture is the same on every run. */
function rng(seed: number) {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

interface Fixture {
  buckets: Array<{ name: string; paused: number; deleting_at: number | null }>;
  requests: Insertable<RequestsTable>[];
  deliveries: DeliveriesTable[];
  attempts: AttemptsTable[];
  rejections: Array<{ bucket: string; reason: string; count: number; last_at: number }>;
}

function makeFixture(): Fixture {
  const r = rng(12);
  const pick = <T>(xs: readonly T[]) => xs[Math.floor(r() * xs.length)]!;
  const buckets = [
    { name: 'alpha', paused: 0, deleting_at: null },
    { name: 'Beta', paused: 1, deleting_at: null },
    { name: 'gamma-1', paused: 0, deleting_at: null },
    { name: 'zed', paused: 0, deleting_at: T0 },
  ];
  const f: Fixture = { buckets, requests: [], deliveries: [], attempts: [], rejections: [] };
  let n = 0;
  const states: DeliveryState[] = ['pending', 'retrying', 'delivering', 'delivered', 'failed', 'exhausted'];
  for (let i = 0; i < 400; i++) {
    const bucket = pick(buckets).name;
    const at = T0 + Math.floor(r() * 10 * MIN);
    const id = UUID.fromFieldsV7(at, 0, 0, ++n).toString();
    const size = Math.floor(r() * 2_000);
    f.requests.push({
      id,
      bucket,
      received_at: at,
      method: 'POST',
      path: '/x',
      query: null,
      headers: '[]',
      body: Buffer.alloc(size, 1),
      size,
      sha256: '',
      peer: null,
      trailers: null,
    });
    const own = r() < 0.85 ? 1 + Math.floor(r() * 3) : 0; // own generations; 0: state none
    const withTo = r() < 0.2;
    let gen = 0;
    const add = (state: DeliveryState, destination: string | null, latest: number) => {
      gen++;
      const did = UUID.fromFieldsV7(at, 0, 0, ++n).toString();
      const settled = ['delivered', 'failed', 'exhausted', 'superseded'].includes(state) ? at + Math.floor(r() * 5 * MIN) : null;
      f.deliveries.push({
        id: did,
        request_id: id,
        bucket,
        destination,
        generation: gen,
        state,
        attempts: 0,
        next_attempt_at: at,
        lease_until: state === 'delivering' ? at + MIN : null,
        trigger: gen === 1 ? 'initial' : 'replay',
        replay_id: null,
        deferrals: 0,
        last_deferral_reason: null,
        created_at: at,
        updated_at: at,
        first_attempt_at: null,
        paused_ms_at_first: null,
        lease_attempt: state === 'delivering' ? 'x' : null,
        last_status: null,
        last_error: null,
        last_attempt_at: null,
        settled_at: settled,
        supersede_requested: 0,
        latest,
      });
      const tries = Math.floor(r() * 3);
      for (let k = 0; k < tries; k++) {
        f.attempts.push({
          id: UUID.fromFieldsV7(at, 0, 0, ++n).toString(),
          delivery_id: did,
          request_id: id,
          bucket,
          number: k + 1,
          url: 'http://x/',
          started_at: at + Math.floor(r() * 5 * MIN),
          duration_ms: r() < 0.1 ? null : pick([5, 20, 35, 120]),
          status: null,
          error_class: null,
          error_message: null,
          response_headers: null,
          response_body: null,
          response_truncated: 0,
          outcome: r() < 0.1 ? null : pick(['delivered', 'retry', 'failed', 'exhausted', 'lease_expired', 'released'] as const),
          reason: null,
          next_attempt_at: null,
          next_why: null,
          worker_id: null,
        });
      }
    };
    for (let g = 1; g <= own; g++) add(g < own ? 'superseded' : pick(states), null, g === own ? 1 : 0);
    if (withTo) add(pick(states), 'http://elsewhere/', 0);
  }
  f.rejections.push(
    { bucket: 'alpha', reason: 'too_large', count: 4, last_at: T0 },
    { bucket: '', reason: 'unknown_bucket', count: 9, last_at: T0 },
  );
  return f;
}

async function load(db: Kysely<Database>, f: Fixture): Promise<void> {
  for (const b of f.buckets) {
    await sql`insert into buckets (name, destination, max_body, paused, paused_at, created_at, updated_at, deleting_at)
      values (${b.name}, 'http://127.0.0.1:9/', 1048576, ${b.paused}, ${b.paused ? T0 : null}, ${T0}, ${T0}, ${b.deleting_at})`.execute(db);
  }
  // 100 rows a statement: well inside both dialects' parameter limits.
  for (let i = 0; i < f.requests.length; i += 100)
    await db
      .insertInto('requests')
      .values(f.requests.slice(i, i + 100))
      .execute();
  for (let i = 0; i < f.deliveries.length; i += 100)
    await db
      .insertInto('deliveries')
      .values(f.deliveries.slice(i, i + 100))
      .execute();
  for (let i = 0; i < f.attempts.length; i += 100)
    await db
      .insertInto('attempts')
      .values(f.attempts.slice(i, i + 100))
      .execute();
  await db.insertInto('rejections').values(f.rejections).execute();
}

/** Every delivery as comparable data: ids left out (a replay makes fresh ones). */
async function deliveryShapes(db: Kysely<Database>): Promise<string[]> {
  const rows = await db
    .selectFrom('deliveries')
    .select([
      'request_id',
      'generation',
      'state',
      'destination',
      'latest',
      'supersede_requested',
      'settled_at',
      'trigger',
      'replay_id',
      'next_attempt_at',
    ])
    .execute();
  return rows
    .map((d) =>
      JSON.stringify([
        d.request_id,
        Number(d.generation),
        d.state,
        d.destination,
        Number(d.latest),
        Number(d.supersede_requested),
        d.settled_at === null ? null : Number(d.settled_at),
        d.trigger,
        d.replay_id,
        Number(d.next_attempt_at),
      ]),
    )
    .sort();
}

const ids = async (db: Kysely<Database>) => (await db.selectFrom('requests').select('id').execute()).map((r) => r.id).sort();

describe('PostgreSQL operations give SQLite results on the same rows', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
  const fixture = makeFixture();
  let tdb: TestDatabase;
  let pg: Kysely<Database>;
  let dir: ReturnType<typeof tempDir>;
  let raw: SqliteDb;
  let lite: Kysely<Database>;

  before(async () => {
    tdb = await createTestDatabase(server!);
    pg = pgKysely(
      createPgPool({
        url: tdb.url,
        max: 2,
        statementTimeoutMs: 30_000,
        idleInTransactionTimeoutMs: 30_000,
        connectTimeoutMs: 5_000,
        synchronousCommit: 'on',
        applicationName: 'hookbucket-test',
      }),
    );
    await migratePostgres(pg);
    dir = tempDir();
    raw = openSqlite(dir.db, { durability: 'normal', busyTimeoutMs: 5_000 });
    await migrateSqlite(raw);
    lite = new Kysely<Database>({ dialect: new SqliteDialect({ database: raw }) });
    await load(pg, fixture);
    await load(lite, fixture);
  });

  after(async () => {
    await pg?.destroy();
    await tdb?.drop();
    await lite?.destroy();
    dir?.remove();
  });

  const sqliteBuckets = async (name?: string) => {
    const rows = await lite.selectFrom('buckets').select(['name', 'paused', 'deleting_at']).orderBy('name').execute();
    return rows
      .filter((b) => (name === undefined ? b.deleting_at === null : b.name === name))
      .map((b) => ({ name: b.name, paused: Number(b.paused) === 1 }));
  };

  test('stats samples, every bucket and one named (a deleting one)', async () => {
    for (const q of [
      { sinceMs: T0 + 2 * MIN, untilMs: T0 + 7 * MIN },
      { sinceMs: T0, untilMs: T0 + 20 * MIN },
      { bucket: 'zed', sinceMs: T0 + MIN, untilMs: T0 + 3 * MIN },
      { bucket: 'Beta', sinceMs: T0 + MIN, untilMs: T0 + 3 * MIN },
    ] satisfies StatsQuery[]) {
      const expected = statsSamples(raw, await sqliteBuckets(q.bucket), q);
      assert.ok(
        expected.buckets.some((b) => b.attempts.length > 1),
        'the fixture has attempts to group',
      );
      assert.deepEqual(await pgStatsSamples(pg, q), expected);
    }
  });

  test('replays (to the destination and --to, with repeats and foreign ids), then their progress', async () => {
    const r = rng(7);
    for (const [k, destination] of [
      [1, null],
      [2, 'http://other/'],
      [3, null],
    ] as const) {
      for (const bucket of ['alpha', 'Beta']) {
        const chosen = fixture.requests.filter(() => r() < 0.3).map((q) => q.id);
        chosen.push(chosen[0]!, chosen[1]!);
        const input: NewReplay = {
          id: UUID.fromFieldsV7(T0 + k, 0, 0, bucket.length).toString(),
          bucket,
          requestIds: chosen,
          selection: { k },
          destination,
          rate: k === 2 ? { count: 3, perMs: 1_000 } : null,
          nowMs: T0 + 20 * MIN + k,
        };
        const expected = createReplay(raw, input);
        assert.ok(expected.total > 0 && (destination !== null || expected.superseded > 0));
        assert.deepEqual(await createReplayAtCallerClock(pg, input), expected);
        assert.deepEqual(await pgReplayProgress(pg, input.id), replayProgress(raw, input.id));
      }
    }
    assert.deepEqual(await deliveryShapes(pg), await deliveryShapes(lite));
    const due = async (db: Kysely<Database>) =>
      (
        await sql<{ bucket: string; next_due_at: number | null }>`select bucket, next_due_at from bucket_due order by bucket`.execute(db)
      ).rows.map((x) => [x.bucket, x.next_due_at === null ? null : Number(x.next_due_at)]);
    assert.deepEqual(await due(pg), await due(lite));
  });

  test('prune: dry runs, then real runs, leave the same requests', async () => {
    const runs: PruneOptions[] = [
      { receivedBeforeMs: T0 + 5 * MIN, states: ['delivered', 'failed', 'none'], dryRun: true },
      { bucket: 'gamma-1', receivedBeforeMs: T0 + 8 * MIN, states: ['exhausted', 'delivered'], dryRun: true },
      { bucket: 'gamma-1', receivedBeforeMs: T0 + 8 * MIN, states: ['exhausted', 'delivered'], dryRun: false },
      { receivedBeforeMs: T0 + 5 * MIN, states: ['delivered', 'failed', 'none'], dryRun: false },
    ];
    let keptLive = 0;
    for (const o of runs) {
      const names = (await lite.selectFrom('buckets').select('name').orderBy('name').execute())
        .map((b) => b.name)
        .filter((b) => o.bucket === undefined || b === o.bucket);
      const expected: PruneResult = await pruneRequests(raw, names, o);
      assert.ok(expected.requests > 0, 'the fixture has old requests');
      keptLive += expected.keptLive;
      assert.deepEqual(await pgPrune(pg, o), { ...expected, reclaimedBytes: 0 });
    }
    assert.ok(keptLive > 0, 'the fixture has old requests with a live delivery');
    assert.deepEqual(await ids(pg), await ids(lite));
    assert.deepEqual(await deliveryShapes(pg), await deliveryShapes(lite));
  });
});

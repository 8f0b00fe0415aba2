import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { afterEach, before, beforeEach, describe, test } from 'node:test';
import { sql, type Kysely } from 'kysely';
import pg from 'pg';
import { UUID } from 'uuidv7';
import { newId } from '../../../src/shared/ids.js';
import type { Database, DeliveryState } from '../../../src/store/schema.js';
import { pgDeleteBucket, pgPurgeDeleting } from '../../../src/store/postgres/pg-delete.js';
import { BUCKETS_CHANNEL, REQUESTS_CHANNEL } from '../../../src/store/postgres/pg-notify.js';
import { createPgPool, migratePostgres, pgKysely } from '../../../src/store/postgres/pg-pool.js';
import { pgCreateReplay, pgGetReplay, pgListReplays, pgReplayProgress } from '../../../src/store/postgres/pg-replay.js';
import { pgPrune } from '../../../src/store/postgres/pg-retention.js';
import { pgStatsSamples } from '../../../src/store/postgres/pg-stats.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases, type TestDatabase } from '../../helpers/pg-database.js';
import { progress } from '../../helpers/replay-progress.js';
import { until } from '../../helpers/until.js';

/** The fixtures' times stand for the database clock (useCallerClock), as on SQLite. */
const createReplayAtCallerClock = (db: Parameters<typeof pgCreateReplay>[0], r: Parameters<typeof pgCreateReplay>[1]) =>
  pgCreateReplay(db, r, true);

const server = pgTestServer();

const T0 = 1_764_800_000_000;
let seq = 0;
/** A UUIDv7 made at `ms`, unique in this run (ids are time-ordered, as the store assumes). */
const idAt = (ms: number) => UUID.fromFieldsV7(ms, 0, 0, ++seq).toString();

async function addBucket(
  db: Kysely<Database>,
  name: string,
  o: { paused?: boolean; destination?: string | null; deletingAt?: number } = {},
) {
  await sql`insert into buckets (name, destination, max_body, paused, paused_at, created_at, updated_at, deleting_at)
    values (${name}, ${o.destination === undefined ? 'http://127.0.0.1:9/' : o.destination}, 1048576, ${o.paused ? 1 : 0},
      ${o.paused ? T0 : null}, ${T0}, ${T0}, ${o.deletingAt ?? null})`.execute(db);
}

async function addRequest(db: Kysely<Database>, bucket: string, receivedAt = T0, body: Buffer = Buffer.from('{}')): Promise<string> {
  const id = idAt(receivedAt);
  await sql`insert into requests (id, bucket, received_at, method, path, query, headers, body, size, sha256, peer)
    values (${id}, ${bucket}, ${receivedAt}, 'POST', '', null, '[]', ${body}, ${body.length},
      ${createHash('sha256').update(body).digest('hex')}, null)`.execute(db);
  return id;
}

interface DeliveryFixture {
  state: DeliveryState;
  generation?: number;
  destination?: string | null;
  latest?: number;
  settledAt?: number | null;
  leaseAttempt?: string | null;
}

async function addDelivery(db: Kysely<Database>, bucket: string, requestId: string, d: DeliveryFixture): Promise<string> {
  const id = newId();
  const settled =
    d.settledAt !== undefined ? d.settledAt : ['delivered', 'failed', 'exhausted', 'superseded'].includes(d.state) ? T0 : null;
  await sql`insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, trigger,
      created_at, updated_at, settled_at, latest, lease_attempt, lease_until)
    values (${id}, ${requestId}, ${bucket}, ${d.destination ?? null}, ${d.generation ?? 1}, ${d.state}, 0, ${T0}, 'initial',
      ${T0}, ${T0}, ${settled}, ${d.latest ?? (d.destination ? 0 : 1)}, ${d.leaseAttempt ?? null}, ${d.state === 'delivering' ? T0 + 60_000 : null})`.execute(
    db,
  );
  return id;
}

async function addAttempt(
  db: Kysely<Database>,
  bucket: string,
  requestId: string,
  deliveryId: string,
  a: { startedAt: number; durationMs: number | null; outcome: string | null; number?: number },
): Promise<string> {
  const id = newId();
  await sql`insert into attempts (id, delivery_id, request_id, bucket, number, url, started_at, duration_ms, outcome, response_truncated)
    values (${id}, ${deliveryId}, ${requestId}, ${bucket}, ${a.number ?? 1}, 'http://127.0.0.1:9/', ${a.startedAt}, ${a.durationMs},
      ${a.outcome}, 0)`.execute(db);
  return id;
}

type DeliveryRow = {
  id: string;
  generation: number;
  state: string;
  destination: string | null;
  latest: number;
  supersede_requested: number;
  settled_at: number | null;
  trigger: string;
  replay_id: string | null;
};
async function deliveriesOf(db: Kysely<Database>, requestId: string): Promise<DeliveryRow[]> {
  const { rows } =
    await sql<DeliveryRow>`select id, generation, state, destination, latest, supersede_requested, settled_at, trigger, replay_id
    from deliveries where request_id = ${requestId} order by generation, id`.execute(db);
  return rows;
}

async function count(
  db: Kysely<Database>,
  table: 'requests' | 'deliveries' | 'attempts' | 'replays' | 'rejections' | 'buckets',
  bucketColumn: string,
  bucket: string,
) {
  const { rows } = await sql<{
    n: number;
  }>`select count(*) as n from ${sql.table(table)} where ${sql.ref(bucketColumn)} = ${bucket}`.execute(db);
  return Number(rows[0]!.n);
}

async function epoch(db: Kysely<Database>): Promise<number> {
  const { rows } = await sql<{ value: number }>`select value from meta where key = 'bucket_epoch'`.execute(db);
  return Number(rows[0]!.value);
}

/** A LISTEN connection collecting notices on both channels. */
async function listen(url: string) {
  const client = new pg.Client({ connectionString: url });
  await client.connect();
  const notices: Array<{ channel: string; payload: string | undefined }> = [];
  client.on('notification', (n) => notices.push({ channel: n.channel, payload: n.payload }));
  await client.query(`listen ${REQUESTS_CHANNEL}`);
  await client.query(`listen ${BUCKETS_CHANNEL}`);
  return { notices, close: () => client.end() };
}

describe('PostgreSQL store operations: replay, stats, prune, delete', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
  let tdb: TestDatabase;
  let pool: pg.Pool;
  let db: Kysely<Database>;

  before(async () => {
    await sweepStaleTestDatabases(server!);
  });

  beforeEach(async () => {
    tdb = await createTestDatabase(server!);
    pool = createPgPool({
      url: tdb.url,
      max: 4,
      statementTimeoutMs: 30_000,
      idleInTransactionTimeoutMs: 30_000,
      connectTimeoutMs: 5_000,
      synchronousCommit: 'on',
      applicationName: 'hookbucket-test',
    });
    db = pgKysely(pool);
    await migratePostgres(db);
  });

  afterEach(async () => {
    await db.destroy();
    await tdb.drop();
  });

  describe('replay', () => {
    test('supersedes pending at once, marks a delivering one, keeps latest, lowers bucket_due and notifies', async () => {
      await addBucket(db, 'b');
      await addBucket(db, 'other');
      const pending = await addRequest(db, 'b');
      await addDelivery(db, 'b', pending, { state: 'pending' });
      const retrying = await addRequest(db, 'b');
      await addDelivery(db, 'b', retrying, { state: 'retrying' });
      const inFlight = await addRequest(db, 'b');
      await addDelivery(db, 'b', inFlight, { state: 'delivering', leaseAttempt: 'a1' });
      const delivered = await addRequest(db, 'b');
      await addDelivery(db, 'b', delivered, { state: 'delivered' });
      // A --to delivery of an earlier replay: never superseded by a replay to the bucket destination.
      await addDelivery(db, 'b', delivered, { state: 'pending', generation: 2, destination: 'http://elsewhere/' });
      const none = await addRequest(db, 'b');
      const foreign = await addRequest(db, 'other');
      await sql`insert into bucket_due (bucket, next_due_at) values ('b', ${T0 + 3_600_000})`.execute(db);

      const l = await listen(tdb.url);
      try {
        const now = T0 + 1_000;
        const replay = await createReplayAtCallerClock(db, {
          id: newId(),
          bucket: 'b',
          requestIds: [pending, retrying, inFlight, delivered, none, foreign, idAt(T0)],
          selection: { states: ['any'] },
          destination: null,
          rate: { count: 5, perMs: 1_000 },
          nowMs: now,
        });
        assert.equal(replay.total, 5);
        assert.equal(replay.superseded, 3);
        assert.deepEqual(replay.rate, { count: 5, perMs: 1_000 });
        assert.deepEqual(replay.selection, { states: ['any'] });
        assert.equal(replay.createdAt, now);

        const [p1, p2] = await deliveriesOf(db, pending);
        assert.deepEqual([p1!.state, p1!.latest, p1!.settled_at], ['superseded', 0, now]);
        assert.deepEqual([p2!.generation, p2!.state, p2!.latest, p2!.trigger, p2!.replay_id], [2, 'pending', 1, 'replay', replay.id]);
        const [r1] = await deliveriesOf(db, retrying);
        assert.equal(r1!.state, 'superseded');
        const [f1, f2] = await deliveriesOf(db, inFlight);
        assert.deepEqual([f1!.state, f1!.supersede_requested, f1!.latest, f1!.settled_at], ['delivering', 1, 0, null]);
        assert.deepEqual([f2!.generation, f2!.state, f2!.latest], [2, 'pending', 1]);
        const d = await deliveriesOf(db, delivered);
        // Generation counts every destination: the --to row was generation 2.
        assert.deepEqual(
          d.map((x) => [x.generation, x.state, x.destination, x.latest]),
          [
            [1, 'delivered', null, 0],
            [2, 'pending', 'http://elsewhere/', 0],
            [3, 'pending', null, 1],
          ],
        );
        assert.deepEqual(
          (await deliveriesOf(db, none)).map((x) => [x.generation, x.state, x.latest]),
          [[1, 'pending', 1]],
        );
        assert.equal((await deliveriesOf(db, foreign)).length, 0);

        const due = await sql<{ next_due_at: number }>`select next_due_at from bucket_due where bucket = 'b'`.execute(db);
        assert.equal(due.rows[0]!.next_due_at, now);
        await until(() => l.notices.some((n) => n.channel === REQUESTS_CHANNEL && n.payload === 'b'), 'the replay notice');
        assert.deepEqual(await pgGetReplay(db, replay.id), replay);
      } finally {
        await l.close();
      }
    });

    test('a --to replay supersedes nothing and leaves latest alone; bucket_due is not raised', async () => {
      await addBucket(db, 'b');
      const r = await addRequest(db, 'b');
      await addDelivery(db, 'b', r, { state: 'pending' });
      await sql`insert into bucket_due (bucket, next_due_at) values ('b', ${T0 - 5})`.execute(db);
      const replay = await createReplayAtCallerClock(db, {
        id: newId(),
        bucket: 'b',
        requestIds: [r],
        selection: {},
        destination: 'http://elsewhere/',
        rate: null,
        nowMs: T0 + 10,
      });
      assert.deepEqual([replay.total, replay.superseded, replay.rate], [1, 0, null]);
      assert.deepEqual(
        (await deliveriesOf(db, r)).map((x) => [x.generation, x.state, x.destination, x.latest]),
        [
          [1, 'pending', null, 1],
          [2, 'pending', 'http://elsewhere/', 0],
        ],
      );
      const due = await sql<{ next_due_at: number }>`select next_due_at from bucket_due where bucket = 'b'`.execute(db);
      assert.equal(due.rows[0]!.next_due_at, T0 - 5);
    });

    test('an id given twice gets two generations, the first superseded by the second (as SQLite per id)', async () => {
      await addBucket(db, 'b');
      const r = await addRequest(db, 'b');
      await addDelivery(db, 'b', r, { state: 'delivered' });
      const replay = await createReplayAtCallerClock(db, {
        id: newId(),
        bucket: 'b',
        requestIds: [r, r],
        selection: {},
        destination: null,
        rate: null,
        nowMs: T0,
      });
      assert.deepEqual([replay.total, replay.superseded], [2, 1]);
      assert.deepEqual(
        (await deliveriesOf(db, r)).map((x) => [x.generation, x.state, x.latest]),
        [
          [1, 'delivered', 0],
          [2, 'superseded', 0],
          [3, 'pending', 1],
        ],
      );
    });

    test('more than one batch: 1,201 requests in 500-request transactions', async () => {
      await addBucket(db, 'b');
      const ids: string[] = [];
      for (let i = 0; i < 1_201; i++) ids.push(idAt(T0 + i));
      await sql`insert into requests (id, bucket, received_at, method, path, headers, body, size, sha256)
        select id, 'b', ${T0}, 'POST', '', '[]', '\\x'::bytea, 0, '' from unnest(${ids}::text[]) as t(id)`.execute(db);
      await sql`insert into deliveries (id, request_id, bucket, generation, state, next_attempt_at, trigger, created_at, updated_at, latest)
        select 'd' || id, id, 'b', 1, 'pending', ${T0}, 'initial', ${T0}, ${T0}, 1 from unnest(${ids}::text[]) as t(id)`.execute(db);
      const replay = await createReplayAtCallerClock(db, {
        id: newId(),
        bucket: 'b',
        requestIds: ids,
        selection: {},
        destination: null,
        rate: null,
        nowMs: T0 + 1,
      });
      assert.deepEqual([replay.total, replay.superseded], [1_201, 1_201]);
      const live = await sql<{
        n: number;
      }>`select count(*) as n from deliveries where state = 'pending' and latest = 1 and generation = 2`.execute(db);
      assert.equal(live.rows[0]!.n, 1_201);
    });

    test('refuses a missing or deleting bucket', async () => {
      await addBucket(db, 'gone', { deletingAt: T0 });
      const input = { id: newId(), requestIds: [], selection: {}, destination: null, rate: null, nowMs: T0 };
      await assert.rejects(createReplayAtCallerClock(db, { ...input, bucket: 'nope' }), {
        code: 'not_found',
        message: 'bucket nope not found',
      });
      await assert.rejects(createReplayAtCallerClock(db, { ...input, bucket: 'gone' }), {
        code: 'bucket_deleting',
        message: 'bucket gone is being deleted; finish it with: hookbucket bucket delete gone',
      });
      assert.deepEqual(await pgListReplays(db, { limit: 10 }), []);
    });

    test('lists newest first (created_at, then id), by bucket, limited', async () => {
      await addBucket(db, 'a');
      await addBucket(db, 'b');
      const mk = (bucket: string, nowMs: number, id = newId()) =>
        createReplayAtCallerClock(db, { id, bucket, requestIds: [], selection: {}, destination: null, rate: null, nowMs });
      const x = await mk('a', T0 + 1, '00000000-0000-7000-8000-00000000000a');
      const y = await mk('a', T0 + 1, '00000000-0000-7000-8000-00000000000b');
      const z = await mk('b', T0 + 2);
      const w = await mk('a', T0);
      assert.deepEqual(
        (await pgListReplays(db, { limit: 10 })).map((r) => r.id),
        [z.id, y.id, x.id, w.id],
      );
      assert.deepEqual(
        (await pgListReplays(db, { bucket: 'a', limit: 2 })).map((r) => r.id),
        [y.id, x.id],
      );
      assert.equal(await pgGetReplay(db, 'missing'), undefined);
    });

    test('progress counts by state, waiting ones as held while the bucket is paused', async () => {
      await addBucket(db, 'b');
      const ids = [await addRequest(db, 'b'), await addRequest(db, 'b'), await addRequest(db, 'b'), await addRequest(db, 'b')];
      const replay = await createReplayAtCallerClock(db, {
        id: newId(),
        bucket: 'b',
        requestIds: ids,
        selection: {},
        destination: null,
        rate: null,
        nowMs: T0,
      });
      const mine = await sql<{ id: string }>`select id from deliveries where replay_id = ${replay.id} order by request_id`.execute(db);
      const [d0, d1, d2] = mine.rows.map((r) => r.id);
      await sql`update deliveries set state = 'delivered', settled_at = ${T0 + 50} where id = ${d0!}`.execute(db);
      await sql`update deliveries set state = 'failed', settled_at = ${T0 + 70} where id = ${d1!}`.execute(db);
      await sql`update deliveries set state = 'retrying' where id = ${d2!}`.execute(db);

      const base = { total: 4, delivering: 0, delivered: 1, failed: 1, exhausted: 0, superseded: 0, settled: 2, lastSettledAt: T0 + 70 };
      assert.deepEqual(await pgReplayProgress(db, replay.id), { ...base, pending: 1, retrying: 1, held: 0, paused: false });
      await sql`update buckets set paused = 1, paused_at = ${T0} where name = 'b'`.execute(db);
      assert.deepEqual(await pgReplayProgress(db, replay.id), { ...base, pending: 0, retrying: 0, held: 2, paused: true });
      assert.deepEqual(await pgReplayProgress(db, 'missing'), progress());
    });
  });

  describe('replay against a concurrent completion', () => {
    /** The drain's completion of an attempt that gets a retry (sqlite-drain.ts `retry`), on its own connection. */
    const completeSql = `update deliveries set state = case when supersede_requested = 1 then 'superseded' else 'retrying' end,
        settled_at = case when supersede_requested = 1 then $1::bigint else null end,
        next_attempt_at = $1::bigint + 1000, lease_until = null, lease_attempt = null, last_status = 503, updated_at = $1::bigint
      where id = $2 and lease_attempt = $3`;

    async function liveOwn(requestId: string): Promise<number> {
      const { rows } = await sql<{ n: number }>`select count(*) as n from deliveries where request_id = ${requestId}
        and destination is null and state in ('pending', 'retrying', 'delivering')`.execute(db);
      return Number(rows[0]!.n);
    }

    test('a replay waits for the delivery lock of a completion in progress, then supersedes what it committed', async () => {
      await addBucket(db, 'b');
      const r = await addRequest(db, 'b');
      const d = await addDelivery(db, 'b', r, { state: 'delivering', leaseAttempt: 'a1' });
      const completer = new pg.Client({ connectionString: tdb.url });
      await completer.connect();
      try {
        await completer.query('begin');
        await completer.query(completeSql, [T0 + 5, d, 'a1']);
        const replay = createReplayAtCallerClock(db, {
          id: newId(),
          bucket: 'b',
          requestIds: [r],
          selection: {},
          destination: null,
          rate: null,
          nowMs: T0 + 10,
        });
        await until(
          async () => {
            const { rows } = await sql<{ n: number }>`select count(*) as n from pg_stat_activity
            where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
            return Number(rows[0]!.n) > 0;
          },
          'the replay to wait for the delivery lock',
          10_000,
        );
        await completer.query('commit');
        const done = await replay;
        // The completion's `retrying` was superseded at once (it was no longer in flight).
        assert.deepEqual([done.total, done.superseded], [1, 1]);
        assert.deepEqual(
          (await deliveriesOf(db, r)).map((x) => [x.generation, x.state, x.latest]),
          [
            [1, 'superseded', 0],
            [2, 'pending', 1],
          ],
        );
        assert.equal(await liveOwn(r), 1);
      } finally {
        await completer.end();
      }
    });

    test('a batch chosen as a deadlock victim runs again and commits', async () => {
      await addBucket(db, 'b');
      const r = await addRequest(db, 'b');
      const d = await addDelivery(db, 'b', r, { state: 'delivering', leaseAttempt: 'a1' });
      await sql`insert into bucket_due (bucket, next_due_at) values ('b', null)`.execute(db);
      // A writer that takes the delivery first and bucket_due second: the other order from a replay's.
      const other = new pg.Client({ connectionString: tdb.url });
      await other.connect();
      try {
        await other.query('begin');
        // The replay's backend must be the one that looks for the cycle (after the server's
        // deadlock_timeout, 1 s by default) and so the victim: this one waits 30 s before looking.
        await other.query(`set local deadlock_timeout = '30s'`);
        await other.query(completeSql, [T0 + 5, d, 'a1']);
        const replay = createReplayAtCallerClock(db, {
          id: newId(),
          bucket: 'b',
          requestIds: [r],
          selection: {},
          destination: null,
          rate: null,
          nowMs: T0 + 10,
        });
        await until(
          async () => {
            const { rows } = await sql<{
              n: number;
            }>`select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
            return Number(rows[0]!.n) > 0;
          },
          'the replay to wait for the delivery lock',
          10_000,
        );
        await other.query(`update bucket_due set next_due_at = $1 where bucket = 'b'`, [T0 + 1_000]);
        await other.query('commit');
        const done = await replay;
        assert.equal(done.total, 1);
        assert.equal(await liveOwn(r), 1);
        assert.deepEqual(
          (await deliveriesOf(db, r)).map((x) => [x.generation, x.state, x.latest]),
          [
            [1, 'superseded', 0],
            [2, 'pending', 1],
          ],
        );
      } finally {
        await other.end();
      }
    });

    test('20 rounds of a replay racing a completion on the same delivery never leave two live generations', async () => {
      await addBucket(db, 'b');
      const completer = new pg.Client({ connectionString: tdb.url });
      await completer.connect();
      try {
        for (let round = 0; round < 20; round++) {
          const r = await addRequest(db, 'b');
          const d = await addDelivery(db, 'b', r, { state: 'delivering', leaseAttempt: `a${round}` });
          const complete = (async () => {
            await completer.query('begin');
            // Vary which side gets the lock first.
            if (round % 2 === 1) await completer.query('select pg_sleep(0.002)');
            await completer.query(completeSql, [T0 + 5, d, `a${round}`]);
            await completer.query('commit');
          })();
          const replay = createReplayAtCallerClock(db, {
            id: newId(),
            bucket: 'b',
            requestIds: [r],
            selection: {},
            destination: null,
            rate: null,
            nowMs: T0 + 10,
          });
          const [, done] = await Promise.all([complete, replay]);
          assert.equal(await liveOwn(r), 1, `round ${round}: one live generation`);
          const rows = await deliveriesOf(db, r);
          assert.deepEqual(
            rows.map((x) => [x.generation, x.latest]),
            [
              [1, 0],
              [2, 1],
            ],
          );
          // Whichever order they committed in, generation 1 ends superseded and counts once.
          assert.equal(rows[0]!.state, 'superseded', `round ${round}`);
          assert.equal(done.superseded, 1);
        }
      } finally {
        await completer.end();
      }
    });
  });

  describe('stats', () => {
    test('samples a window: requests, latest states, superseded, oldest waiting, settled, attempts, rejections', async () => {
      const since = T0;
      const until = T0 + 60_000;
      await addBucket(db, 'a');
      await addBucket(db, 'p', { paused: true });
      await addBucket(db, 'z', { deletingAt: T0 });

      const before = await addRequest(db, 'a', since - 10_000); // stored before the window
      const dBefore = await addDelivery(db, 'a', before, { state: 'delivered', settledAt: since + 5 });
      const inside1 = await addRequest(db, 'a', since + 1_000);
      await addDelivery(db, 'a', inside1, { state: 'superseded', latest: 0 });
      const d1 = await addDelivery(db, 'a', inside1, { state: 'retrying', generation: 2 });
      const inside2 = await addRequest(db, 'a', since + 2_000);
      const d2 = await addDelivery(db, 'a', inside2, { state: 'failed', settledAt: until }); // settles at the window's end: outside
      const inside3 = await addRequest(db, 'a', since + 3_000);
      await addDelivery(db, 'a', inside3, { state: 'pending' });
      await addDelivery(db, 'a', inside3, { state: 'delivered', generation: 2, destination: 'http://to/', settledAt: since + 9 }); // --to: left out
      await addRequest(db, 'a', until); // at the end: outside

      await addAttempt(db, 'a', before, dBefore, { startedAt: since + 1, durationMs: 20, outcome: 'delivered' });
      await addAttempt(db, 'a', inside1, d1, { startedAt: since + 2, durationMs: 20, outcome: 'delivered' });
      await addAttempt(db, 'a', inside1, d1, { startedAt: since + 3, durationMs: 35, outcome: 'retry' });
      await addAttempt(db, 'a', inside1, d1, { startedAt: since + 4, durationMs: null, outcome: 'lease_expired' });
      await addAttempt(db, 'a', inside1, d1, { startedAt: since + 5, durationMs: 5, outcome: 'released' }); // not finished
      await addAttempt(db, 'a', inside1, d1, { startedAt: since + 6, durationMs: null, outcome: null }); // in flight
      await addAttempt(db, 'a', inside2, d2, { startedAt: since - 1, durationMs: 20, outcome: 'failed' }); // before the window

      const held = await addRequest(db, 'p', since + 500);
      await addDelivery(db, 'p', held, { state: 'pending' });
      const zReq = await addRequest(db, 'z', since + 500);
      await addDelivery(db, 'z', zReq, { state: 'pending' });

      await sql`insert into rejections (bucket, reason, count, last_at) values ('a', 'too_large', 3, ${T0}), ('', 'unknown_bucket', 7, ${T0}), ('p', 'paused', 1, ${T0})`.execute(
        db,
      );

      const all = await pgStatsSamples(db, { sinceMs: since, untilMs: until });
      assert.deepEqual(all.unattributedRejections, { unknown_bucket: 7 });
      assert.deepEqual(
        all.buckets.map((b) => b.bucket),
        ['a', 'p'],
        'a deleting bucket is left out when none is named',
      );
      assert.deepEqual(all.buckets[0], {
        bucket: 'a',
        paused: false,
        requests: 5,
        latest: { delivered: 1, retrying: 1, failed: 1, pending: 1 },
        superseded: 1,
        oldestWaitingAt: since + 1_000,
        receivedInWindow: 3,
        settled: { delivered: 1, failed: 0, exhausted: 0 },
        attempts: [
          { durationMs: null, delivered: false, count: 1 },
          { durationMs: 20, delivered: true, count: 2 },
          { durationMs: 35, delivered: false, count: 1 },
        ],
        rejected: { too_large: 3 },
        deferred: {},
        dispositions: {},
      });
      assert.deepEqual(all.buckets[1], {
        bucket: 'p',
        paused: true,
        requests: 1,
        latest: { pending: 1 },
        superseded: 0,
        oldestWaitingAt: since + 500,
        receivedInWindow: 1,
        settled: { delivered: 0, failed: 0, exhausted: 0 },
        attempts: [],
        rejected: { paused: 1 },
        deferred: {},
        dispositions: {},
      });

      const named = await pgStatsSamples(db, { bucket: 'z', sinceMs: since, untilMs: until });
      assert.deepEqual(
        named.buckets.map((b) => [b.bucket, b.requests, b.latest]),
        [['z', 1, { pending: 1 }]],
      );
      await assert.rejects(pgStatsSamples(db, { bucket: 'nope', sinceMs: since, untilMs: until }), {
        code: 'not_found',
        message: 'bucket nope not found',
      });
    });
  });

  describe('prune', () => {
    const cutoff = T0 + 1_000_000;

    test('dry run counts, deletes nothing; a live delivery keeps its request; the real run deletes children first', async () => {
      await addBucket(db, 'b');
      const old1 = await addRequest(db, 'b', T0, Buffer.from('12345'));
      const o1 = await addDelivery(db, 'b', old1, { state: 'delivered' });
      await addAttempt(db, 'b', old1, o1, { startedAt: T0, durationMs: 3, outcome: 'retry' });
      await addAttempt(db, 'b', old1, o1, { startedAt: T0 + 1, durationMs: 3, outcome: 'delivered', number: 2 });
      // Delivered, but a --to replay of it is still pending: live, kept.
      const oldLive = await addRequest(db, 'b', T0 + 1, Buffer.from('abc'));
      await addDelivery(db, 'b', oldLive, { state: 'delivered' });
      await addDelivery(db, 'b', oldLive, { state: 'pending', generation: 2, destination: 'http://to/' });
      const oldFailed = await addRequest(db, 'b', T0 + 2, Buffer.from('xy'));
      await addDelivery(db, 'b', oldFailed, { state: 'failed' });
      const young = await addRequest(db, 'b', cutoff, Buffer.from('young'));
      await addDelivery(db, 'b', young, { state: 'delivered' });
      // State none: no delivery to the bucket destination (only a --to one, settled).
      const noneOld = await addRequest(db, 'b', T0 + 3, Buffer.from('n'));
      await addDelivery(db, 'b', noneOld, { state: 'delivered', destination: 'http://to/' });

      const options = { bucket: 'b', receivedBeforeMs: cutoff, states: ['delivered', 'none'] as const, dryRun: true };
      const dry = await pgPrune(db, options);
      const expected = { requests: 2, bytes: 6, deliveries: 2, attempts: 2, keptLive: 1 };
      assert.deepEqual(dry, { ...expected, buckets: { b: expected }, reclaimedBytes: 0, dedupKeys: 0 });
      assert.equal(await count(db, 'requests', 'bucket', 'b'), 5);

      const progress: number[] = [];
      const real = await pgPrune(db, { ...options, dryRun: false }, { onProgress: (p) => progress.push(p.requests) });
      assert.deepEqual(real, dry);
      assert.deepEqual(progress, [1, 2]);
      const left = await sql<{ id: string }>`select id from requests order by id`.execute(db);
      assert.deepEqual(
        left.rows.map((r) => r.id),
        [oldLive, oldFailed, young],
      );
      assert.equal(await count(db, 'attempts', 'bucket', 'b'), 0);
      await assert.rejects(pgPrune(db, { ...options, bucket: 'nope' }), { code: 'not_found', message: 'bucket nope not found' });
    });

    test('walks in batches of 500 requests and of 8 MiB of bodies, every bucket when none is named', async () => {
      await addBucket(db, 'many');
      await addBucket(db, 'big');
      const ids: string[] = [];
      for (let i = 0; i < 1_100; i++) ids.push(idAt(T0 + i));
      await sql`insert into requests (id, bucket, received_at, method, path, headers, body, size, sha256)
        select id, 'many', ${T0}, 'POST', '', '[]', '\\x00'::bytea, 1, '' from unnest(${ids}::text[]) as t(id)`.execute(db);
      await sql`insert into deliveries (id, request_id, bucket, generation, state, next_attempt_at, trigger, created_at, updated_at, settled_at, latest)
        select 'd' || id, id, 'many', 1, 'delivered', ${T0}, 'initial', ${T0}, ${T0}, ${T0}, 1 from unnest(${ids}::text[]) as t(id)`.execute(
        db,
      );
      // Five 3 MiB bodies: two fit in 8 MiB, so three batches (2, 2, 1).
      const body = Buffer.alloc(3 * 1024 * 1024, 7);
      for (let i = 0; i < 5; i++) {
        const r = await addRequest(db, 'big', T0 + i, body);
        await addDelivery(db, 'big', r, { state: 'delivered' });
      }
      const seen: Array<[string, number]> = [];
      const result = await pgPrune(
        db,
        { receivedBeforeMs: cutoff, states: ['delivered'], dryRun: false },
        { onProgress: (p) => seen.push([p.bucket, p.requests]) },
      );
      assert.deepEqual(seen, [
        ['big', 2],
        ['big', 4],
        ['big', 5],
        ['many', 505],
        ['many', 1_005],
        ['many', 1_105],
      ]);
      assert.equal(result.requests, 1_105);
      assert.equal(result.buckets.many!.bytes, 1_100);
      assert.equal(result.buckets.big!.bytes, 5 * body.length);
      assert.equal(result.reclaimedBytes, 0);
      const left = await sql<{ n: number }>`select (select count(*) from requests) + (select count(*) from deliveries) as n`.execute(db);
      assert.equal(left.rows[0]!.n, 0);
    });

    test('stops between batches when the signal aborts', async () => {
      await addBucket(db, 'b');
      const r = await addRequest(db, 'b');
      await addDelivery(db, 'b', r, { state: 'delivered' });
      const ac = new AbortController();
      ac.abort();
      const result = await pgPrune(
        db,
        { bucket: 'b', receivedBeforeMs: cutoff, states: ['delivered'], dryRun: false },
        { signal: ac.signal },
      );
      assert.equal(result.requests, 0);
      assert.equal(await count(db, 'requests', 'bucket', 'b'), 1);
    });
    test('a replay committing while a batch waits for its requests is seen: the request is kept, nothing fails', async () => {
      await addBucket(db, 'b');
      const r = await addRequest(db, 'b');
      await addDelivery(db, 'b', r, { state: 'delivered' });
      // A replay in progress on another connection: the request locked as pg-replay.ts does, a new
      // pending generation inserted, not committed yet.
      const replayer = new pg.Client({ connectionString: tdb.url });
      await replayer.connect();
      try {
        await replayer.query('begin');
        await replayer.query('select id from requests where id = $1 for no key update', [r]);
        await replayer.query(
          `insert into deliveries (id, request_id, bucket, generation, state, next_attempt_at, trigger, created_at, updated_at, latest)
           values ($1, $2, 'b', 2, 'pending', $3, 'replay', $3, $3, 1)`,
          [newId(), r, T0],
        );
        const pruning = pgPrune(db, { bucket: 'b', receivedBeforeMs: cutoff, states: ['delivered'], dryRun: false });
        await until(
          async () => {
            const { rows } = await sql<{
              n: number;
            }>`select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
            return Number(rows[0]!.n) > 0;
          },
          'the prune batch to wait for the request lock',
          10_000,
        );
        await replayer.query('commit');
        const result = await pruning;
        assert.deepEqual([result.requests, result.keptLive], [0, 1]);
        assert.equal(await count(db, 'requests', 'bucket', 'b'), 1);
      } finally {
        await replayer.end();
      }
    });
  });

  describe('delete', () => {
    async function fill(bucket: string, n: number, state: DeliveryState) {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) ids.push(idAt(T0 + i));
      await sql`insert into requests (id, bucket, received_at, method, path, headers, body, size, sha256)
        select id, ${bucket}, ${T0}, 'POST', '', '[]', '\\x00'::bytea, 1, '' from unnest(${ids}::text[]) as t(id)`.execute(db);
      await sql`insert into deliveries (id, request_id, bucket, generation, state, next_attempt_at, trigger, created_at, updated_at, latest)
        select 'd' || id, id, ${bucket}, 1, ${state}, ${T0}, 'initial', ${T0}, ${T0}, 1 from unnest(${ids}::text[]) as t(id)`.execute(db);
      await sql`insert into attempts (id, delivery_id, request_id, bucket, number, url, started_at, response_truncated)
        select 'a' || id, 'd' || id, id, ${bucket}, 1, 'http://x/', ${T0}, 0 from unnest(${ids}::text[]) as t(id)`.execute(db);
      return ids;
    }

    test('refuses undelivered work unless forced, and names a missing bucket', async () => {
      await addBucket(db, 'b');
      await fill('b', 2, 'pending');
      const e0 = await epoch(db);
      await assert.rejects(pgDeleteBucket(db, 'b', { force: false }, T0), {
        code: 'bucket_not_empty',
        message: 'bucket b has 2 undelivered request(s); use --force to delete them too',
      });
      const row = await sql<{ deleting_at: number | null }>`select deleting_at from buckets where name = 'b'`.execute(db);
      assert.equal(row.rows[0]!.deleting_at, null, 'no tombstone after a refusal');
      assert.equal(await epoch(db), e0);
      await assert.rejects(pgDeleteBucket(db, 'nope', { force: false }, T0), { code: 'not_found', message: 'bucket nope not found' });
    });

    test('force: tombstone, then the purge in 500-request batches, children first; the name is free', async () => {
      await addBucket(db, 'b');
      await addBucket(db, 'keep');
      await fill('b', 1_100, 'retrying');
      const kept = await addRequest(db, 'keep');
      await addDelivery(db, 'keep', kept, { state: 'pending' });
      await sql`insert into replays (id, bucket, selection, total, superseded, created_at) values ('rp', 'b', '{}', 0, 0, ${T0})`.execute(
        db,
      );
      await sql`insert into rejections (bucket, reason, count, last_at) values ('b', 'too_large', 1, ${T0})`.execute(db);
      const e0 = await epoch(db);
      const l = await listen(tdb.url);
      try {
        const t = Date.now();
        assert.deepEqual(await pgDeleteBucket(db, 'b', { force: true }, T0 + 5), { requests: 1_100 });
        // Three batches of requests and a last one that removes the tombstone: three 100 ms gaps.
        assert.ok(Date.now() - t >= 300, 'the purge pauses between batches');
        for (const table of ['requests', 'deliveries', 'attempts', 'replays', 'rejections'] as const) {
          assert.equal(await count(db, table, 'bucket', 'b'), 0, table);
        }
        assert.equal(await count(db, 'buckets', 'name', 'b'), 0);
        assert.equal(await count(db, 'requests', 'bucket', 'keep'), 1);
        assert.equal(await epoch(db), e0 + 2, 'bumped by the tombstone and by its removal');
        await until(() => l.notices.filter((n) => n.channel === BUCKETS_CHANNEL && n.payload === 'b').length === 2, 'two bucket notices');
      } finally {
        await l.close();
      }
    });

    test('a tombstone left by a stopped purge: delete finishes it without --force; replay refuses it meanwhile', async () => {
      await addBucket(db, 'b', { deletingAt: T0 });
      await fill('b', 3, 'pending');
      await assert.rejects(
        createReplayAtCallerClock(db, {
          id: newId(),
          bucket: 'b',
          requestIds: [],
          selection: {},
          destination: null,
          rate: null,
          nowMs: T0,
        }),
        { code: 'bucket_deleting' },
      );
      const e0 = await epoch(db);
      assert.deepEqual(await pgDeleteBucket(db, 'b', { force: false }, T0 + 9), { requests: 3 });
      assert.equal(await count(db, 'buckets', 'name', 'b'), 0);
      assert.equal(await epoch(db), e0 + 1, 'only the removal bumps (the tombstone was there)');
    });

    test('the tombstone waits for an ingest commit in flight and counts its work', async () => {
      await addBucket(db, 'b');
      const ingest = new pg.Client({ connectionString: tdb.url });
      await ingest.connect();
      try {
        await ingest.query('begin');
        const id = idAt(T0);
        await ingest.query(
          `insert into requests (id, bucket, received_at, method, path, headers, body, size, sha256) values ($1, 'b', $2, 'POST', '', '[]', '\\x'::bytea, 0, '')`,
          [id, T0],
        );
        await ingest.query(
          `insert into deliveries (id, request_id, bucket, generation, state, next_attempt_at, trigger, created_at, updated_at, latest)
           values ($1, $2, 'b', 1, 'pending', $3, 'initial', $3, $3, 1)`,
          [newId(), id, T0],
        );
        const deleting = pgDeleteBucket(db, 'b', { force: false }, T0);
        await until(
          async () => {
            const { rows } = await sql<{
              n: number;
            }>`select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(db);
            return Number(rows[0]!.n) > 0;
          },
          'the tombstone to wait for the bucket row',
          10_000,
        );
        await ingest.query('commit');
        await assert.rejects(deleting, {
          code: 'bucket_not_empty',
          message: 'bucket b has 1 undelivered request(s); use --force to delete them too',
        });
      } finally {
        await ingest.end();
      }
    });

    test('a purge that stops on a storage error leaves the tombstone and says how to finish', async () => {
      await addBucket(db, 'b');
      const [first] = await fill('b', 3, 'delivered');
      // Statements give up after 300 ms on this pool; another connection holds one request row.
      const shortPool = createPgPool({
        url: tdb.url,
        max: 2,
        statementTimeoutMs: 300,
        idleInTransactionTimeoutMs: 30_000,
        connectTimeoutMs: 5_000,
        synchronousCommit: 'on',
        applicationName: 'hookbucket-test',
      });
      const short = pgKysely(shortPool);
      const holder = new pg.Client({ connectionString: tdb.url });
      await holder.connect();
      try {
        await holder.query('begin');
        await holder.query('select 1 from requests where id = $1 for update', [first]);
        await assert.rejects(pgDeleteBucket(short, 'b', { force: false }, T0), (e: { code?: string; message?: string }) => {
          assert.equal(e.code, 'store_busy');
          assert.equal(
            e.message,
            'bucket b is deleting; the purge stopped after 0 request(s) with 3 left (canceling statement due to statement timeout): ' +
              'nothing of it is stored or sent any more; run hookbucket bucket delete b again to finish (a running serve also finishes it in the background)',
          );
          return true;
        });
        await holder.query('rollback');
      } finally {
        await holder.end();
        await short.destroy();
      }
      const row = await sql<{ deleting_at: number | null }>`select deleting_at from buckets where name = 'b'`.execute(db);
      assert.equal(row.rows[0]!.deleting_at, T0);
      assert.deepEqual(await pgDeleteBucket(db, 'b', { force: false }, T0 + 1), { requests: 3 });
      assert.equal(await count(db, 'buckets', 'name', 'b'), 0);
    });

    test('purgeDeleting finishes every tombstone, oldest first, and stops on a lock held past lockWaitMs', async () => {
      await addBucket(db, 'later', { deletingAt: T0 + 2 });
      await addBucket(db, 'first', { deletingAt: T0 + 1 });
      await addBucket(db, 'live');
      await fill('later', 2, 'delivered');
      await fill('first', 2, 'pending');
      await fill('live', 1, 'pending');

      // Another connection holds the bucket row of `first`: the batch waits 50 ms and gives up.
      const holder = new pg.Client({ connectionString: tdb.url });
      await holder.connect();
      try {
        await holder.query('begin');
        await holder.query(`select 1 from buckets where name = 'first' for update`);
        const stopped = await pgPurgeDeleting(db, { lockWaitMs: 50 }, T0);
        assert.deepEqual([stopped.finished, stopped.requests, stopped.bytes], [[], 0, 0]);
        assert.match(stopped.stopped ?? '', /lock timeout/);
        await holder.query('rollback');
      } finally {
        await holder.end();
      }
      assert.equal(await count(db, 'requests', 'bucket', 'first'), 2, 'the tombstone and its rows stand');

      const done = await pgPurgeDeleting(db, { lockWaitMs: 1_000 }, T0);
      assert.deepEqual(done, { finished: ['first', 'later'], requests: 4, bytes: 4 });
      const names = await sql<{ name: string }>`select name from buckets order by name`.execute(db);
      assert.deepEqual(
        names.rows.map((r) => r.name),
        ['live'],
      );
      assert.equal(await count(db, 'requests', 'bucket', 'live'), 1);
      assert.deepEqual(await pgPurgeDeleting(db, undefined, T0), { finished: [], requests: 0, bytes: 0 });
    });

    test('purgeDeleting stops when the signal aborts, the tombstone standing', async () => {
      await addBucket(db, 'b', { deletingAt: T0 });
      await fill('b', 1, 'pending');
      const ac = new AbortController();
      ac.abort();
      assert.deepEqual(await pgPurgeDeleting(db, { signal: ac.signal }, T0), { finished: [], requests: 0, bytes: 0 });
      assert.equal(await count(db, 'buckets', 'name', 'b'), 1);
    });
  });
});

import assert from 'node:assert/strict';
import { after, afterEach, before, describe, test } from 'node:test';
import { sql, type Kysely } from 'kysely';
import { createDeliveryAgent } from '../../../src/drain/forward.js';
import { DrainWorker } from '../../../src/drain/worker.js';
import { silentLogger } from '../../../src/shared/logger.js';
import { PgChangeFeed } from '../../../src/store/postgres/pg-change-feed.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { createPgPool, pgKysely } from '../../../src/store/postgres/pg-pool.js';
import { PgDrainStore } from '../../../src/store/postgres/pg-drain.js';
import { BUCKETS_CHANNEL, REQUESTS_CHANNEL } from '../../../src/store/postgres/pg-notify.js';
import type { Database } from '../../../src/store/schema.js';
import type { AttemptResult, Bucket, ClaimPolicyState } from '../../../src/store/store.js';
import { startConsumer } from '../../helpers/consumer.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases, type TestDatabase } from '../../helpers/pg-database.js';

// The PostgreSQL drain store against a real database: rows go in through SQL, the store's
// methods are called directly (the worker's calls), and the rows are read back. A manual clock
// replaces the database clock except where the database clock itself is under test.

const server = pgTestServer();
const T0 = Date.UTC(2026, 11, 2, 12);
const LEASE = 60_000;
const DEST = 'http://127.0.0.1:9/hooks';

interface Fixture {
  clock: ManualClock;
  store: PgDrainStore;
  admin: Kysely<Database>;
  url: string;
  bucket(name: string): Promise<Bucket>;
}

const policy = (): ClaimPolicyState => ({});

/** A bucket row with the defaults of the migrations plus what is given. */
async function addBucket(db: Kysely<Database>, name: string, cols: Record<string, unknown> = {}): Promise<void> {
  const row = { name, destination: DEST, max_body: 1_048_576, created_at: T0, updated_at: T0, ...cols };
  await db
    .insertInto('buckets')
    .values(row as any)
    .execute();
}

/** A request with one delivery, and the bucket's due time lowered as ingest does. */
async function addDelivery(
  db: Kysely<Database>,
  bucket: string,
  n: number,
  cols: { nextAt?: number; state?: string; attempts?: number; path?: string; destination?: string | null; replayId?: string } = {},
): Promise<string> {
  const id = `d-${bucket}-${String(n).padStart(3, '0')}`;
  const rid = `r-${bucket}-${String(n).padStart(3, '0')}`;
  const nextAt = cols.nextAt ?? T0;
  await db
    .insertInto('requests')
    .values({
      id: rid,
      bucket,
      received_at: T0,
      method: 'POST',
      path: cols.path ?? '/evt',
      query: 'a=1',
      headers: JSON.stringify(['content-type', 'application/json']),
      body: Buffer.from(`{"n":${n}}`),
      size: 7,
      sha256: 'x',
      peer: null,
      trailers: null,
    })
    .execute();
  await db
    .insertInto('deliveries')
    .values({
      id,
      request_id: rid,
      bucket,
      destination: cols.destination ?? null,
      generation: 1,
      state: (cols.state ?? 'pending') as any,
      attempts: cols.attempts ?? 0,
      next_attempt_at: nextAt,
      trigger: cols.replayId ? 'replay' : 'initial',
      replay_id: cols.replayId ?? null,
      created_at: T0,
      updated_at: T0,
    } as any)
    .execute();
  await sql`insert into bucket_due (bucket, next_due_at) values (${bucket}, ${nextAt}) on conflict (bucket) do update set next_due_at = excluded.next_due_at
    where bucket_due.next_due_at is null or bucket_due.next_due_at > excluded.next_due_at`.execute(db);
  return id;
}

const delivery = async (db: Kysely<Database>, id: string) =>
  db.selectFrom('deliveries').selectAll().where('id', '=', id).executeTakeFirstOrThrow();
const attemptsOf = async (db: Kysely<Database>, id: string) =>
  db.selectFrom('attempts').selectAll().where('delivery_id', '=', id).orderBy('number').execute();
const dueAt = async (db: Kysely<Database>, bucket: string) =>
  (await sql<{ next_due_at: number | null }>`select next_due_at from bucket_due where bucket = ${bucket}`.execute(db)).rows[0]?.next_due_at;

function result(
  a: { attemptId: string; deliveryId: string },
  at: number,
  outcome: AttemptResult['outcome'],
  extra: Partial<AttemptResult> = {},
): AttemptResult {
  return {
    attemptId: a.attemptId,
    deliveryId: a.deliveryId,
    finishedAt: at,
    durationMs: 12,
    status: outcome === 'delivered' ? 200 : outcome === 'released' ? null : 503,
    errorClass: null,
    errorMessage: null,
    responseHeaders: ['x', 'y'],
    responseBody: outcome === 'released' ? null : Buffer.from('ok'),
    responseTruncated: false,
    outcome,
    reason: outcome === 'delivered' ? '2xx' : outcome === 'released' ? 'released_on_shutdown' : 'status 503',
    nextAttemptAt: null,
    nextWhy: null,
    ...extra,
  };
}

/** Waits for `cond` with a bounded number of short waits (events from another connection). */
async function until(cond: () => boolean, what: string, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

describe('PostgreSQL drain store', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
  const open: Array<() => Promise<void>> = [];
  before(async () => {
    await sweepStaleTestDatabases(server!);
  });
  afterEach(async () => {
    while (open.length > 0) await open.pop()!();
  });
  after(async () => {
    while (open.length > 0) await open.pop()!();
  });

  async function fixture(options: { databaseClock?: boolean; listen?: boolean } = {}): Promise<Fixture> {
    const tdb: TestDatabase = await createTestDatabase(server!);
    open.push(() => tdb.drop());
    const clock = new ManualClock(T0);
    const store = await PgDrainStore.open({ url: tdb.url, useCallerClock: !options.databaseClock, listen: options.listen ?? false });
    open.push(() => store.close());
    const admin = pgKysely(
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
    open.push(() => admin.destroy());
    return {
      clock,
      store,
      admin,
      url: tdb.url,
      async bucket(name) {
        const b = (await store.listBuckets()).find((x) => x.name === name);
        assert.ok(b, `bucket ${name}`);
        return b;
      },
    };
  }

  test('claims due deliveries in due order up to the limit, with lease, attempt rows and bucket_due in step', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'b');
    const ids = [];
    for (let i = 0; i < 5; i++) ids.push(await addDelivery(f.admin, 'b', i, { nextAt: T0 - 5000 + (4 - i) * 1000 }));
    const later = await addDelivery(f.admin, 'b', 9, { nextAt: T0 + 30_000 });
    const b = await f.bucket('b');

    const first = await f.store.claim(b, { nowMs: T0, limit: 3, leaseUntilMs: T0 + LEASE }, policy());
    // Due order: the latest-inserted has the earliest next_attempt_at.
    assert.deepEqual(
      first.claimed.map((a) => a.deliveryId),
      [ids[4], ids[3], ids[2]],
    );
    const a = first.claimed[0]!;
    assert.equal(a.url, `${DEST}/evt?a=1`);
    assert.deepEqual(a.target, { origin: 'http://127.0.0.1:9', path: '/hooks/evt?a=1' });
    assert.equal(a.number, 1);
    assert.equal(a.startedAt, T0);
    assert.equal(a.firstAttemptAt, T0);
    assert.deepEqual(a.rawHeaders, ['content-type', 'application/json']);
    assert.equal(a.body.toString(), '{"n":4}');
    const d = await delivery(f.admin, ids[4]!);
    assert.equal(d.state, 'delivering');
    assert.equal(d.attempts, 1);
    assert.equal(d.lease_until, T0 + LEASE);
    assert.equal(d.lease_attempt, a.attemptId);
    assert.equal(d.first_attempt_at, T0);
    const [row] = await attemptsOf(f.admin, ids[4]!);
    assert.equal(row!.id, a.attemptId);
    assert.equal(row!.started_at, T0);
    assert.equal(row!.url, a.url);
    assert.equal(row!.outcome, null);
    // Stopped at its limit with due rows left: the bucket stays due.
    assert.equal(await dueAt(f.admin, 'b'), T0 - 2000);

    const second = await f.store.claim(b, { nowMs: T0, limit: 10, leaseUntilMs: T0 + LEASE }, policy());
    assert.deepEqual(
      second.claimed.map((x) => x.deliveryId),
      [ids[1], ids[0]],
    );
    // Only the later one waits: the bucket is due when it is.
    assert.equal(await dueAt(f.admin, 'b'), T0 + 30_000);
    assert.equal((await delivery(f.admin, later)).state, 'pending');
    // Nothing due: nothing claimed, and the due time is unchanged.
    assert.equal((await f.store.claim(b, { nowMs: T0, limit: 10, leaseUntilMs: T0 + LEASE }, policy())).claimed.length, 0);
    assert.equal(await dueAt(f.admin, 'b'), T0 + 30_000);
  });

  test('a deleting bucket, or one deleted and made anew, gives nothing', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'b');
    await addDelivery(f.admin, 'b', 1, { nextAt: T0 });
    const b = await f.bucket('b');
    assert.equal(
      (await f.store.claim({ ...b, createdAt: b.createdAt - 1 }, { nowMs: T0, limit: 5, leaseUntilMs: T0 + LEASE }, policy())).claimed
        .length,
      0,
    );
    await f.admin.updateTable('buckets').set({ deleting_at: T0 }).where('name', '=', 'b').execute();
    assert.equal((await f.store.claim(b, { nowMs: T0, limit: 5, leaseUntilMs: T0 + LEASE }, policy())).claimed.length, 0);
    assert.equal((await f.store.listBuckets()).length, 0);
  });

  test('the admission decider defers on rate and Retry-After, recorded once on the head of the line', async () => {
    const f = await fixture();
    // 1/s, burst 1: one attempt now, the next a second later.
    await addBucket(f.admin, 'r', { rate_count: 1, rate_per_ms: 1000, burst: 1 });
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(await addDelivery(f.admin, 'r', i, { nextAt: T0 - 10 + i }));
    const b = await f.bucket('r');
    const r = await f.store.claim(b, { nowMs: T0, limit: 10, leaseUntilMs: T0 + LEASE }, policy());
    assert.deepEqual(
      r.claimed.map((a) => a.deliveryId),
      [ids[0]],
    );
    assert.deepEqual(r.verdict.deferred, { rate: 1 });
    assert.equal(r.verdict.wakeAt, T0 + 1000);
    const head = await delivery(f.admin, ids[1]!);
    assert.equal(head.deferrals, 1);
    assert.equal(head.last_deferral_reason, 'rate');
    assert.equal((await delivery(f.admin, ids[2]!)).deferrals, 0);
    assert.equal(await dueAt(f.admin, 'r'), T0 - 9);

    // The next claim finds the tokens in the pacer row the first one wrote: a second later, one more.
    f.clock.advance(1000);
    const r2 = await f.store.claim(b, { nowMs: T0 + 1000, limit: 10, leaseUntilMs: T0 + 1000 + LEASE }, policy());
    assert.deepEqual(
      r2.claimed.map((a) => a.deliveryId),
      [ids[1]],
    );

    // A bucket-wide Retry-After block in the pacer row: nothing claimed, the head of the line deferred.
    await sql`update bucket_pacer set blocked_until = ${T0 + 60_000} where bucket = 'r'`.execute(f.admin);
    const r3 = await f.store.claim(b, { nowMs: T0 + 1000, limit: 10, leaseUntilMs: T0 + 1000 + LEASE }, policy());
    assert.equal(r3.claimed.length, 0);
    assert.deepEqual(r3.verdict.deferred, { retry_after: 1 });
    assert.equal((await delivery(f.admin, ids[2]!)).last_deferral_reason, 'retry_after');
  });

  test('a replay with its own rate is paced by it; the limit stands for the free slots (concurrency)', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'p', { concurrency: 3 });
    await f.admin
      .insertInto('replays')
      .values({
        id: 'rp',
        bucket: 'p',
        selection: '{}',
        destination: null,
        rate_count: 1,
        rate_per_ms: 60_000,
        total: 2,
        superseded: 0,
        created_at: T0,
      } as any)
      .execute();
    const ids = [];
    for (let i = 0; i < 2; i++) ids.push(await addDelivery(f.admin, 'p', i, { nextAt: T0, replayId: 'rp' }));
    for (let i = 2; i < 5; i++) ids.push(await addDelivery(f.admin, 'p', i, { nextAt: T0 + 1 }));
    const b = await f.bucket('p');
    f.clock.advance(1);
    // The worker passes its free slots as the limit: the walk reads that many due rows per state.
    const r = await f.store.claim(b, { nowMs: T0 + 1, limit: b.drain.concurrency, leaseUntilMs: T0 + 1 + LEASE }, policy());
    // One replay delivery (its own 1/min), the next one deferred, then a first attempt.
    assert.deepEqual(
      r.claimed.map((a) => a.deliveryId),
      [ids[0], ids[2]],
    );
    assert.equal(r.verdict.deferred.replay_rate, 1);
    assert.equal((await delivery(f.admin, ids[1]!)).last_deferral_reason, 'replay_rate');
    assert.ok(r.verdict.replayTokens.has('rp'));
  });

  test('completions: delivered settles, a retry is due at its time, a release gives the attempt back; bucket_due follows', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'c');
    const ids = [];
    for (let i = 0; i < 4; i++) ids.push(await addDelivery(f.admin, 'c', i, { nextAt: T0 - 10 + i }));
    const b = await f.bucket('c');
    const { claimed } = await f.store.claim(b, { nowMs: T0, limit: 3, leaseUntilMs: T0 + LEASE }, policy());
    assert.equal(claimed.length, 3);
    const [fourth] = (await f.store.claim(b, { nowMs: T0, limit: 1, leaseUntilMs: T0 + LEASE }, policy())).claimed;
    assert.equal(await dueAt(f.admin, 'c'), null);
    // A replay asked for this one to be superseded while it was in flight.
    await f.admin.updateTable('deliveries').set({ supersede_requested: 1 }).where('id', '=', ids[3]!).execute();

    const done = T0 + 500;
    f.clock.set(done);
    await f.store.complete([
      result(claimed[0]!, done, 'delivered'),
      result(claimed[1]!, done, 'retry', { nextAttemptAt: done + 30_000, nextWhy: 'schedule' }),
      result(fourth!, done, 'retry', { nextAttemptAt: done + 40_000, nextWhy: 'schedule' }),
    ]);
    const superseded = await delivery(f.admin, ids[3]!);
    assert.equal(superseded.state, 'superseded');
    assert.equal(superseded.settled_at, done);
    const delivered = await delivery(f.admin, ids[0]!);
    assert.equal(delivered.state, 'delivered');
    assert.equal(delivered.settled_at, done);
    assert.equal(delivered.last_status, 200);
    assert.equal(delivered.lease_until, null);
    const [att] = await attemptsOf(f.admin, ids[0]!);
    assert.equal(att!.outcome, 'delivered');
    assert.equal(att!.duration_ms, 12);
    assert.equal(att!.response_body!.toString(), 'ok');
    assert.deepEqual(JSON.parse(att!.response_headers!), ['x', 'y']);
    const retrying = await delivery(f.admin, ids[1]!);
    assert.equal(retrying.state, 'retrying');
    assert.equal(retrying.next_attempt_at, done + 30_000);
    assert.equal(retrying.last_error, 'status 503');
    assert.equal((await attemptsOf(f.admin, ids[1]!))[0]!.next_attempt_at, done + 30_000);
    assert.equal(await dueAt(f.admin, 'c'), done + 30_000);

    // A release inside the next claim's transaction (recorded first): due again at once, not counted.
    const r = await f.store.claim(
      b,
      {
        nowMs: done,
        limit: 5,
        leaseUntilMs: done + LEASE,
        complete: [result(claimed[2]!, done, 'released', { nextAttemptAt: done, nextWhy: 'released' })],
      },
      policy(),
    );
    // The released delivery is claimed again by the same transaction, as its attempt 1.
    assert.deepEqual(
      r.claimed.map((a) => [a.deliveryId, a.number]),
      [[ids[2], 1]],
    );
    const [released, again] = await attemptsOf(f.admin, ids[2]!);
    assert.equal(released!.outcome, 'released');
    assert.equal(released!.response_body, null);
    assert.equal(released!.next_why, 'released');
    assert.equal(again!.outcome, null);
    assert.equal(await dueAt(f.admin, 'c'), done + 30_000);
    // A stale record (its lease attempt is gone) does not move the delivery.
    await f.store.complete([result(claimed[2]!, done, 'delivered')]);
    assert.equal((await delivery(f.admin, ids[2]!)).state, 'delivering');
  });

  test('lease expiry: due again at once, or exhausted on the last attempt; nextDueAt sees the lease', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'e');
    await addBucket(f.admin, 'one', { max_attempts: 1 });
    const e = await addDelivery(f.admin, 'e', 1, { nextAt: T0 });
    const o = await addDelivery(f.admin, 'one', 1, { nextAt: T0 });
    const buckets = await f.store.listBuckets();
    const [be, bo] = [buckets.find((x) => x.name === 'e')!, buckets.find((x) => x.name === 'one')!];
    await f.store.claim(be, { nowMs: T0, limit: 5, leaseUntilMs: T0 + LEASE }, policy());
    await f.store.claim(bo, { nowMs: T0, limit: 5, leaseUntilMs: T0 + LEASE }, policy());
    assert.equal(await f.store.nextDueAt(T0), T0 + LEASE);
    assert.deepEqual(await f.store.recoverExpired(T0 + LEASE - 1, buckets), []);

    f.clock.set(T0 + LEASE);
    const expired = await f.store.recoverExpired(T0 + LEASE, buckets);
    assert.deepEqual(
      expired.sort((a, b) => (a.bucket < b.bucket ? -1 : 1)),
      [
        { deliveryId: e, bucket: 'e', attempts: 1 },
        { deliveryId: o, bucket: 'one', attempts: 1 },
      ],
    );
    const de = await delivery(f.admin, e);
    assert.equal(de.state, 'retrying');
    assert.equal(de.next_attempt_at, T0 + LEASE);
    assert.equal(de.last_error, 'lease_expired');
    const [ae] = await attemptsOf(f.admin, e);
    assert.equal(ae!.outcome, 'lease_expired');
    assert.equal(ae!.next_attempt_at, T0 + LEASE);
    assert.equal(await dueAt(f.admin, 'e'), T0 + LEASE);
    const dd = await delivery(f.admin, o);
    assert.equal(dd.state, 'exhausted');
    assert.equal(dd.settled_at, T0 + LEASE);
    assert.equal((await attemptsOf(f.admin, o))[0]!.next_attempt_at, null);
    assert.deepEqual(await f.store.dueBuckets(T0 + LEASE), ['e']);
    // Its next claim takes it as attempt 2.
    const again = await f.store.claim(be, { nowMs: T0 + LEASE, limit: 5, leaseUntilMs: T0 + 2 * LEASE }, policy());
    assert.deepEqual(
      again.claimed.map((a) => a.number),
      [2],
    );
    assert.equal(again.claimed[0]!.firstAttemptAt, T0);
  });

  test('dueBuckets and nextDueAt leave out paused and deleting buckets', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'a');
    await addBucket(f.admin, 'b');
    await addBucket(f.admin, 'p', { paused: 1, paused_at: T0 });
    await addBucket(f.admin, 'x', { deleting_at: T0 });
    await addBucket(f.admin, 'idle');
    await addDelivery(f.admin, 'a', 1, { nextAt: T0 - 1 });
    await addDelivery(f.admin, 'b', 1, { nextAt: T0 + 5_000 });
    await addDelivery(f.admin, 'p', 1, { nextAt: T0 - 1 });
    await addDelivery(f.admin, 'p', 2, { nextAt: T0 + 1_000 });
    await addDelivery(f.admin, 'x', 1, { nextAt: T0 + 2_000 });
    assert.deepEqual(await f.store.dueBuckets(T0), ['a']);
    assert.equal(await f.store.nextDueAt(T0), T0 + 5_000);
    f.clock.set(T0 + 5_000);
    assert.deepEqual((await f.store.dueBuckets(T0 + 5_000)).sort(), ['a', 'b']);
    assert.equal(await f.store.nextDueAt(T0 + 5_000), null);
  });

  test('the worker lease: a second holder is refused until expiry; renewal keeps acquired_at; release frees it', async () => {
    const f = await fixture();
    assert.deepEqual(await f.store.acquireWorkerLease('h1', 'one', T0, 15_000), { ok: true });
    f.clock.advance(5_000);
    assert.deepEqual(await f.store.acquireWorkerLease('h1', 'one', T0 + 5_000, 15_000), { ok: true });
    const refused = await f.store.acquireWorkerLease('h2', 'two', T0 + 5_000, 15_000);
    assert.deepEqual(refused, {
      ok: false,
      current: { holder: 'h1', info: 'one', acquiredAt: T0, heartbeatAt: T0 + 5_000, expiresAt: T0 + 20_000 },
    });
    f.clock.set(T0 + 19_999);
    assert.equal((await f.store.acquireWorkerLease('h2', 'two', T0 + 19_999, 15_000)).ok, false);
    f.clock.set(T0 + 20_000);
    assert.deepEqual(await f.store.acquireWorkerLease('h2', 'two', T0 + 20_000, 15_000), { ok: true });
    assert.equal((await f.store.acquireWorkerLease('h1', 'one', T0 + 20_000, 15_000)).ok, false);
    // Releasing someone else's lease does nothing; one's own frees it at once.
    await f.store.releaseWorkerLease('h1');
    assert.equal((await f.store.acquireWorkerLease('h1', 'one', T0 + 20_001, 15_000)).ok, false);
    await f.store.releaseWorkerLease('h2');
    assert.deepEqual(await f.store.acquireWorkerLease('h1', 'one', T0 + 20_001, 15_000), { ok: true });
  });

  test('with the database clock: leases, due times and the lease row follow clock_timestamp(), not the worker clock', async () => {
    const f = await fixture({ databaseClock: true });
    const before = Date.now();
    await addBucket(f.admin, 'db');
    const id = await addDelivery(f.admin, 'db', 1, { nextAt: before - 1_000 });
    await addDelivery(f.admin, 'db', 2, { nextAt: before + 3_600_000 });
    const b = await f.bucket('db');
    // A worker whose clock is an hour behind: the database still finds the row due, and the lease
    // is 60 s of database time.
    const workerNow = before - 3_600_000;
    const r = await f.store.claim(b, { nowMs: workerNow, limit: 5, leaseUntilMs: workerNow + LEASE }, policy());
    const afterClaim = Date.now();
    assert.deepEqual(
      r.claimed.map((a) => a.deliveryId),
      [id],
    );
    assert.equal(r.claimed[0]!.startedAt, workerNow);
    const d = await delivery(f.admin, id);
    // Same host: the database clock and this process's agree within the test's bounds.
    assert.ok(d.lease_until! >= before + LEASE - 1_000 && d.lease_until! <= afterClaim + LEASE + 1_000, `lease_until ${d.lease_until}`);
    const [a] = await attemptsOf(f.admin, id);
    assert.ok(a!.started_at >= before - 1_000 && a!.started_at <= afterClaim + 1_000);
    // nextDueAt comes back in the worker's clock: the lease end, an hour earlier.
    const next = await f.store.nextDueAt(workerNow);
    assert.ok(next !== null && Math.abs(next - (workerNow + LEASE)) < 2_000, `next ${next}`);
    assert.deepEqual(await f.store.dueBuckets(workerNow), []);
    // A retry 30 s after the worker's finish is 30 s after the database's now.
    await f.store.complete([
      result(r.claimed[0]!, workerNow + 10, 'retry', { nextAttemptAt: workerNow + 10 + 30_000, nextWhy: 'schedule' }),
    ]);
    const retried = await delivery(f.admin, id);
    assert.ok(Math.abs(retried.next_attempt_at - (Date.now() + 30_000)) < 2_000, `next_attempt_at ${retried.next_attempt_at}`);
    // The worker lease is database time too.
    assert.deepEqual(await f.store.acquireWorkerLease('h', 'i', workerNow, 15_000), { ok: true });
    const lease = await f.admin.selectFrom('worker_lease').selectAll().executeTakeFirstOrThrow();
    assert.ok(Math.abs(lease.expires_at - (Date.now() + 15_000)) < 2_000);
  });

  test('a claim waits for an ingest lowering the bucket_due row, and then sees its delivery', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'i');
    await addDelivery(f.admin, 'i', 1, { nextAt: T0 + 60_000 });
    const b = await f.bucket('i');
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let lowered!: () => void;
    const isLowered = new Promise<void>((r) => (lowered = r));
    // An ingest transaction: a new delivery and its bucket's due time lowered, not yet committed.
    const ingest = f.admin.transaction().execute(async (trx) => {
      await addDelivery(trx, 'i', 2, { nextAt: T0 });
      lowered();
      await gate;
    });
    await isLowered;
    const claim = f.store.claim(b, { nowMs: T0, limit: 5, leaseUntilMs: T0 + LEASE }, policy());
    // The claim waits on the bucket_due row lock (a backend of this test's database waiting on a
    // lock; other tests share the server), then the ingest commits.
    const waiting = async () =>
      Number(
        (
          await sql<{
            n: number;
          }>`select count(*) as n from pg_stat_activity where datname = current_database() and wait_event_type = 'Lock'`.execute(f.admin)
        ).rows[0]!.n,
      );
    try {
      for (let i = 0; i < 200 && (await waiting()) === 0; i++) await new Promise((r) => setTimeout(r, 25));
      assert.equal(await waiting(), 1);
    } finally {
      release();
    }
    await ingest;
    const r = await claim;
    assert.deepEqual(
      r.claimed.map((a) => a.deliveryId),
      ['d-i-002'],
    );
    assert.equal(await dueAt(f.admin, 'i'), T0 + 60_000);
  });

  test('two connections claiming the same bucket at once never claim the same delivery', async () => {
    const f = await fixture();
    const other = await PgDrainStore.open({ url: f.url, useCallerClock: true, listen: false, migrate: false });
    open.push(() => other.close());
    await addBucket(f.admin, 'race', { concurrency: 100 }); // room for all: a claim is bounded by the live leases
    const n = 40;
    for (let i = 0; i < n; i++) await addDelivery(f.admin, 'race', i, { nextAt: T0 - i });
    const b = await f.bucket('race');
    const seen = new Map<string, number>();
    for (let round = 0; round < 30 && seen.size < n; round++) {
      const results = await Promise.all(
        [f.store, other].map((s) => s.claim(b, { nowMs: T0, limit: 3, leaseUntilMs: T0 + LEASE }, policy())),
      );
      for (const r of results) for (const a of r.claimed) seen.set(a.deliveryId, (seen.get(a.deliveryId) ?? 0) + 1);
    }
    assert.equal(seen.size, n);
    assert.ok(
      [...seen.values()].every((c) => c === 1),
      'each delivery claimed once',
    );
    const counts = await sql<{ n: number }>`select count(*) as n from attempts`.execute(f.admin);
    assert.equal(counts.rows[0]!.n, n);
    assert.equal(await dueAt(f.admin, 'race'), null);
  });

  test('concurrency counts the delivering rows with a live lease of every worker; an expired lease no longer counts', async () => {
    const f = await fixture();
    const other = await PgDrainStore.open({ url: f.url, useCallerClock: true, listen: false, migrate: false });
    open.push(() => other.close());
    await addBucket(f.admin, 'c', { concurrency: 4 });
    for (let i = 0; i < 9; i++) await addDelivery(f.admin, 'c', i, { nextAt: T0 - 100 + i });
    const b = await f.bucket('c');
    const claimAt = (s: PgDrainStore, at: number, limit: number) =>
      s.claim(b, { nowMs: at, limit, leaseUntilMs: at + LEASE, workerId: s === f.store ? 'w-a' : 'w-b' }, policy());
    assert.equal((await claimAt(f.store, T0, 3)).claimed.length, 3);
    assert.equal((await claimAt(other, T0, 10)).claimed.length, 1, 'one slot left of four, whoever holds the other three');
    assert.equal((await claimAt(other, T0 + 1, 10)).claimed.length, 0);
    // The four leases end at T0 + LEASE (a worker died): from then on they hold no slot.
    assert.equal((await claimAt(other, T0 + LEASE, 10)).claimed.length, 4);
    const byWorker = await sql<{
      worker_id: string;
      n: number;
    }>`select worker_id, count(*) as n from attempts group by worker_id order by worker_id`.execute(f.admin);
    assert.deepEqual(byWorker.rows, [
      { worker_id: 'w-a', n: 3 },
      { worker_id: 'w-b', n: 5 },
    ]);
  });

  test('the attempts a claim completes free their slots for that same claim', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'f', { concurrency: 2 });
    for (let i = 0; i < 4; i++) await addDelivery(f.admin, 'f', i, { nextAt: T0 - 100 + i });
    const b = await f.bucket('f');
    const first = (await f.store.claim(b, { nowMs: T0, limit: 2, leaseUntilMs: T0 + LEASE }, policy())).claimed;
    assert.equal(first.length, 2);
    // Both slots finished: the claim that records them must refill both, or a worker with nothing
    // else in flight would find the bucket full of its own finished attempts and sleep.
    const complete = first.map((a) => result(a, T0 + 5, 'delivered'));
    const next = await f.store.claim(b, { nowMs: T0 + 10, limit: 2, leaseUntilMs: T0 + 10 + LEASE, complete }, policy());
    assert.deepEqual(
      next.claimed.map((a) => a.deliveryId),
      ['d-f-002', 'd-f-003'],
    );
    for (const a of first) assert.equal((await delivery(f.admin, a.deliveryId)).state, 'delivered');
  });

  test('a pacer row another worker holds: the claim rotates on (busy), claiming nothing, and still records its completions', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'k');
    for (let i = 0; i < 3; i++) await addDelivery(f.admin, 'k', i, { nextAt: T0 - 10 });
    const b = await f.bucket('k');
    const [a] = (await f.store.claim(b, { nowMs: T0, limit: 1, leaseUntilMs: T0 + LEASE }, policy())).claimed;
    await f.admin.transaction().execute(async (trx) => {
      await sql`select * from bucket_pacer where bucket = 'k' for update`.execute(trx);
      const done = {
        attemptId: a!.attemptId,
        deliveryId: a!.deliveryId,
        finishedAt: T0 + 5,
        durationMs: 5,
        status: 200,
        errorClass: null,
        errorMessage: null,
        responseHeaders: [],
        responseBody: null,
        responseTruncated: false,
        outcome: 'delivered' as const,
        reason: 'ok',
        nextAttemptAt: null,
        nextWhy: null,
      };
      const r = await f.store.claim(b, { nowMs: T0 + 10, limit: 5, leaseUntilMs: T0 + 10 + LEASE, complete: [done] }, policy());
      assert.deepEqual([r.busy, r.claimed.length], [true, 0]);
      assert.equal((await delivery(f.admin, a!.deliveryId)).state, 'delivered', 'the completion committed with the busy claim');
    });
    assert.equal((await f.store.claim(b, { nowMs: T0 + 20, limit: 5, leaseUntilMs: T0 + 20 + LEASE }, policy())).claimed.length, 2);
  });

  test('a busy claim takes no other lock: it answers while the other claim still holds the bucket_due row', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'q');
    await addDelivery(f.admin, 'q', 0, { nextAt: T0 - 10 });
    const b = await f.bucket('q');
    await sql`insert into bucket_pacer (bucket, bucket_created_at) values ('q', ${T0})`.execute(f.admin);
    await f.admin.transaction().execute(async (trx) => {
      // As another worker's claim holds them mid-transaction: the bucket row shared, the pacer row, the bucket_due row.
      await sql`select 1 from buckets where name = 'q' for share`.execute(trx);
      await sql`select 1 from bucket_pacer where bucket = 'q' for update`.execute(trx);
      await sql`select 1 from bucket_due where bucket = 'q' for update`.execute(trx);
      const claim = f.store.claim(b, { nowMs: T0 + 1, limit: 5, leaseUntilMs: T0 + 1 + LEASE }, policy());
      // A claim that waited for the bucket_due row would wait for this transaction, which waits for it:
      // the bound only tells a hang from an answer.
      const outcome = await Promise.race([claim, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 10_000).unref())]);
      assert.notEqual(outcome, 'hung');
      assert.deepEqual(outcome === 'hung' ? null : [outcome.busy, outcome.claimed.length], [true, 0]);
    });
  });

  test('the pacer row is written only when it moved, in place (fillfactor 50)', async () => {
    const f = await fixture();
    await addBucket(f.admin, 'h');
    const b = await f.bucket('h');
    const fill = await sql<{ options: string[] }>`select reloptions as options from pg_class where relname = 'bucket_pacer'`.execute(
      f.admin,
    );
    assert.deepEqual(fill.rows[0]!.options, ['fillfactor=50']);
    await addDelivery(f.admin, 'h', 0, { nextAt: T0 - 10 });
    await f.store.claim(b, { nowMs: T0, limit: 5, leaseUntilMs: T0 + LEASE }, policy());
    const xmin = async () =>
      (await sql<{ x: string }>`select xmin::text as x from bucket_pacer where bucket = 'h'`.execute(f.admin)).rows[0]!.x;
    const before = await xmin();
    // Nothing due: the claim decides nothing, the state does not move, the row is not rewritten.
    await f.store.claim(b, { nowMs: T0 + 1, limit: 5, leaseUntilMs: T0 + 1 + LEASE }, policy());
    assert.equal(await xmin(), before);
  });

  test('the drain worker delivers through it: first attempts, a 503 retried at its time, then delivered', async () => {
    const f = await fixture();
    const consumer = await startConsumer();
    open.push(() => consumer.close());
    const agent = createDeliveryAgent();
    open.push(() => agent.close());
    await addBucket(f.admin, 'w', { destination: `${consumer.url}/hooks` });
    const ids = [];
    for (let i = 0; i < 3; i++) ids.push(await addDelivery(f.admin, 'w', i, { nextAt: T0 }));
    consumer.script({ status: 503 });
    const w = new DrainWorker({ store: f.store, dispatcher: agent, clock: f.clock, logger: silentLogger, random: () => 0, leaseMs: LEASE });
    open.push(() => w.stop(0));
    const pass = await w.runOnce();
    assert.equal(pass.started, 3);
    assert.equal(consumer.received.length, 3);
    const states = await Promise.all(ids.map(async (id) => (await delivery(f.admin, id)).state));
    assert.deepEqual([...states].sort(), ['delivered', 'delivered', 'retrying']);
    const retrying = ids[states.indexOf('retrying')]!;
    const due = (await delivery(f.admin, retrying)).next_attempt_at;
    // The default schedule's first gap with random 0 and upper jitter: 15 s.
    assert.equal(due, T0 + 15_000);
    // The pass read the next due time while the attempts were in flight: their lease end.
    assert.equal(pass.wakeAt, T0 + LEASE);
    const idle = await w.runOnce();
    assert.equal(idle.started, 0);
    assert.equal(idle.wakeAt, T0 + 15_000);
    f.clock.set(T0 + 15_000);
    assert.equal((await w.runOnce()).started, 1);
    assert.equal((await delivery(f.admin, retrying)).state, 'delivered');
    assert.deepEqual(
      (await attemptsOf(f.admin, retrying)).map((a) => a.outcome),
      ['retry', 'delivered'],
    );
    assert.equal(await dueAt(f.admin, 'w'), null);
  });

  test('a NOTIFY committed with new work wakes the running worker before its idle pass', async () => {
    const f = await fixture({ listen: true });
    const consumer = await startConsumer();
    open.push(() => consumer.close());
    const agent = createDeliveryAgent();
    open.push(() => agent.close());
    await addBucket(f.admin, 'n', { destination: `${consumer.url}/hooks` });
    const w = new DrainWorker({ store: f.store, dispatcher: agent, clock: f.clock, logger: silentLogger, random: () => 0, leaseMs: LEASE });
    open.push(() => w.stop(0));
    await w.start('refuse');
    // The first pass finds nothing; with nothing due the loop sleeps its idle 5 s.
    await until(() => w.passes >= 1, 'the first pass');
    await new Promise((r) => setTimeout(r, 200));
    const passes = w.passes;
    await f.admin.transaction().execute(async (trx) => {
      await addDelivery(trx, 'n', 1, { nextAt: T0 });
      await sql`select pg_notify(${REQUESTS_CHANNEL}, 'n')`.execute(trx);
    });
    await consumer.waitFor(1, 3_000);
    assert.ok(w.passes > passes);
  });

  test('while the LISTEN connection cannot connect, listeners are polled once a second and every change is reported', async () => {
    // Port 1 on loopback: nothing listens, every connection attempt is refused.
    const feed = new PgChangeFeed({ url: 'postgres://postgres@127.0.0.1:1/none', connectTimeoutMs: 1_000 });
    open.push(() => feed.close());
    let calls = 0;
    feed.onChange(() => calls++);
    const started = Date.now();
    await feed.start();
    assert.equal(feed.listening, false);
    assert.deepEqual(feed.takeChanges(), { changed: true, bucketsChanged: true });
    assert.deepEqual(feed.takeChanges(), { changed: false, bucketsChanged: false });
    await until(() => calls >= 2, 'two fallback polls', 5_000);
    // Two polls take about two seconds (1 s apart), whatever the reconnect attempts in between.
    assert.ok(Date.now() - started >= 1_900, `polled after ${Date.now() - started} ms`);
    // Each poll counts as a change of everything: a rescan at most once a second.
    assert.deepEqual(feed.takeChanges(), { changed: true, bucketsChanged: true });
    assert.deepEqual(feed.takeChanges(), { changed: false, bucketsChanged: false });
    assert.equal(feed.connects, 0);
  });

  test('takeChanges and onChange report NOTIFYs committed by another connection', async () => {
    const f = await fixture({ listen: true });
    // The first call reports everything (nothing was known before the store opened).
    assert.deepEqual(await f.store.takeChanges(), { changed: true, bucketsChanged: true });
    assert.deepEqual(await f.store.takeChanges(), { changed: false, bucketsChanged: false });
    let calls = 0;
    const off = f.store.onChange(() => calls++);

    await sql`select pg_notify(${REQUESTS_CHANNEL}, 'b')`.execute(f.admin);
    await until(() => calls >= 1, 'a requests notice');
    assert.deepEqual(await f.store.takeChanges(), { changed: true, bucketsChanged: false });

    // A notice inside a transaction arrives only at its commit.
    await f.admin.transaction().execute(async (trx) => {
      await sql`select pg_notify(${BUCKETS_CHANNEL}, 'b')`.execute(trx);
    });
    await until(() => calls >= 2, 'a buckets notice');
    assert.deepEqual(await f.store.takeChanges(), { changed: true, bucketsChanged: true });
    assert.deepEqual(await f.store.takeChanges(), { changed: false, bucketsChanged: false });
    // Unsubscribed, a listener is called no more (another one still is).
    off();
    let later = 0;
    f.store.onChange(() => later++);
    await sql`select pg_notify(${REQUESTS_CHANNEL}, 'b')`.execute(f.admin);
    await until(() => later >= 1, 'a third notice');
    assert.equal(calls, 2);
  });

  test('the LISTEN connection reconnects after its backend is terminated and reports a rescan', async () => {
    const f = await fixture({ listen: true });
    const feed = f.store.changeFeed!;
    await f.store.takeChanges();
    assert.deepEqual(await f.store.takeChanges(), { changed: false, bucketsChanged: false });
    const pid = feed.backendPid;
    assert.ok(pid !== undefined);
    let calls = 0;
    f.store.onChange(() => calls++);
    const killed = await sql<{ ok: boolean }>`select pg_terminate_backend(${pid}::int) as ok`.execute(f.admin);
    assert.equal(killed.rows[0]!.ok, true);
    await until(() => feed.connects === 2 && feed.listening, 'the LISTEN connection to come back');
    assert.notEqual(feed.backendPid, pid);
    assert.ok(calls >= 1, 'listeners called on reconnect');
    // Notices sent while it was down are lost: everything counts as changed.
    assert.deepEqual(await f.store.takeChanges(), { changed: true, bucketsChanged: true });
    assert.deepEqual(await f.store.takeChanges(), { changed: false, bucketsChanged: false });
    // And it listens again.
    const before = calls;
    await sql`select pg_notify(${REQUESTS_CHANNEL}, 'b')`.execute(f.admin);
    await until(() => calls > before, 'a notice after the reconnect');
    assert.deepEqual(await f.store.takeChanges(), { changed: true, bucketsChanged: false });
  });
});

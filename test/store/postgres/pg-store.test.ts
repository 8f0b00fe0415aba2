import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, test } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { sql, type Kysely } from 'kysely';
import pg from 'pg';
import { UUID } from 'uuidv7';
import { parseRetryOn } from '../../../src/policy/classify.js';
import { ManualClock } from '../../../src/shared/clock.js';
import { BUCKETS_CHANNEL } from '../../../src/store/postgres/pg-notify.js';
import { createPgPool, pgKysely, pgStorageErrorCode } from '../../../src/store/postgres/pg-pool.js';
import { pgGlobRegex } from '../../../src/store/postgres/pg-request-query.js';
import { PgStore, type PgStoreOptions } from '../../../src/store/postgres/pg-store.js';
import type { Database } from '../../../src/store/schema.js';
import { SqliteStore } from '../../../src/store/sqlite/sqlite-store.js';
import { globRegExp } from '../../../src/store/sqlite/request-query.js';
import type { DrainSettings, RequestFilter, Store, StoredRequest, TailCursor } from '../../../src/store/store.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases, type TestDatabase } from '../../helpers/pg-database.js';
import { tempDir } from '../../helpers/temp-dir.js';
import { until } from '../../helpers/until.js';

const server = pgTestServer();

const T0 = Date.UTC(2026, 11, 2, 12, 0, 0);

/** A UUIDv7 made at `ms` (the n-th of that ms): ids whose time the test controls. */
const idAt = (ms: number, n = 0) => UUID.fromFieldsV7(ms, 0, 0, n).toString();

function pgOptions(url: string, clock: ManualClock, extra: Partial<PgStoreOptions> = {}): PgStoreOptions {
  return {
    url,
    max: 4,
    statementTimeoutMs: 30_000,
    idleInTransactionTimeoutMs: 30_000,
    connectTimeoutMs: 5_000,
    synchronousCommit: 'on',
    applicationName: 'hookbucket-pg-store-test',
    clock,
    // The manual clock stands for the database's in due times and the lease, as on SQLite.
    useCallerClock: true,
    ...extra,
  };
}

test('the PostgreSQL glob regex accepts exactly what the JavaScript glob accepts', () => {
  const globs = ['/a/*', '/a/**', '/a/?', '/', '/[x]', '/a/x.y', '/a/x?y', '**', '*', '/a/*/c', '/(a)|b+', '/a\\b', '/a^$', '/{1}'];
  const paths = [
    '/a/b',
    '/a/b/c',
    '/a/',
    '/a',
    '/',
    '/[x]',
    '/x',
    '/a/x.y',
    '/a/xzy',
    '/a/x/y',
    '/(a)|b+',
    '/a\\b',
    '/a^$',
    '/{1}',
    '/aab',
  ];
  for (const g of globs) {
    const js = globRegExp(g);
    const re = new RegExp(pgGlobRegex(g)); // ARE and JavaScript agree on this subset (escapes, ., [^/], anchors)
    for (const p of paths) assert.equal(re.test(p), js.test(p), `${g} on ${p}`);
  }
});

describe('PgStore', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
  const clock = new ManualClock(T0);
  const lite = tempDir();
  let tdb: TestDatabase;
  let store: PgStore;
  let sqlite: SqliteStore;
  let liteRaw: BetterSqlite3.Database;
  let pgRaw: Kysely<Database>;

  before(async () => {
    await sweepStaleTestDatabases(server!);
    tdb = await createTestDatabase(server!);
    store = await PgStore.open(pgOptions(tdb.url, clock));
    sqlite = await SqliteStore.open({ path: lite.db, durability: 'full', busyTimeoutMs: 2000, clock });
    liteRaw = new BetterSqlite3(lite.db);
    pgRaw = pgKysely(createPgPool({ ...pgOptions(tdb.url, clock), max: 2 }));
  });

  after(async () => {
    await store?.close();
    await sqlite?.close();
    liteRaw?.close();
    await pgRaw?.destroy();
    await tdb?.drop();
    lite.remove();
  });

  /** Inserts one row into the same table of both databases (the ingest sink is not used here). */
  async function put(table: keyof Database, row: Record<string, unknown>): Promise<void> {
    const cols = Object.keys(row);
    liteRaw.prepare(`insert into ${table} (${cols.join(', ')}) values (${cols.map((c) => `@${c}`).join(', ')})`).run(row);
    await pgRaw
      .insertInto(table)
      .values(row as never)
      .execute();
  }

  async function putRequest(r: {
    id: string;
    bucket: string;
    receivedAt?: number;
    method?: string;
    path?: string;
    query?: string | null;
    headers?: string[];
    body?: Buffer;
    trailers?: string[] | null;
  }): Promise<void> {
    const body = r.body ?? Buffer.alloc(0);
    await put('requests', {
      id: r.id,
      bucket: r.bucket,
      received_at: r.receivedAt ?? parseInt(r.id.replace(/-/g, '').slice(0, 12), 16),
      method: r.method ?? 'POST',
      path: r.path ?? '',
      query: r.query ?? null,
      headers: JSON.stringify(r.headers ?? []),
      body,
      size: body.byteLength,
      sha256: createHash('sha256').update(body).digest('hex'),
      peer: '127.0.0.1',
      trailers: r.trailers && r.trailers.length > 0 ? JSON.stringify(r.trailers) : null,
    });
  }

  let deliverySeq = 0;
  async function putDelivery(d: {
    requestId: string;
    bucket: string;
    state: string;
    generation?: number;
    latest?: 0 | 1;
    attempts?: number;
    lastStatus?: number | null;
    destination?: string | null;
    trigger?: 'initial' | 'replay';
  }): Promise<string> {
    const id = `d-${String(++deliverySeq).padStart(4, '0')}`;
    await put('deliveries', {
      id,
      request_id: d.requestId,
      bucket: d.bucket,
      destination: d.destination ?? null,
      generation: d.generation ?? 1,
      state: d.state,
      attempts: d.attempts ?? 0,
      next_attempt_at: T0,
      trigger: d.trigger ?? 'initial',
      created_at: T0 + (d.generation ?? 1),
      updated_at: T0,
      last_status: d.lastStatus ?? null,
      settled_at: ['delivered', 'failed', 'exhausted', 'superseded'].includes(d.state) ? T0 + 10 : null,
      latest: d.latest ?? 1,
    });
    return id;
  }

  test('bucket create, get, update and list round-trip every setting (0.1 stays 0.1)', async () => {
    const drain: DrainSettings = {
      rate: { count: 2.5, perMs: 60_000 },
      burst: 7,
      concurrency: 3,
      timeoutMs: 12_345,
      schedule: { baseMs: 1_500, multiplier: 1.7, capMs: Infinity, giveUpMs: 3_600_000, jitter: 'full' },
      retryOn: parseRetryOn('5xx,429,network')!,
      retryBudget: { fraction: 0.1, floorPerSecond: 0.3 },
      forwardPath: false,
      forwardRawPath: true,
      forwardHeaders: [
        ['X-Token', 'a b'],
        ['x-token', 'second'],
      ],
    };
    const input = {
      name: 'crud',
      destination: 'http://127.0.0.1:9/hook',
      maxBody: 1234,
      ackStatus: 202,
      ackBody: '{"ok":true}',
      ackContentType: 'application/json',
      retainMs: 86_400_000,
      retainStates: ['delivered' as const, 'failed' as const],
      drain,
    };
    const made = await store.createBucket(input);
    const madeLite = await sqlite.createBucket(input);
    assert.deepEqual(made, madeLite);
    assert.deepEqual(made.drain, drain);
    assert.equal(made.drain.retryBudget.fraction, 0.1);
    assert.equal(made.drain.rate!.count, 2.5);
    assert.equal(made.createdAt, T0);
    assert.deepEqual(await store.getBucket('crud'), made);
    assert.equal(await store.getBucket('missing'), undefined);

    const plain = await store.createBucket({ name: 'plain' });
    assert.deepEqual(plain, await sqlite.createBucket({ name: 'plain' }));
    assert.equal(plain.maxBody, 25 * 1024 * 1024);
    assert.equal(plain.drain.schedule.maxAttempts, 14);

    await assert.rejects(store.createBucket({ name: 'crud' }), { code: 'bucket_exists', message: 'bucket crud already exists' });

    clock.advance(1000);
    const patch = {
      ackStatus: 201,
      drain: {
        concurrency: 9,
        retryBudget: { fraction: 0.25, floorPerSecond: 2 },
        schedule: { baseMs: 10, multiplier: 2, capMs: 500, maxAttempts: 3, jitter: 'none' as const },
      },
    };
    const u = await store.updateBucket('crud', patch);
    assert.deepEqual(u, await sqlite.updateBucket('crud', patch));
    assert.equal(u.updatedAt - u.createdAt, 1000);
    assert.equal(u.destination, 'http://127.0.0.1:9/hook');
    assert.deepEqual(u.drain.forwardHeaders, drain.forwardHeaders);
    assert.equal(u.drain.concurrency, 9);
    assert.deepEqual(u.drain.schedule, { baseMs: 10, multiplier: 2, capMs: 500, maxAttempts: 3, jitter: 'none' });
    assert.deepEqual((await store.updateBucket('crud', { destination: null, drain: { rate: null, retryOn: null } })).destination, null);
    await sqlite.updateBucket('crud', { destination: null, drain: { rate: null, retryOn: null } });
    await assert.rejects(store.updateBucket('missing', { ackStatus: 201 }), { code: 'not_found', message: 'bucket missing not found' });

    assert.deepEqual(await store.listBuckets(), await sqlite.listBuckets());
    assert.deepEqual(
      (await store.listBuckets()).map((b) => b.name),
      ['crud', 'plain'],
    );
    // An update lowers the bucket's due time (a destination set makes waiting rows deliverable).
    const due = await sql<{ next_due_at: number }>`select next_due_at from bucket_due where bucket = 'crud'`.execute(pgRaw);
    assert.deepEqual(due.rows, [{ next_due_at: T0 + 1000 }]);
  });

  test('every bucket write bumps the epoch and sends a notice at commit; idempotent pauses write nothing', async () => {
    const listener = new pg.Client({ connectionString: tdb.url });
    await listener.connect();
    const notices: string[] = [];
    listener.on('notification', (n) => notices.push(`${n.channel}:${n.payload}`));
    await listener.query(`listen ${BUCKETS_CHANNEL}`);
    const epoch = async () =>
      Number((await sql<{ value: number }>`select value from meta where key = 'bucket_epoch'`.execute(pgRaw)).rows[0]!.value);
    try {
      const e0 = await epoch();
      await store.createBucket({ name: 'noisy' });
      await store.updateBucket('noisy', { ackStatus: 204 });
      await store.pauseBucket('noisy');
      await store.pauseBucket('noisy'); // already paused: no write
      await store.resumeBucket('noisy');
      await store.resumeBucket('noisy'); // not paused: no write
      assert.equal(await epoch(), e0 + 4);
      await until(() => notices.length >= 4, 'four notices');
      assert.deepEqual(notices, Array(4).fill(`${BUCKETS_CHANNEL}:noisy`));
      // A refused create sends nothing (its transaction never commits a change).
      await assert.rejects(store.createBucket({ name: 'noisy' }), { code: 'bucket_exists' });
      assert.equal(await epoch(), e0 + 4);
    } finally {
      await listener.end();
    }
  });

  test('two processes creating one name at once: one bucket, the other told bucket_exists', async () => {
    const other = await PgStore.open(pgOptions(tdb.url, clock));
    try {
      for (let i = 0; i < 5; i++) {
        const results = await Promise.allSettled([store.createBucket({ name: `race-${i}` }), other.createBucket({ name: `race-${i}` })]);
        assert.equal(results.filter((r) => r.status === 'fulfilled').length, 1, `round ${i}`);
        const refused = results.find((r) => r.status === 'rejected') as PromiseRejectedResult;
        assert.equal((refused.reason as { code?: string }).code, 'bucket_exists');
        assert.equal((refused.reason as Error).message, `bucket race-${i} already exists`);
      }
    } finally {
      await other.close();
    }
  });

  test('pause and resume keep the paused time; pause and resume are idempotent', async () => {
    await store.createBucket({ name: 'pz' });
    await sqlite.createBucket({ name: 'pz' });
    const start = clock.now();
    const p1 = await store.pauseBucket('pz');
    assert.equal(p1.paused, true);
    assert.equal(p1.pausedAt, start);
    clock.advance(5_000);
    assert.equal((await store.pauseBucket('pz')).pausedAt, start, 'a second pause keeps the first start');
    const r1 = await store.resumeBucket('pz');
    assert.deepEqual([r1.paused, r1.pausedAt, r1.pausedTotalMs], [false, null, 5_000]);
    clock.advance(1_000);
    await store.pauseBucket('pz');
    clock.advance(2_000);
    const r2 = await store.resumeBucket('pz');
    assert.equal(r2.pausedTotalMs, 7_000);
    assert.equal((await store.resumeBucket('pz')).pausedTotalMs, 7_000);
    await assert.rejects(store.pauseBucket('nope'), { code: 'not_found', message: 'bucket nope not found' });
    await assert.rejects(store.resumeBucket('nope'), { code: 'not_found' });
  });

  test('a deleting bucket refuses every bucket write with bucket_deleting, and resolveBucket does not find it', async () => {
    await store.createBucket({ name: 'tomb' });
    assert.equal((await store.resolveBucket('tomb'))?.name, 'tomb');
    await sql`update buckets set deleting_at = ${clock.now()} where name = 'tomb'`.execute(pgRaw);
    await sql`update meta set value = value + 1 where key = 'bucket_epoch'`.execute(pgRaw);
    await sql`select pg_notify(${BUCKETS_CHANNEL}, 'tomb')`.execute(pgRaw);
    const message = 'bucket tomb is being deleted; finish it with: hookbucket bucket delete tomb';
    await assert.rejects(store.createBucket({ name: 'tomb' }), { code: 'bucket_deleting', message });
    await assert.rejects(store.updateBucket('tomb', { ackStatus: 201 }), { code: 'bucket_deleting', message });
    await assert.rejects(store.pauseBucket('tomb'), { code: 'bucket_deleting', message });
    await assert.rejects(store.resumeBucket('tomb'), { code: 'bucket_deleting', message });
    await until(async () => (await store.resolveBucket('tomb')) === undefined, 'the tombstone to be unresolvable');
    assert.notEqual((await store.getBucket('tomb'))?.deletingAt, null, 'getBucket still shows it, as deleting');
  });

  test("resolveBucket notices another process's bucket writes, by notice and by the epoch; the listener reconnects", async () => {
    const other = await PgStore.open(pgOptions(tdb.url, clock));
    // Epoch read once, at the first lookup: later changes reach it only by notice.
    const noticed = await PgStore.open(pgOptions(tdb.url, clock, { bucketEpochCheckMs: 3_600_000 }));
    // Epoch read on every lookup: changes reach it without any notice.
    const polled = await PgStore.open(pgOptions(tdb.url, clock, { bucketEpochCheckMs: 0 }));
    try {
      await other.createBucket({ name: 'hot' });
      // Created a moment ago by another process: found at once (misses are not cached).
      assert.equal((await noticed.resolveBucket('hot'))?.ackStatus, 200);
      assert.equal((await polled.resolveBucket('hot'))?.ackStatus, 200);
      await until(() => noticed.listeningForBuckets && polled.listeningForBuckets, 'the LISTEN connections');
      // (Connecting dropped the cache: notices before LISTEN are lost.) Cached again, then changed.
      assert.equal((await noticed.resolveBucket('hot'))?.ackStatus, 200);
      await other.updateBucket('hot', { ackStatus: 203 });
      await until(async () => (await noticed.resolveBucket('hot'))?.ackStatus === 203, 'the cache to drop on the notice');

      // Every LISTEN connection cut (as by a server restart): the epoch still drops the cache at once.
      await sql`select pg_terminate_backend(pid) from pg_stat_activity
        where datname = ${tdb.name} and application_name = 'hookbucket-pg-store-test-buckets'`.execute(pgRaw);
      await until(() => !noticed.listeningForBuckets && !polled.listeningForBuckets, 'the listeners to notice they were cut');
      await other.updateBucket('hot', { ackStatus: 205 });
      assert.equal((await polled.resolveBucket('hot'))?.ackStatus, 205, 'the epoch check drops the cache');
      // They reconnect by themselves (after 1 s) and hear notices again.
      await until(() => noticed.listeningForBuckets && polled.listeningForBuckets, 'the listeners to reconnect', 10_000);
      assert.equal((await noticed.resolveBucket('hot'))?.ackStatus, 205, 'cached again');
      await other.updateBucket('hot', { ackStatus: 206 });
      await until(async () => (await noticed.resolveBucket('hot'))?.ackStatus === 206, 'notices again after the reconnect');
      // A store's own writes drop its cache at once.
      assert.equal((await store.resolveBucket('hot'))?.ackStatus, 206);
      await store.updateBucket('hot', { ackStatus: 207 });
      assert.equal((await store.resolveBucket('hot'))?.ackStatus, 207);
    } finally {
      await other.close();
      await noticed.close();
      await polled.close();
    }
  });

  test('a bucket write waits lockWaitMs for a row another connection holds, then fails with a store_busy error', async () => {
    const waiting = await PgStore.open(pgOptions(tdb.url, clock, { lockWaitMs: 150 }));
    try {
      await waiting.createBucket({ name: 'locked' });
      await pgRaw.transaction().execute(async (trx) => {
        await sql`select 1 from buckets where name = 'locked' for update`.execute(trx);
        const started = performance.now();
        await assert.rejects(waiting.updateBucket('locked', { ackStatus: 201 }), (e: unknown) => pgStorageErrorCode(e) === 'store_busy');
        assert.ok(performance.now() - started >= 100, 'it waited');
      });
      assert.equal((await waiting.updateBucket('locked', { ackStatus: 201 })).ackStatus, 201, 'and works once the lock is gone');
    } finally {
      await waiting.close();
    }
  });

  test('the importer stores batches as ingest would, and refuses a bucket deleted or made anew meanwhile', async () => {
    const b = await store.createBucket({ name: 'imp', destination: 'http://127.0.0.1:9/' });
    const importer = await store.openImporter();
    const listener = new pg.Client({ connectionString: tdb.url });
    await listener.connect();
    const notices: string[] = [];
    listener.on('notification', (n) => notices.push(`${n.channel}:${n.payload}`));
    await listener.query('listen hookbucket_requests');
    try {
      const body = Buffer.from([0xff, 0x00, 0x41]);
      const items = [
        { method: 'POST', path: '/one', query: 'a=1', rawHeaders: ['X-A', '1', 'x-a', '2'], body, rawTrailers: ['X-T', 't'] },
        { method: 'PUT', path: '', query: null, rawHeaders: [], body: Buffer.alloc(0) },
      ];
      const ids = await importer.write({ name: 'imp', createdAt: b.createdAt }, items, { createDelivery: true });
      assert.equal(ids.length, 2);
      assert.ok(ids[0]! < ids[1]!, 'ids in file order');
      const first = await store.getRequest(ids[0]!);
      assert.deepEqual(
        [first!.method, first!.path, first!.query, first!.rawHeaders, first!.rawTrailers, first!.state, first!.receivedAt],
        ['POST', '/one', 'a=1', ['X-A', '1', 'x-a', '2'], ['X-T', 't'], 'pending', clock.now()],
      );
      assert.ok(first!.body.equals(body));
      assert.equal(first!.sha256, createHash('sha256').update(body).digest('hex'));
      assert.equal((await store.getRequest(ids[1]!))!.rawTrailers!.length, 0);
      const due = await sql<{ next_due_at: number }>`select next_due_at from bucket_due where bucket = 'imp'`.execute(pgRaw);
      assert.deepEqual(due.rows, [{ next_due_at: clock.now() }]);
      await until(() => notices.includes('hookbucket_requests:imp'), 'a notice for the worker');
      // Without --deliver: requests only.
      const [plain] = await importer.write({ name: 'imp', createdAt: b.createdAt }, [items[1]!], { createDelivery: false });
      assert.equal((await store.getRequest(plain!))!.state, 'none');

      // Another bucket of the same name (created_at differs): nothing of the batch is stored.
      const before = (await store.bucketCounts('imp')).requests;
      await assert.rejects(importer.write({ name: 'imp', createdAt: b.createdAt - 1 }, items, { createDelivery: true }), {
        code: 'not_found',
        message: 'bucket imp was deleted and created again during the import; the rest was not stored in the new bucket',
      });
      await assert.rejects(importer.write({ name: 'gone', createdAt: b.createdAt }, items, { createDelivery: true }), {
        code: 'not_found',
        message: 'bucket gone was deleted during the import; the rest was not stored',
      });
      await sql`update buckets set deleting_at = ${clock.now()} where name = 'imp'`.execute(pgRaw);
      await assert.rejects(importer.write({ name: 'imp', createdAt: b.createdAt }, items, { createDelivery: true }), {
        code: 'bucket_deleting',
        message: 'bucket imp is being deleted; finish it with: hookbucket bucket delete imp',
      });
      assert.equal((await store.bucketCounts('imp')).requests, before);
    } finally {
      await importer.close();
      await listener.end();
    }
  });

  describe('requests (the same rows in both dialects; PostgreSQL must answer as SQLite does)', () => {
    const B = 'reqs';
    const ids = Array.from({ length: 14 }, (_, i) => idAt(T0 - 100_000 + i * 1_000, i));
    const nonUtf8 = Buffer.concat([Buffer.from([0xff, 0xfe, 0x00]), Buffer.from('the needle is here'), Buffer.from([0x80, 0xc3])]);
    const rawHeaders = ['Content-Type', 'application/json', 'X-Sig', 'abc', 'x-sig', 'def', 'X-Quote', 'say "hi" \\ ü'];
    const trailers = ['X-Checksum', 'abc123', 'x-checksum', 'again'];
    let attemptIds: string[] = [];

    before(async () => {
      await store.createBucket({ name: B, destination: 'http://127.0.0.1:9/' });
      await sqlite.createBucket({ name: B, destination: 'http://127.0.0.1:9/' });
      await store.createBucket({ name: 'other' });
      await sqlite.createBucket({ name: 'other' });
      const [r0, r1, r2, r3, r4, r5, r6, r7, ...rest] = ids as [
        string,
        string,
        string,
        string,
        string,
        string,
        string,
        string,
        ...string[],
      ];
      await putRequest({
        id: r0,
        bucket: B,
        path: '/a/b',
        headers: rawHeaders,
        body: Buffer.from('{"hello":"world ü"}'),
        trailers,
        query: 'x=1&y',
      });
      await putRequest({ id: r1, bucket: B, method: 'GET', path: '' });
      await putDelivery({ requestId: r1, bucket: B, state: 'pending' });
      await putRequest({ id: r2, bucket: B, path: '/a/b/c', body: nonUtf8, headers: ['x-sig', 'abc'] });
      await putDelivery({ requestId: r2, bucket: B, state: 'delivered', attempts: 1, lastStatus: 200 });
      // received_at a few ms after the id's own time (the id clock and received_at can differ).
      await putRequest({ id: r3, bucket: B, method: 'PUT', path: '/x', receivedAt: T0 - 97_000 + 5 });
      await putDelivery({ requestId: r3, bucket: B, state: 'failed', attempts: 1, lastStatus: 404 });
      await putRequest({ id: r4, bucket: B, path: '/a/x.y', body: Buffer.from('needle') });
      const d4 = await putDelivery({ requestId: r4, bucket: B, state: 'retrying', attempts: 2, lastStatus: 503 });
      await putRequest({ id: r5, bucket: B, path: '/a/b' });
      await putDelivery({ requestId: r5, bucket: B, state: 'exhausted', attempts: 14, lastStatus: 500 });
      await putRequest({ id: r6, bucket: B, path: '/[x]' });
      await putDelivery({ requestId: r6, bucket: B, state: 'delivering', attempts: 1 });
      // A replayed request: generation 1 superseded, generation 2 pending and latest, and a --to copy.
      await putRequest({ id: r7, bucket: B, path: '/a/xzy' });
      await putDelivery({ requestId: r7, bucket: B, state: 'superseded', latest: 0, attempts: 1, lastStatus: 502 });
      await putDelivery({ requestId: r7, bucket: B, state: 'pending', generation: 2, trigger: 'replay' });
      await putDelivery({
        requestId: r7,
        bucket: B,
        state: 'delivered',
        generation: 2,
        latest: 0,
        destination: 'http://127.0.0.1:8/',
        trigger: 'replay',
        lastStatus: 204,
      });
      for (const [i, id] of rest.entries()) {
        await putRequest({ id, bucket: B, path: `/p/${i}`, method: i % 2 === 0 ? 'POST' : 'DELETE', body: Buffer.from(`body ${i}`) });
        if (i % 3 !== 0) await putDelivery({ requestId: id, bucket: B, state: 'delivered', attempts: 1, lastStatus: 200 + i });
      }
      await putRequest({ id: idAt(T0 - 50, 99), bucket: 'other', body: Buffer.from('needle') });

      // Attempts: two finished tries of r4's delivery, one still running (outcome null: not tailed).
      attemptIds = [idAt(T0 - 2_000, 1), idAt(T0 - 1_000, 2), idAt(T0 - 500, 3)];
      const attempt = (id: string, number: number, startedAt: number, outcome: string | null, status: number | null) =>
        put('attempts', {
          id,
          delivery_id: d4,
          request_id: r4,
          bucket: B,
          number,
          url: 'http://127.0.0.1:9/a/x.y',
          started_at: startedAt,
          duration_ms: outcome === null ? null : 40 + number,
          status,
          error_class: status === null ? 'timeout' : null,
          error_message: status === null ? 'timed out' : null,
          response_headers: status === null ? null : JSON.stringify(['Retry-After', '5', 'retry-after', '6']),
          response_body: status === null ? null : Buffer.from([0xde, 0xad, 0xbe, 0xef]),
          response_truncated: number === 2 ? 1 : 0,
          outcome,
          reason: outcome === null ? null : `why ${number}`,
          next_attempt_at: outcome === 'retry' ? startedAt + 30_000 : null,
          next_why: outcome === 'retry' ? 'schedule' : null,
        });
      await attempt(attemptIds[0]!, 1, T0 - 2_000, 'retry', 503);
      await attempt(attemptIds[1]!, 2, T0 - 1_000, 'retry', null);
      await attempt(attemptIds[2]!, 3, T0 - 500, null, null);

      await put('rejections', { bucket: B, reason: 'too_large', count: 3, last_at: T0 });
      await put('rejections', { bucket: '', reason: 'unknown_bucket', count: 5, last_at: T0 });
      await put('rejections', { bucket: '', reason: 'bad_request', count: 1, last_at: T0 });
    });

    const filters: Array<[string, RequestFilter]> = [
      ['no filter', {}],
      ...(['pending', 'retrying', 'delivering', 'delivered', 'failed', 'exhausted', 'held', 'none'] as const).map(
        (s): [string, RequestFilter] => [`state ${s}`, { states: [s] }],
      ),
      ['states pending+none', { states: ['pending', 'none'] }],
      ['terminal states', { states: ['delivered', 'failed', 'exhausted'] }],
      ['no states', { states: [] }],
      ['since', { sinceMs: T0 - 97_000 }],
      ['since, received_at exact', { sinceMs: T0 - 97_000 + 3 }],
      ['until', { untilMs: T0 - 97_000 + 5 }],
      ['since and until', { sinceMs: T0 - 99_000, untilMs: T0 - 95_000 }],
      ['method POST', { methods: ['POST'] }],
      ['methods GET, PUT', { methods: ['GET', 'PUT'] }],
      ...['/a/*', '/a/**', '/a/?', '/', '/[x]', '/a/x.y', '/a/x?y', '**', '/p/*', '/a/*/c'].map((g): [string, RequestFilter] => [
        `glob ${g}`,
        { pathGlob: g },
      ]),
      ['header, name in other case', { headers: [{ name: 'X-SIG', value: 'def' }] }],
      ['header x-sig abc', { headers: [{ name: 'x-sig', value: 'abc' }] }],
      ['header value is exact', { headers: [{ name: 'content-type', value: 'APPLICATION/JSON' }] }],
      ['header value with quotes and ü', { headers: [{ name: 'x-quote', value: 'say "hi" \\ ü' }] }],
      ['a value never as a name', { headers: [{ name: 'abc', value: 'x-sig' }] }],
      [
        'two headers',
        {
          headers: [
            { name: 'x-sig', value: 'abc' },
            { name: 'x-sig', value: 'def' },
          ],
        },
      ],
      ['search needle', { search: 'needle' }],
      ['search ü (UTF-8 bytes)', { search: 'ü' }],
      ['search empty', { search: '' }],
      ['search absent', { search: 'no such text' }],
      ['status 200', { status: { code: 200 } }],
      ['status 5xx', { status: { class: 5 } }],
      ['status 2xx with none', { states: ['none', 'delivered'], status: { class: 2 } }],
      ['ids', { ids: [ids[1]!, ids[5]!, 'missing'] }],
      [
        'everything at once',
        { states: ['retrying', 'none'], methods: ['POST'], pathGlob: '/a/**', search: 'needle', sinceMs: T0 - 100_000 },
      ],
    ];

    async function pages(s: Store, filter: RequestFilter, limit: number): Promise<string[][]> {
      const out: string[][] = [];
      let before: string | undefined;
      for (let i = 0; i < 50; i++) {
        const p = await s.listRequests(B, filter, { limit, ...(before ? { before } : {}) });
        out.push(p.requests.map((r) => r.id));
        if (p.nextCursor === null) return out;
        before = p.nextCursor;
      }
      throw new Error('no last page');
    }

    async function collect(it: AsyncIterable<StoredRequest>): Promise<StoredRequest[]> {
      const out: StoredRequest[] = [];
      for await (const r of it) out.push(r);
      return out;
    }

    async function compareAll(label: string) {
      for (const [name, filter] of filters) {
        const pgPage = await store.listRequests(B, filter, { limit: 100 });
        assert.deepEqual(pgPage, await sqlite.listRequests(B, filter, { limit: 100 }), `${label}: list ${name}`);
        assert.deepEqual(await pages(store, filter, 3), await pages(sqlite, filter, 3), `${label}: pages of ${name}`);
        assert.equal(await store.countRequests(B, filter), await sqlite.countRequests(B, filter), `${label}: count ${name}`);
        assert.equal(await store.countRequests(B, filter), pgPage.requests.length, `${label}: count ${name} is the list's length`);
        assert.deepEqual(
          await collect(store.iterateRequests(B, filter)),
          await collect(sqlite.iterateRequests(B, filter)),
          `${label}: iterate ${name}`,
        );
      }
    }

    test('listRequests, countRequests and iterateRequests give SQLite’s answer for every filter, with pagination', async () => {
      await compareAll('running');
      // And what those answers are, for a few (so agreement is not agreement on nothing).
      const list = async (f: RequestFilter) => (await store.listRequests(B, f, { limit: 100 })).requests.map((r) => r.id);
      assert.deepEqual(await list({}), [...ids].reverse());
      assert.deepEqual(await list({ search: 'needle' }), [ids[4], ids[2]]);
      assert.deepEqual(await list({ headers: [{ name: 'X-SIG', value: 'def' }] }), [ids[0]]);
      assert.deepEqual(await list({ pathGlob: '/a/*' }), [ids[7], ids[5], ids[4], ids[0]]);
      assert.deepEqual(await list({ pathGlob: '/' }), [ids[1]]);
      assert.deepEqual(await list({ states: ['none'] }), [ids[11], ids[8], ids[0]]);
      assert.deepEqual(await list({ status: { class: 5 } }), [ids[5], ids[4]]);
      assert.deepEqual(await list({ sinceMs: T0 - 97_000 + 3, untilMs: T0 - 96_000 }), [ids[3]]);
      const page = await store.listRequests(B, {}, { limit: 5 });
      assert.equal(page.nextCursor, ids[9]);
      const r7 = (await store.listRequests(B, { ids: [ids[7]!] }, { limit: 1 })).requests[0]!;
      assert.deepEqual([r7.state, r7.generation, r7.attempts, r7.lastStatus], ['pending', 2, 0, null]);
      await assert.rejects(store.listRequests('missing', {}, { limit: 1 }), { code: 'not_found', message: 'bucket missing not found' });
      await assert.rejects(store.countRequests('missing', {}), { code: 'not_found' });
      await assert.rejects(collect(store.iterateRequests('missing', {})), { code: 'not_found' });
    });

    test('in a paused bucket pending and retrying read as held, in both dialects', async () => {
      await store.pauseBucket(B);
      await sqlite.pauseBucket(B);
      try {
        await compareAll('paused');
        const held = (await store.listRequests(B, { states: ['held'] }, { limit: 10 })).requests;
        assert.deepEqual(
          held.map((r) => [r.id, r.state]),
          [
            [ids[7], 'held'],
            [ids[4], 'held'],
            [ids[1], 'held'],
          ],
        );
        assert.equal((await store.getRequest(ids[4]!))?.state, 'held');
        assert.deepEqual(await store.bucketCounts(B), await sqlite.bucketCounts(B));
        assert.equal((await store.bucketCounts(B)).states.held, 3);
      } finally {
        await store.resumeBucket(B);
        await sqlite.resumeBucket(B);
      }
    });

    test('an iteration leaves out requests stored after it began', async () => {
      const it = store.iterateRequests(B, {})[Symbol.asyncIterator]();
      const first = await it.next();
      assert.equal(first.value?.id, ids[0]);
      const late = idAt(T0 + 1, 0);
      await pgRaw
        .insertInto('requests')
        .values({
          id: late,
          bucket: B,
          received_at: T0 + 1,
          method: 'POST',
          path: '',
          query: null,
          headers: '[]',
          body: Buffer.alloc(0),
          size: 0,
          sha256: 'x',
          peer: null,
          trailers: null,
        })
        .execute();
      try {
        const seen: string[] = [first.value!.id];
        for (let r = await it.next(); !r.done; r = await it.next()) seen.push(r.value.id);
        assert.deepEqual(seen, ids);
      } finally {
        await sql`delete from requests where id = ${late}`.execute(pgRaw);
      }
    });

    test('getRequest gives the request byte for byte: raw headers in order, case and repeats, body bytes, trailers', async () => {
      const r0 = await store.getRequest(ids[0]!);
      assert.deepEqual(r0, {
        id: ids[0],
        bucket: B,
        receivedAt: T0 - 100_000,
        method: 'POST',
        path: '/a/b',
        query: 'x=1&y',
        rawHeaders,
        body: Buffer.from('{"hello":"world ü"}'),
        size: Buffer.byteLength('{"hello":"world ü"}'),
        sha256: createHash('sha256').update('{"hello":"world ü"}').digest('hex'),
        peer: '127.0.0.1',
        state: 'none',
        rawTrailers: trailers,
        disposition: 'accepted',
        verdict: null,
        dedupKey: null,
        duplicateOf: null,
      });
      const r2 = await store.getRequest(ids[2]!);
      assert.ok(r2!.body.equals(nonUtf8));
      assert.deepEqual(r2!.rawTrailers, []);
      for (const id of [...ids, 'missing']) assert.deepEqual(await store.getRequest(id), await sqlite.getRequest(id), id);
      assert.equal(await store.getRequest('missing'), undefined);
    });

    test('requestHistory gives every delivery and attempt, oldest first, as SQLite does', async () => {
      for (const id of [...ids, 'missing']) assert.deepEqual(await store.requestHistory(id), await sqlite.requestHistory(id), id);
      const h4 = await store.requestHistory(ids[4]!);
      assert.equal(h4.length, 1);
      assert.deepEqual(
        h4[0]!.attemptLog.map((a) => [a.number, a.status, a.outcome, a.responseTruncated]),
        [
          [1, 503, 'retry', false],
          [2, null, 'retry', true],
          [3, null, null, false],
        ],
      );
      assert.deepEqual(h4[0]!.attemptLog[0]!.responseHeaders, ['Retry-After', '5', 'retry-after', '6']);
      assert.ok(h4[0]!.attemptLog[0]!.responseBody!.equals(Buffer.from([0xde, 0xad, 0xbe, 0xef])));
      const h7 = await store.requestHistory(ids[7]!);
      assert.deepEqual(
        h7.map((d) => [d.generation, d.state, d.latest, d.destination]),
        [
          [1, 'superseded', false, null],
          [2, 'pending', true, null],
          [2, 'delivered', false, 'http://127.0.0.1:8/'],
        ],
      );
    });

    test('tail gives new requests and finished attempts once, with the same cursor as SQLite', async () => {
      // The same events and cursor position; PostgreSQL's `seen` also holds the request ids of its
      // look-back window below the newest id (pg-history.ts: ids are not in commit order there).
      const sameAsSqlite = (pgTail: Awaited<ReturnType<Store['tail']>>, liteTail: Awaited<ReturnType<Store['tail']>>) => {
        assert.deepEqual(pgTail.events, liteTail.events);
        assert.deepEqual([pgTail.cursor.requestId, pgTail.cursor.sinceMs], [liteTail.cursor.requestId, liteTail.cursor.sinceMs]);
        const attemptIds = liteTail.events.flatMap((e) => (e.kind === 'attempt' ? [e.attempt.id] : []));
        for (const id of attemptIds) assert.ok(pgTail.cursor.seen.includes(id), `attempt ${id} seen`);
      };
      const start: TailCursor = { requestId: ids[10]!, sinceMs: 0, seen: [] };
      const a = await store.tail(B, start);
      sameAsSqlite(a, await sqlite.tail(B, start));
      assert.deepEqual(
        a.events.map((e) => (e.kind === 'request' ? `r:${e.request.id}` : `a:${e.attempt.id}`)),
        // By time: the requests (T0 - 89 s on) before the attempts (finished T0 - 1,959 ms and T0 - 958 ms).
        [`r:${ids[11]}`, `r:${ids[12]}`, `r:${ids[13]}`, `a:${attemptIds[0]}`, `a:${attemptIds[1]}`],
      );
      assert.equal(a.cursor.requestId, ids[13]);
      // Nothing new: nothing again.
      const b = await store.tail(B, a.cursor);
      sameAsSqlite(b, await sqlite.tail(B, a.cursor));
      assert.deepEqual(b.events, []);
      // The running attempt finishes; a request arrives: each shows once.
      const late = idAt(T0 + 2, 0);
      await putRequest({ id: late, bucket: B, path: '/late' });
      const finish = (db: 'pg' | 'lite') =>
        db === 'pg'
          ? sql`update attempts set outcome = 'delivered', duration_ms = 10, status = 200 where id = ${attemptIds[2]!}`.execute(pgRaw)
          : liteRaw.prepare(`update attempts set outcome = 'delivered', duration_ms = 10, status = 200 where id = ?`).run(attemptIds[2]!);
      await finish('pg');
      finish('lite');
      const c = await store.tail(B, b.cursor);
      sameAsSqlite(c, await sqlite.tail(B, b.cursor));
      assert.deepEqual(
        c.events.map((e) => e.kind),
        ['attempt', 'request'],
      );
      assert.deepEqual((await store.tail(B, c.cursor)).events, []);
      await assert.rejects(store.tail('missing', start), { code: 'not_found', message: 'bucket missing not found' });
    });

    test('bucket counts, every bucket at once, refusals and the worker lease', async () => {
      const counts = await store.bucketCounts(B);
      assert.deepEqual(counts, await sqlite.bucketCounts(B));
      assert.equal(counts.requests, await store.countRequests(B, {}));
      assert.deepEqual(counts.rejections, { too_large: 3 });
      assert.deepEqual(counts.states, { pending: 2, retrying: 1, delivering: 1, delivered: 5, failed: 1, exhausted: 1, none: 4 });
      const all = await store.allBucketCounts();
      const allLite = await sqlite.allBucketCounts();
      for (const name of [B, 'other', 'crud']) assert.deepEqual(all.get(name), allLite.get(name), name);
      assert.deepEqual(all.get('other'), { requests: 1, bytes: 6, states: { none: 1 }, rejections: {} });
      assert.deepEqual(all.get(B), {
        ...counts,
        states: Object.fromEntries(Object.entries(counts.states).sort(([x], [y]) => (x < y ? -1 : 1))),
      });
      assert.deepEqual(await store.unattributedRejections(), { unknown_bucket: 5, bad_request: 1 });
      assert.deepEqual(await store.bucketCounts('missing'), { requests: 0, bytes: 0, states: {}, rejections: {} });

      assert.equal(await store.activeWorker(T0), undefined);
      await put('worker_lease', {
        name: 'drain',
        holder: 'w1',
        info: 'pid 1',
        acquired_at: T0,
        heartbeat_at: T0 + 1,
        expires_at: T0 + 30_000,
      });
      const w = await store.activeWorker(T0 + 1_000);
      assert.deepEqual(w, { holder: 'w1', info: 'pid 1', acquiredAt: T0, heartbeatAt: T0 + 1, expiresAt: T0 + 30_000 });
      assert.deepEqual(w, await sqlite.activeWorker(T0 + 1_000));
      assert.equal(await store.activeWorker(T0 + 30_000), undefined, 'an expired lease is no worker');
    });
  });
});

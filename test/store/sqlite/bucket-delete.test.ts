import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { RetentionLoop } from '../../../src/retention/retention-loop.js';
import { newId } from '../../../src/shared/ids.js';
import { silentLogger } from '../../../src/shared/logger.js';
import { ManualClock, systemClock } from '../../../src/shared/clock.js';
import { createBatchWriter } from '../../../src/store/sqlite/ingest-batch.js';
import { openSqlite } from '../../../src/store/sqlite/open.js';
import { SqliteDrainStore } from '../../../src/store/sqlite/sqlite-drain.js';
import { PURGE_BATCH } from '../../../src/store/purge.js';
import { openRequestImporter } from '../../../src/store/sqlite/sqlite-import.js';
import { SqliteStore } from '../../../src/store/sqlite/sqlite-store.js';
import { tempDir } from '../../helpers/temp-dir.js';

/** More than two purge batches, so a purge can be stopped after its first. */
const ROWS = 2 * PURGE_BATCH + 200;

const items = (n: number, tag = 'old') =>
  Array.from({ length: n }, (_, i) => ({
    method: 'POST',
    path: '',
    query: null,
    rawHeaders: ['X-N', String(i)],
    body: Buffer.from(`${tag} ${i}`),
  }));

/** The bucket as `requests import` checks it before storing. */
function targetOf(db: string, name: string): { name: string; createdAt: number } {
  return { name, createdAt: count(db, 'select created_at from buckets where name = ?', name) };
}

function importRows(db: string, bucket: string, n: number): string[] {
  const importer = openRequestImporter({ path: db, busyTimeoutMs: 2000, clock: systemClock });
  try {
    return importer.write(targetOf(db, bucket), items(n), { createDelivery: true });
  } finally {
    importer.close();
  }
}

const count = (db: string, sql: string, ...args: unknown[]) => {
  const c = new BetterSqlite3(db, { readonly: true });
  try {
    return Number(
      c
        .prepare(sql)
        .pluck()
        .get(...args),
    );
  } finally {
    c.close();
  }
};

describe('requests import stores only into the bucket it checked', () => {
  let t: ReturnType<typeof tempDir>;
  let store: SqliteStore;
  let clock: ManualClock;
  beforeEach(async () => {
    t = tempDir();
    // A manual clock: the re-created bucket gets a created_at later than the first one's.
    clock = new ManualClock(Date.UTC(2026, 11, 3));
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 2000, clock });
  });
  afterEach(async () => {
    await store.close();
    t.remove();
  });

  const stored = (tag: string) => count(t.db, `select count(*) from requests where cast(body as text) like ?`, `${tag} %`);
  const deliveriesOf = (tag: string) =>
    count(t.db, `select count(*) from deliveries d join requests r on r.id = d.request_id where cast(r.body as text) like ?`, `${tag} %`);

  it('a bucket deleted and created again between two batches refuses the next batch, storing nothing of it', async () => {
    await store.createBucket({ name: 'imp', destination: 'http://127.0.0.1:9/old' });
    const target = targetOf(t.db, 'imp');
    const importer = openRequestImporter({ path: t.db, busyTimeoutMs: 2000, clock: systemClock });
    try {
      assert.equal(importer.write(target, items(3, 'first'), { createDelivery: true }).length, 3, 'control: the first batch goes in');
      assert.deepEqual(await store.deleteBucket('imp', { force: true }), { requests: 3 });
      clock.advance(1000);
      await store.createBucket({ name: 'imp', destination: 'http://127.0.0.1:9/new' });
      assert.throws(
        () => importer.write(target, items(4, 'second'), { createDelivery: true }),
        (e: Error & { code?: string }) => e.code === 'not_found' && /deleted and created again during the import/.test(e.message),
      );
    } finally {
      importer.close();
    }
    assert.equal(stored('second'), 0, 'nothing of the refused batch is stored');
    assert.equal(deliveriesOf('second'), 0, 'and nothing of it is queued for the new destination');
    assert.equal((await store.bucketCounts('imp')).requests, 0, 'the new bucket is empty');
  });

  it('a tombstone set between two batches refuses the next with bucket_deleting, storing nothing of it', async () => {
    await store.createBucket({ name: 'imp', destination: 'http://127.0.0.1:9/old' });
    const target = targetOf(t.db, 'imp');
    const importer = openRequestImporter({ path: t.db, busyTimeoutMs: 2000, clock: systemClock });
    try {
      importer.write(target, items(3, 'first'), { createDelivery: true });
      // What deleteBucket's first transaction does; its purge has not run yet.
      const raw = new BetterSqlite3(t.db);
      raw.prepare(`update buckets set deleting_at = 1 where name = 'imp'`).run();
      raw.close();
      assert.throws(() => importer.write(target, items(4, 'second'), { createDelivery: true }), {
        code: 'bucket_deleting',
        message: /bucket imp is being deleted/,
      });
    } finally {
      importer.close();
    }
    assert.equal(stored('first'), 3);
    assert.equal(stored('second'), 0, 'nothing of the refused batch is stored');
  });
});

describe('bucket delete: tombstone, then a purge in batches', () => {
  let t: ReturnType<typeof tempDir>;
  let store: SqliteStore;
  beforeEach(async () => {
    t = tempDir();
    // A short lock wait, so a held lock fails a batch at once.
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 50, clock: systemClock });
  });
  afterEach(async () => {
    await store.close();
    t.remove();
  });

  it('a purge stopped by a held write lock leaves the tombstone; nothing of it is stored or sent; a re-run finishes', async () => {
    await store.createBucket({ name: 'old', destination: 'http://127.0.0.1:9/old' });
    importRows(t.db, 'old', ROWS);
    const drain = await SqliteDrainStore.open({ path: t.db });
    const [stale] = await drain.listBuckets();
    assert.equal(stale?.name, 'old');
    const policy = {};
    const claimOne = () => drain.claim(stale!, { nowMs: Date.now() + 1000, limit: 1, leaseUntilMs: Date.now() + 60_000 }, policy);
    assert.equal((await claimOne()).claimed.length, 1, 'control: the worker claims from the live bucket');

    // The tombstone and the first batch run before deleteBucket's first await; the lock is taken
    // right after, so the second batch finds it held.
    const holder = new BetterSqlite3(t.db);
    const deleting = store.deleteBucket('old', { force: true });
    holder.prepare('begin immediate').run();
    await assert.rejects(deleting, (e: Error & { code?: string }) => {
      assert.equal(e.code, 'store_busy');
      assert.match(e.message, /bucket old is deleting; the purge stopped after 500 request\(s\)/);
      assert.match(e.message, /run hookbucket bucket delete old again/);
      return true;
    });
    holder.prepare('rollback').run();

    const b = await store.getBucket('old');
    assert.notEqual(b?.deletingAt, null, 'the tombstone stands');
    assert.equal((await store.bucketCounts('old')).requests, ROWS - PURGE_BATCH, 'rows left, visible');
    assert.equal(await store.resolveBucket('old'), undefined, 'ingest does not find it');
    await assert.rejects(store.createBucket({ name: 'old', destination: 'http://127.0.0.1:9/new' }), { code: 'bucket_deleting' });
    await assert.rejects(store.updateBucket('old', { ackStatus: 204 }), { code: 'bucket_deleting' });
    await assert.rejects(store.pauseBucket('old'), { code: 'bucket_deleting' });
    await assert.rejects(store.resumeBucket('old'), { code: 'bucket_deleting' });
    await assert.rejects(
      store.createReplay({ id: newId(), bucket: 'old', requestIds: [], selection: {}, destination: null, rate: null, nowMs: Date.now() }),
      { code: 'bucket_deleting' },
    );

    // Ingest's commit-time check: nothing stored into a tombstone; its refusal counts as naming no bucket.
    const raw = openSqlite(t.db, { durability: 'full', busyTimeoutMs: 2000 });
    const write = createBatchWriter(raw);
    const now = Date.now();
    const item = {
      seq: 1,
      id: newId(),
      bucket: 'old',
      receivedAt: now,
      method: 'POST',
      path: '',
      query: null,
      rawHeaders: [],
      body: new Uint8Array(1),
      peer: null,
      createDelivery: true,
      deadline: now + 2000,
    };
    assert.deepEqual(write([item], [['old', 'too_large', 1, now]]), [1], 'refused as missing');
    raw.close();
    assert.equal(count(t.db, 'select count(*) from requests where id = ?', item.id), 0);
    assert.equal(count(t.db, `select count(*) from rejections where bucket = 'old'`), 0);
    assert.equal(count(t.db, `select coalesce(sum(count), 0) from rejections where bucket = '' and reason = 'too_large'`), 1);

    // The worker: not in its bucket list, and a claim with the list it read before claims nothing.
    assert.deepEqual(
      (await drain.listBuckets()).map((x) => x.name),
      [],
    );
    const delivering = () => count(t.db, `select count(*) from deliveries where bucket = 'old' and state = 'delivering'`);
    const before = delivering();
    assert.equal((await claimOne()).claimed.length, 0);
    assert.equal(delivering(), before, 'nothing claimed');
    await drain.close();

    // Re-running delete (no force needed) finishes; the name is free and inherits nothing.
    assert.deepEqual(await store.deleteBucket('old', { force: false }), { requests: ROWS - PURGE_BATCH });
    assert.equal(await store.getBucket('old'), undefined);
    for (const table of ['requests', 'deliveries', 'attempts', 'replays', 'rejections']) {
      assert.equal(count(t.db, `select count(*) from ${table} where bucket = 'old'`), 0, table);
    }
    const fresh = await store.createBucket({ name: 'old', destination: 'http://127.0.0.1:9/new' });
    assert.equal(fresh.deletingAt, null);
    assert.equal((await store.bucketCounts('old')).requests, 0);
  });

  it("serve's background purge stops on lock trouble and finishes on a later pass", async () => {
    await store.createBucket({ name: 'bg' });
    importRows(t.db, 'bg', ROWS);
    const holder = new BetterSqlite3(t.db);
    const deleting = store.deleteBucket('bg', { force: true });
    holder.prepare('begin immediate').run();
    await assert.rejects(deleting, { code: 'store_busy' });

    const blocked = await store.purgeDeleting({ lockWaitMs: 10 });
    assert.deepEqual([blocked.finished, blocked.requests], [[], 0]);
    assert.match(blocked.stopped ?? '', /locked|busy/i);
    assert.equal(store.pragma('busy_timeout'), 50, 'the store keeps its own lock wait');
    holder.prepare('rollback').run();

    // Through serve's retention pass, as serve runs it.
    const pass = await new RetentionLoop({ store, clock: systemClock, logger: silentLogger }).runOnce();
    const done = pass.purge!;
    assert.deepEqual([done.finished, done.requests, done.stopped], [['bg'], ROWS - PURGE_BATCH, undefined]);
    assert.equal(await store.getBucket('bg'), undefined);
    assert.equal(count(t.db, `select count(*) from requests where bucket = 'bg'`), 0);
  });

  it('a delete refused for undelivered requests leaves the bucket live', async () => {
    await store.createBucket({ name: 'busy', destination: 'http://127.0.0.1:9/' });
    importRows(t.db, 'busy', 3);
    await assert.rejects(store.deleteBucket('busy', { force: false }), { code: 'bucket_not_empty', message: /has 3 undelivered/ });
    assert.equal((await store.getBucket('busy'))?.deletingAt, null);
    assert.notEqual(await store.resolveBucket('busy'), undefined);
  });

  it('create over rows left without a bucket (a delete that failed before tombstones) makes them a tombstone and refuses', async () => {
    await store.createBucket({ name: 'ghost', destination: 'http://127.0.0.1:9/old' });
    importRows(t.db, 'ghost', 10);
    // What the old deleteBucket's first transaction did before its batches failed.
    const raw = new BetterSqlite3(t.db);
    raw.prepare(`delete from buckets where name = 'ghost'`).run();
    raw.close();
    await assert.rejects(store.createBucket({ name: 'ghost', destination: 'http://127.0.0.1:9/new' }), {
      code: 'bucket_deleting',
      message: /rows of an earlier bucket of that name/,
    });
    const tomb = await store.getBucket('ghost');
    assert.notEqual(tomb?.deletingAt, null);
    assert.equal(tomb?.destination, null);
    assert.equal((await store.bucketCounts('ghost')).requests, 10);
    const window = { sinceMs: 0, untilMs: Date.now() + 1000 };
    assert.deepEqual(
      (await store.statsSamples(window)).buckets.map((b) => b.bucket),
      [],
      'stats over every bucket leave a deleting one out',
    );
    assert.equal((await store.statsSamples({ ...window, bucket: 'ghost' })).buckets[0]?.requests, 10, 'named, it is shown');
    assert.deepEqual(await store.deleteBucket('ghost', { force: false }), { requests: 10 });
    assert.equal((await store.createBucket({ name: 'ghost' })).name, 'ghost');
  });
});

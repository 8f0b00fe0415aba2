import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { ManualClock } from '../../../src/shared/clock.js';
import { SqliteStore, migrate } from '../../../src/store/sqlite/sqlite-store.js';
import { openSqlite } from '../../../src/store/sqlite/open.js';
import { tempDir } from '../../helpers/temp-dir.js';

describe('SqliteStore', () => {
  const t = tempDir();
  const clock = new ManualClock(Date.UTC(2026, 11, 2));
  let store: SqliteStore;
  before(async () => {
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 2000, clock });
  });
  after(async () => {
    await store.close();
    t.remove();
  });

  it('creates the file with auto_vacuum=INCREMENTAL, WAL and synchronous=FULL', () => {
    assert.equal(store.pragma('auto_vacuum'), 2);
    assert.equal(store.pragma('journal_mode'), 'wal');
    assert.equal(store.pragma('synchronous'), 2);
  });

  it('opens with synchronous=NORMAL for --durability normal', () => {
    const raw = openSqlite(t.db, { durability: 'normal', busyTimeoutMs: 2000 });
    assert.equal(raw.pragma('synchronous', { simple: true }), 1);
    raw.close();
  });

  it('runs migrations twice without error or change', async () => {
    const raw = openSqlite(t.db, { durability: 'full', busyTimeoutMs: 2000 });
    const before = raw.prepare('select count(*) n from hookbucket_migration').get() as { n: number };
    await migrate(raw);
    await migrate(raw);
    const afterRows = raw.prepare('select name from hookbucket_migration').all();
    assert.equal(afterRows.length, before.n);
    assert.ok(before.n >= 1);
    raw.close();
  });

  it('creates, updates and lists buckets; an update keeps what was not given', async () => {
    const b = await store.createBucket({ name: 'alpha', destination: 'http://127.0.0.1:1/x' });
    assert.equal(b.maxBody, 25 * 1024 * 1024);
    assert.equal(b.ackStatus, 200);
    await assert.rejects(store.createBucket({ name: 'alpha' }), { code: 'bucket_exists' });
    clock.advance(1000);
    const u = await store.updateBucket('alpha', { ackStatus: 202 });
    assert.equal(u.ackStatus, 202);
    assert.equal(u.destination, 'http://127.0.0.1:1/x');
    assert.equal(u.updatedAt - u.createdAt, 1000);
    const cleared = await store.updateBucket('alpha', { destination: null });
    assert.equal(cleared.destination, null);
    await assert.rejects(store.updateBucket('missing', { ackStatus: 201 }), { code: 'not_found' });
    assert.deepEqual(
      (await store.listBuckets()).map((x) => x.name),
      ['alpha'],
    );
  });

  it('resolveBucket notices buckets another connection creates or changes', async () => {
    assert.equal(await store.resolveBucket('beta'), undefined);
    const other = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 2000, clock });
    await other.createBucket({ name: 'beta' });
    assert.equal((await store.resolveBucket('beta'))?.ackStatus, 200);
    await other.updateBucket('beta', { ackStatus: 204 });
    assert.equal((await store.resolveBucket('beta'))?.ackStatus, 204);
    await other.deleteBucket('beta', { force: false });
    assert.equal(await store.resolveBucket('beta'), undefined);
    await other.close();
  });

  it('refuses to delete a bucket with undelivered requests unless forced', async () => {
    await store.createBucket({ name: 'gamma', destination: 'http://127.0.0.1:1/' });
    const raw = new BetterSqlite3(t.db);
    raw
      .prepare(
        `insert into requests (id, bucket, received_at, method, path, query, headers, body, size, sha256, peer)
       values ('r1', 'gamma', 1, 'POST', '', null, '[]', x'00', 1, 'x', null)`,
      )
      .run();
    raw
      .prepare(
        `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, trigger, created_at, updated_at)
       values ('d1', 'r1', 'gamma', null, 1, 'pending', 0, 1, 'initial', 1, 1)`,
      )
      .run();
    raw.close();
    assert.equal((await store.bucketCounts('gamma')).states.pending, 1);
    await assert.rejects(store.deleteBucket('gamma', { force: false }), { code: 'bucket_not_empty' });
    assert.deepEqual(await store.deleteBucket('gamma', { force: true }), { requests: 1 });
    assert.equal(await store.getRequest('r1'), undefined);
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createApiApp } from '../../src/api/api-app.js';
import { openStoreReads, type OpenedStoreReads } from '../../src/api/open-store-reads.js';
import type { StoreReads } from '../../src/api/store-reads.js';
import { silentLogger } from '../../src/shared/logger.js';
import type { Store } from '../../src/store/store.js';
import { DIALECT_NAMES, openFixture, seed, seedMany, type Fixture, type Seeded } from './store-reads-fixture.js';

/**
 * "Admin work never blocks ingest": the API routes that used to read on the main store (the one
 * ingest shares its event loop with) read through the off-thread reader now: the export (in
 * bounded batches), the replay selection (dry run and real) and PATCH's reads. The app gets the
 * real reader and the real store, each behind a recorder of the methods called on it: the store
 * may see only writes.
 */

/** Every call of a method on `target`, by name, in order. */
function recorded<T extends object>(target: T): { value: T; calls: string[] } {
  const calls: string[] = [];
  const value = new Proxy(target, {
    get(t, key, receiver) {
      const v = Reflect.get(t, key, receiver);
      if (typeof v !== 'function' || typeof key !== 'string') return v;
      return (...args: unknown[]) => {
        calls.push(key);
        return (v as (...a: unknown[]) => unknown).apply(t, args);
      };
    },
  });
  return { value, calls };
}

const EXPORT_BATCH = 500; // ITERATE_PAGE in src/store/request-rows.ts: summaries per batch
const BIG = 2 * EXPORT_BATCH + 137;

for (const dialect of DIALECT_NAMES) {
  describe(`admin api reads go through the reader, writes to the store (${dialect})`, () => {
    let f: Fixture;
    let s: Seeded;
    let reader: OpenedStoreReads;
    let store: { value: Store; calls: string[] };
    let reads: { value: StoreReads; calls: string[] };
    let app: ReturnType<typeof createApiApp>;

    before(async () => {
      f = await openFixture(dialect);
      s = await seed(f);
      await seedMany(f.store, 'big', BIG, 64);
      reader = await openStoreReads(f.config, { budgetMs: 30_000, clock: f.clock, useCallerClock: f.useCallerClock });
      store = recorded(f.store);
      reads = recorded<StoreReads>(reader);
      app = createApiApp({ store: store.value, reads: reads.value, clock: f.clock, logger: silentLogger });
    });
    after(async () => {
      await reader?.close();
      await f?.close();
    });

    const call = async (method: string, path: string, body?: unknown) => {
      store.calls.length = 0;
      reads.calls.length = 0;
      const res = await app.request(path, {
        method,
        ...(body === undefined ? {} : { headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) }),
      });
      return { status: res.status, text: await res.text() };
    };

    it('GET /buckets/{name}/export reads bounded batches through the reader, none on the store', async () => {
      const r = await call('GET', '/buckets/alpha/export');
      assert.equal(r.status, 200, r.text);
      const ids = r.text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).id as string);
      assert.deepEqual(ids, s.alpha, 'every request, oldest first');
      assert.deepEqual(store.calls, []);
      assert.deepEqual(
        reads.calls.filter((m) => m === 'requestBatch'),
        ['requestBatch'],
      );
    });

    it('a bucket larger than a batch: one reader call per batch, every request once, in order; limit reads no more than it needs', async () => {
      const all = await call('GET', '/buckets/big/export');
      assert.equal(all.status, 200);
      const ids = all.text
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l).id as string);
      assert.equal(ids.length, BIG);
      assert.deepEqual(ids, [...ids].sort(), 'oldest first');
      assert.equal(new Set(ids).size, BIG);
      assert.equal(reads.calls.filter((m) => m === 'requestBatch').length, Math.ceil(BIG / EXPORT_BATCH));
      assert.deepEqual(store.calls, []);

      const some = await call('GET', `/buckets/big/export?limit=${EXPORT_BATCH + 1}`);
      assert.equal(some.status, 200);
      assert.deepEqual(
        some.text
          .trim()
          .split('\n')
          .map((l) => JSON.parse(l).id as string),
        ids.slice(0, EXPORT_BATCH + 1),
      );
      assert.equal(reads.calls.filter((m) => m === 'requestBatch').length, 2);
      assert.deepEqual(store.calls, []);
    });

    it('POST /buckets/{name}/replays: the dry run and the selection read through the reader; only createReplay goes to the store', async () => {
      const dry = await call('POST', '/buckets/alpha/replays', { all: true, dry_run: true });
      assert.equal(dry.status, 200, dry.text);
      const j = JSON.parse(dry.text);
      assert.equal(j.count, s.alpha.length);
      assert.deepEqual(
        j.sample.map((x: { id: string }) => x.id),
        s.alpha.slice(0, 5),
        'the oldest five',
      );
      assert.deepEqual(store.calls, []);
      assert.ok(reads.calls.includes('listRequests'), reads.calls.join());

      const made = await call('POST', '/buckets/alpha/replays', { id: s.alpha.slice(2, 4), confirm: true });
      assert.equal(made.status, 201, made.text);
      assert.equal(JSON.parse(made.text).total, 2);
      assert.deepEqual(store.calls, ['createReplay']);
      assert.ok(reads.calls.includes('listRequests'), reads.calls.join());
    });

    it('PATCH /buckets/{name}: the bucket it merges onto and the lease check are read through the reader; only updateBucket goes to the store', async () => {
      const r = await call('PATCH', '/buckets/alpha', { timeout: '20s', cap: '2m' });
      assert.equal(r.status, 200, r.text);
      assert.deepEqual(store.calls, ['updateBucket']);
      assert.deepEqual([...reads.calls].sort(), ['getBucket', 'processes']);
      const missing = await call('PATCH', '/buckets/nope', { timeout: '20s' });
      assert.equal(missing.status, 404, missing.text);
      assert.deepEqual(store.calls, []);
    });
  });
}

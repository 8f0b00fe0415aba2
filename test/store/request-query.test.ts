import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ManualClock } from '../../src/shared/clock.js';
import { newId } from '../../src/shared/ids.js';
import { createBatchWriter } from '../../src/store/sqlite/ingest-batch.js';
import { openSqlite, type SqliteDb } from '../../src/store/sqlite/open.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import type { RequestFilter } from '../../src/store/store.js';
import { tempDir } from '../helpers/temp-dir.js';

/** The store's listing, counting and iteration agree with each other, across pages and batches. */
describe('listRequests / countRequests / iterateRequests', () => {
  const t = tempDir();
  let store: SqliteStore;
  let raw: SqliteDb;
  let write: ReturnType<typeof createBatchWriter>;
  const STATES = ['delivered', 'failed', 'exhausted', 'retrying', 'pending'] as const;
  let seq = 0;

  function ingest(n: number, bodyBytes = 100): string[] {
    const items = Array.from({ length: n }, (_, i) => ({
      seq: ++seq,
      id: newId(),
      bucket: 'b',
      receivedAt: Date.now(),
      method: i % 2 ? 'POST' : 'PUT',
      path: `/p/${i % 3}`,
      query: null,
      rawHeaders: ['X-N', String(i % 4)],
      body: new Uint8Array(Buffer.alloc(bodyBytes, 0x61 + (i % 5))),
      peer: null,
      createDelivery: i % 7 !== 0,
      deadline: Date.now() + 5000,
    }));
    write(items, []);
    return items.map((it) => it.id);
  }

  before(async () => {
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock: new ManualClock(Date.now()) });
    await store.createBucket({ name: 'b', destination: 'http://127.0.0.1:9/x' });
    raw = openSqlite(t.db, { durability: 'normal', busyTimeoutMs: 5000 });
    write = createBatchWriter(raw);
    const ids = ingest(1234);
    const set = raw.prepare('update deliveries set state = ?, last_status = ? where request_id = ?');
    for (const [i, id] of ids.entries()) set.run(STATES[i % 5], i % 5 === 0 ? 200 : i % 5 === 1 ? 404 : null, id);
  });
  after(async () => {
    raw.close();
    await store.close();
    t.remove();
  });

  async function allPages(filter: RequestFilter, limit: number): Promise<string[]> {
    const out: string[] = [];
    let before: string | undefined;
    for (;;) {
      const page = await store.listRequests('b', filter, { limit, ...(before ? { before } : {}) });
      out.push(...page.requests.map((r) => r.id));
      if (!page.nextCursor) return out;
      before = page.nextCursor;
    }
  }

  const filters: RequestFilter[] = [
    {},
    { states: ['failed'] },
    { states: ['delivered', 'none', 'pending'] },
    { methods: ['PUT'], pathGlob: '/p/1' },
    { headers: [{ name: 'x-n', value: '2' }] },
    { search: 'ccc' },
    { status: { class: 4 } },
    { states: ['exhausted'], sinceMs: Date.now() - 3_600_000, untilMs: Date.now() + 3_600_000 },
    { untilMs: Date.now() - 3_600_000 },
  ];

  it('pages, count and iteration select the same requests (iteration oldest first, over batches)', async () => {
    for (const f of filters) {
      const listed = await allPages(f, 97);
      const iterated: string[] = [];
      for await (const r of store.iterateRequests('b', f)) iterated.push(r.id);
      assert.deepEqual(iterated, [...listed].reverse(), JSON.stringify(f));
      assert.equal(await store.countRequests('b', f), listed.length, JSON.stringify(f));
    }
    assert.equal((await allPages({}, 500)).length, 1234);
    assert.equal(await store.countRequests('b', { states: ['none'] }), Math.ceil(1234 / 7));
    assert.equal(await store.countRequests('b', { untilMs: Date.now() - 3_600_000 }), 0);
  });

  it('iteration gives whole requests and leaves out those stored after it began', async () => {
    const before = await store.countRequests('b', { states: ['failed'] });
    const it = store.iterateRequests('b', { states: ['failed'] })[Symbol.asyncIterator]();
    const first = await it.next();
    assert.equal(first.done, false);
    assert.equal(first.value!.state, 'failed');
    assert.deepEqual(first.value!.rawHeaders, ['X-N', '1']);
    assert.equal(first.value!.body.length, 100);
    const later = ingest(10);
    raw.prepare(`update deliveries set state = 'failed' where request_id in (${later.map(() => '?').join(',')})`).run(...later);
    let n = 1;
    for (let r = await it.next(); !r.done; r = await it.next()) {
      assert.ok(!later.includes(r.value.id));
      n++;
    }
    assert.equal(n, before);
    assert.equal(
      await store.countRequests('b', { states: ['failed'] }),
      before + later.filter((_, i) => i % 7 !== 0).length,
      'they are there for the next iteration',
    );
  });

  it('an unknown bucket is not_found for all three', async () => {
    await assert.rejects(store.listRequests('nope', {}, { limit: 1 }), /not found/);
    await assert.rejects(store.countRequests('nope', {}), /not found/);
    await assert.rejects(async () => {
      for await (const _ of store.iterateRequests('nope', {})) void _;
    }, /not found/);
  });
});

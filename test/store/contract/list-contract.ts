import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { AttemptResult, CapturedRequest, RequestFilter, RequestState } from '../../../src/store/store.js';
import { allPages, captured, claim, DEST, idAt, iterated, newestFirst, result, submitAll, T0, type Ctx } from './harness.js';

const PATHS = ['', '/', '/a', '/a/b', '/a/b/c', '/A', '/x.y', '/xzy', '/a[1]', '/100%_done', '/100xxdone', '/back\\slash', '/a/bc'];
const METHODS = ['POST', 'PUT', 'DELETE', 'PATCH'];
const QUOTED = 'say "hi" \\ caf\u00e9';

/** Bodies by i % 5: a needle with a percent sign, binary with NULs around `a_b`, `axb`, UTF-8 é, latin1 é. */
function bodyOf(i: number): Buffer {
  switch (i % 5) {
    case 0:
      return Buffer.from(`prefix needle 100% ${i}`);
    case 1:
      return Buffer.concat([Buffer.from([0x00, 0xff, 0x00]), Buffer.from('a_b'), Buffer.from([0x00])]);
    case 2:
      return Buffer.from(`axb NEEDLE ${i}`);
    case 3:
      return Buffer.from(`caf\u00e9 ${i}`, 'utf8');
    default:
      return Buffer.from(`caf\u00e9 ${i}`, 'latin1');
  }
}

function headersOf(i: number): string[] {
  const h = ['X-N', String(i % 4), 'X-Kind', i % 2 === 0 ? 'alpha' : 'Alpha'];
  if (i % 3 === 0) h.push('X-Dup', 'one', 'x-dup', 'two');
  if (i % 6 === 0) h.push('X-A', '1', 'X-B', '2');
  if (i % 5 === 0) h.push('X-Quote', QUOTED);
  return h;
}

/** The state request i is driven to (none: stored without a delivery). */
function stateOf(i: number): RequestState {
  if (i % 7 === 3) return 'none';
  return (['delivered', 'failed', 'exhausted', 'retrying', 'delivering', 'pending'] as const)[i % 6]!;
}

const STATUS: Partial<Record<RequestState, number>> = { delivered: 200, failed: 404, exhausted: 500, retrying: 503 };

interface Item {
  i: number;
  id: string;
  at: number;
  method: string;
  path: string;
  state: RequestState;
  status: number | null;
}

/**
 * Bucket `b`: 60 requests received 1 s apart from T0, in every state (driven there through claim
 * and complete), with methods, paths, headers and bodies that test each filter's edges. Bucket `o`
 * holds requests that would match every filter, to show listings stay inside their bucket.
 */
async function fixture(ctx: Ctx): Promise<{ items: Item[]; other: string[] }> {
  const { store } = ctx.set;
  // Concurrency 100: the fixture claims its 51 deliveries in one claim (a shared-claims store bounds a claim by it).
  await store.createBucket({ name: 'b', destination: DEST, drain: { concurrency: 100 } });
  await store.createBucket({ name: 'o', destination: DEST });
  const items: Item[] = [];
  const withDelivery: CapturedRequest[] = [];
  const without: CapturedRequest[] = [];
  for (let i = 0; i < 60; i++) {
    const at = T0 + i * 1000;
    const c = captured('b', at, { method: METHODS[i % 4]!, path: PATHS[i % PATHS.length]!, rawHeaders: headersOf(i), body: bodyOf(i) });
    const state = stateOf(i);
    (state === 'none' ? without : withDelivery).push(c);
    items.push({ i, id: c.id, at, method: c.method, path: c.path, state, status: STATUS[state] ?? null });
  }
  await submitAll(ctx.set, withDelivery, true);
  await submitAll(ctx.set, without, false);
  const other = await submitAll(
    ctx.set,
    [0, 1, 2].map((i) => captured('o', T0 + i * 1000 + 500, { path: '/a', rawHeaders: headersOf(0), body: bodyOf(0) })),
  );

  const now = T0 + 100_000;
  const { claimed } = await claim(ctx.set, 'b', now);
  assert.equal(claimed.length, withDelivery.length);
  const byRequest = new Map(items.map((it) => [it.id, it]));
  const results: AttemptResult[] = [];
  for (const a of claimed) {
    const it = byRequest.get(a.requestId)!;
    if (it.state === 'delivered') results.push(result(a, now + 10, 'delivered'));
    else if (it.state === 'failed') results.push(result(a, now + 10, 'failed', { status: 404 }));
    else if (it.state === 'exhausted') results.push(result(a, now + 10, 'exhausted', { status: 500 }));
    else if (it.state === 'retrying') results.push(result(a, now + 10, 'retry', { status: 503, nextAttemptAt: now + 3_600_000 }));
    else if (it.state === 'pending') results.push(result(a, now + 10, 'released', { nextAttemptAt: now }));
  }
  await ctx.set.drain.complete(results);
  return { items, other };
}

const matching = (items: Item[], keep: (it: Item) => boolean) => items.filter(keep).map((it) => it.id);

export function listContract(ctx: Ctx): void {
  describe('listRequests, countRequests, iterateRequests', () => {
    it('every filter field selects the same requests in pages, counts and iteration', async () => {
      const { items, other } = await fixture(ctx);
      const { store } = ctx.set;
      const byPath =
        (...paths: string[]) =>
        (it: Item) =>
          paths.includes(it.path);
      const cases: Array<[RequestFilter, (it: Item) => boolean]> = [
        [{}, () => true],
        // States, one at a time and several (none: no delivery; held needs a paused bucket).
        ...(['pending', 'retrying', 'delivering', 'delivered', 'failed', 'exhausted', 'none'] as const).map(
          (s): [RequestFilter, (it: Item) => boolean] => [{ states: [s] }, (it) => it.state === s],
        ),
        [{ states: ['delivered', 'none', 'pending'] }, (it) => ['delivered', 'none', 'pending'].includes(it.state)],
        [{ states: ['held'] }, () => false],
        // received_at: since inclusive, until exclusive.
        [{ sinceMs: T0 + 10_000, untilMs: T0 + 20_000 }, (it) => it.i >= 10 && it.i < 20],
        [{ untilMs: T0 + 5_000 }, (it) => it.i < 5],
        [{ sinceMs: T0 + 55_000 }, (it) => it.i >= 55],
        [{ sinceMs: T0 + 55_001 }, (it) => it.i >= 56],
        [{ sinceMs: T0 + 3_600_000 }, () => false],
        [{ methods: ['PUT'] }, (it) => it.method === 'PUT'],
        [{ methods: ['PUT', 'DELETE'] }, (it) => it.method === 'PUT' || it.method === 'DELETE'],
        // Globs over the raw sub-path, shown as `/` when empty: `*` stops at `/`, `**` does not,
        // `?` is one character; everything else is literal and case-sensitive (`.`, `[`, `%`, `_`, `\`).
        [{ pathGlob: '/' }, byPath('', '/')],
        [{ pathGlob: '/a' }, byPath('/a')],
        [{ pathGlob: '/a/*' }, byPath('/a/b', '/a/bc')],
        [{ pathGlob: '/a/**' }, byPath('/a/b', '/a/b/c', '/a/bc')],
        [{ pathGlob: '/a/?' }, byPath('/a/b')],
        [{ pathGlob: '/*' }, byPath('', '/', '/a', '/A', '/x.y', '/xzy', '/a[1]', '/100%_done', '/100xxdone', '/back\\slash')],
        [{ pathGlob: '**' }, () => true],
        [{ pathGlob: '/x.y' }, byPath('/x.y')],
        [{ pathGlob: '/x?y' }, byPath('/x.y', '/xzy')],
        [{ pathGlob: '/a[1]' }, byPath('/a[1]')],
        [{ pathGlob: '/100%_done' }, byPath('/100%_done')],
        [{ pathGlob: '/back\\slash' }, byPath('/back\\slash')],
        [{ pathGlob: '/back\\*' }, byPath('/back\\slash')],
        // Headers: the name case-insensitive, the value exact; every one must match some stored pair.
        [{ headers: [{ name: 'x-n', value: '2' }] }, (it) => it.i % 4 === 2],
        [{ headers: [{ name: 'X-KIND', value: 'alpha' }] }, (it) => it.i % 2 === 0],
        [{ headers: [{ name: 'x-dup', value: 'two' }] }, (it) => it.i % 3 === 0],
        [{ headers: [{ name: 'X-Dup', value: 'one' }] }, (it) => it.i % 3 === 0],
        [{ headers: [{ name: 'X-A', value: '2' }] }, () => false],
        [
          {
            headers: [
              { name: 'X-A', value: '1' },
              { name: 'x-b', value: '2' },
            ],
          },
          (it) => it.i % 6 === 0,
        ],
        [
          {
            headers: [
              { name: 'x-n', value: '2' },
              { name: 'x-kind', value: 'alpha' },
            ],
          },
          (it) => it.i % 4 === 2,
        ],
        [{ headers: [{ name: 'x-quote', value: QUOTED }] }, (it) => it.i % 5 === 0],
        [{ headers: [{ name: 'x-quote', value: 'say "hi"' }] }, () => false],
        // Body search: bytes, case-sensitive, `%` and `_` literal, UTF-8 of the text given.
        [{ search: 'needle' }, (it) => it.i % 5 === 0],
        [{ search: 'NEEDLE' }, (it) => it.i % 5 === 2],
        [{ search: 'a_b' }, (it) => it.i % 5 === 1],
        [{ search: '%' }, (it) => it.i % 5 === 0],
        [{ search: '\u00e9' }, (it) => it.i % 5 === 3],
        [{ search: 'absent' }, () => false],
        // The latest generation's last response status.
        [{ status: { code: 404 } }, (it) => it.status === 404],
        [{ status: { code: 200 } }, (it) => it.status === 200],
        [{ status: { class: 5 } }, (it) => it.status !== null && it.status >= 500],
        [{ status: { class: 2 } }, (it) => it.status === 200],
        [{ status: { class: 3 } }, () => false],
        [{ states: ['none', 'failed'], status: { class: 4 } }, (it) => it.state === 'failed'],
        [{ ids: [items[3]!.id, items[10]!.id, other[0]!, idAt(T0)] }, (it) => it.i === 3 || it.i === 10],
        // Every field narrows.
        [
          { states: ['delivered', 'failed', 'none'], methods: ['POST', 'PUT'], sinceMs: T0 + 6_000, untilMs: T0 + 50_000 },
          (it) => ['delivered', 'failed', 'none'].includes(it.state) && ['POST', 'PUT'].includes(it.method) && it.i >= 6 && it.i < 50,
        ],
        [
          { pathGlob: '/a/**', search: 'needle', headers: [{ name: 'x-n', value: '2' }] },
          (it) => ['/a/b', '/a/b/c', '/a/bc'].includes(it.path) && it.i % 5 === 0 && it.i % 4 === 2,
        ],
      ];
      for (const [filter, keep] of cases) {
        const what = JSON.stringify(filter);
        const expected = newestFirst(matching(items, keep));
        assert.deepEqual(await allPages(store, 'b', filter, 7), expected, `pages: ${what}`);
        assert.equal(await store.countRequests('b', filter), expected.length, `count: ${what}`);
        assert.deepEqual(
          (await iterated(store, 'b', filter)).map((r) => r.id),
          [...expected].reverse(),
          `iteration: ${what}`,
        );
      }
    });

    it('lists rows with their state, attempts, last status and generation; pages end exactly', async () => {
      const { items } = await fixture(ctx);
      const { store } = ctx.set;
      const all = await store.listRequests('b', {}, { limit: 100 });
      assert.equal(all.nextCursor, null);
      const byId = new Map(all.requests.map((r) => [r.id, r]));
      for (const it of items) {
        const r = byId.get(it.id)!;
        assert.deepEqual(
          r,
          {
            id: it.id,
            bucket: 'b',
            receivedAt: it.at,
            method: it.method,
            path: it.path,
            query: null,
            size: bodyOf(it.i).length,
            state: it.state,
            generation: it.state === 'none' ? null : 1,
            attempts: it.state === 'none' || it.state === 'pending' ? 0 : 1,
            lastStatus: it.status,
            disposition: 'accepted',
            verdict: null,
          },
          `request ${it.i}`,
        );
        assert.equal((await store.getRequest(it.id))!.state, it.state);
      }
      // A listing exactly `limit` long has no next page; one longer has.
      const failed = matching(items, (it) => it.state === 'failed').length;
      assert.equal((await store.listRequests('b', { states: ['failed'] }, { limit: failed })).nextCursor, null);
      const page = await store.listRequests('b', { states: ['failed'] }, { limit: failed - 1 });
      assert.equal(page.nextCursor, page.requests.at(-1)!.id);
      const rest = await store.listRequests('b', { states: ['failed'] }, { limit: failed, before: page.nextCursor! });
      assert.deepEqual([rest.requests.length, rest.nextCursor], [1, null]);
    });

    it('a paused bucket shows pending and retrying as held; states pending and retrying then select nothing', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'p', destination: DEST });
      const [pending, retrying, delivered] = await submitAll(ctx.set, [captured('p', T0), captured('p', T0 + 1), captured('p', T0 + 2)]);
      const [none] = await submitAll(ctx.set, [captured('p', T0 + 3)], false);
      const { claimed } = await claim(ctx.set, 'p', T0 + 10);
      const of = (id: string) => claimed.find((a) => a.requestId === id)!;
      await ctx.set.drain.complete([
        result(of(pending!), T0 + 20, 'released', { nextAttemptAt: T0 + 20 }),
        result(of(retrying!), T0 + 20, 'retry', { status: 503, nextAttemptAt: T0 + 60_000 }),
        result(of(delivered!), T0 + 20, 'delivered'),
      ]);
      await store.pauseBucket('p');
      const cases: Array<[RequestFilter, string[]]> = [
        [{ states: ['held'] }, [pending!, retrying!]],
        [{ states: ['pending'] }, []],
        [{ states: ['retrying'] }, []],
        [{ states: ['held', 'none'] }, [pending!, retrying!, none!]],
        [{ states: ['delivered'] }, [delivered!]],
      ];
      for (const [filter, ids] of cases) {
        assert.deepEqual(await allPages(store, 'p', filter, 2), newestFirst(ids), JSON.stringify(filter));
        assert.equal(await store.countRequests('p', filter), ids.length, JSON.stringify(filter));
      }
      const listed = (await store.listRequests('p', {}, { limit: 10 })).requests.map((r) => [r.id, r.state]);
      assert.deepEqual(listed, [
        [none, 'none'],
        [delivered, 'delivered'],
        [retrying, 'held'],
        [pending, 'held'],
      ]);
      assert.equal((await store.getRequest(retrying!))!.state, 'held');
      assert.deepEqual(
        (await iterated(store, 'p', { states: ['held'] })).map((r) => r.state),
        ['held', 'held'],
      );
      assert.deepEqual((await store.bucketCounts('p')).states, { held: 2, delivered: 1, none: 1 });
      await store.resumeBucket('p');
      assert.deepEqual(await allPages(store, 'p', { states: ['pending', 'retrying'] }), [retrying, pending]);
      assert.deepEqual(await allPages(store, 'p', { states: ['held'] }), []);
    });

    it('iteration gives whole requests oldest first and leaves out those stored after it began', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      // More than one read batch of bodies on any sensible dialect: 1,200 requests, 2 MiB.
      const first = await submitAll(
        ctx.set,
        Array.from({ length: 1200 }, (_, i) =>
          captured('b', T0 + i, { body: Buffer.alloc(1700 + (i % 7), i % 251), rawHeaders: ['X-I', String(i)] }),
        ),
      );
      const it = store.iterateRequests('b', {})[Symbol.asyncIterator]();
      const head = await it.next();
      assert.equal(head.done, false);
      assert.equal(head.value!.id, first[0]);
      const later = await submitAll(
        ctx.set,
        Array.from({ length: 5 }, (_, i) => captured('b', T0 + 5000 + i)),
      );
      const seen = [head.value!];
      for (let r = await it.next(); !r.done; r = await it.next()) seen.push(r.value);
      assert.deepEqual(
        seen.map((r) => r.id),
        first,
      );
      seen.forEach((r, i) => {
        assert.deepEqual(r.rawHeaders, ['X-I', String(i)]);
        assert.ok(r.body.equals(Buffer.alloc(1700 + (i % 7), i % 251)), `body ${i}`);
        assert.equal(r.state, 'pending');
      });
      assert.equal(await store.countRequests('b', {}), 1205, 'the later ones are there for the next iteration');
      assert.deepEqual(
        (await iterated(store, 'b', { ids: later })).map((r) => r.id),
        later,
      );
    });

    it('iteration with a limit gives the oldest n that match, across read batches', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'lim', destination: DEST });
      const all = await submitAll(
        ctx.set,
        Array.from({ length: 1203 }, (_, i) => captured('lim', T0 + i, { method: i % 3 === 0 ? 'PUT' : 'POST' })),
      );
      const take = async (filter: RequestFilter, limit: number) => {
        const out: string[] = [];
        for await (const r of store.iterateRequests('lim', filter, { limit })) out.push(r.id);
        return out;
      };
      assert.deepEqual(await take({}, 1), all.slice(0, 1));
      assert.deepEqual(await take({}, 501), all.slice(0, 501));
      assert.deepEqual(await take({}, 5000), all);
      const puts = all.filter((_, i) => i % 3 === 0);
      assert.deepEqual(await take({ methods: ['PUT'] }, 300), puts.slice(0, 300));
    });

    it('requestBatch walks what iterateRequests walks, one bounded batch a call (8 MiB of bodies at most), without later arrivals', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'rb', destination: DEST });
      await store.createBucket({ name: 'rb-empty', destination: DEST });
      const MIB = 1024 * 1024;
      const big = await submitAll(
        ctx.set,
        Array.from({ length: 10 }, (_, i) => captured('rb', T0 + i, { body: Buffer.alloc(MIB, i) })),
      );
      const first = await store.requestBatch('rb', {}, null);
      assert.deepEqual(
        first.requests.map((r) => r.id),
        big.slice(0, 8),
        'as many bodies as fit 8 MiB',
      );
      assert.ok(first.next);
      const later = await submitAll(ctx.set, [captured('rb', T0 + 100)]);
      const second = await store.requestBatch('rb', {}, first.next);
      assert.deepEqual(
        second.requests.map((r) => r.id),
        big.slice(8),
        'the rest, and not the request stored after the walk began',
      );
      assert.equal(second.next, null);
      assert.ok(second.requests[1]!.body.equals(Buffer.alloc(MIB, 9)));
      assert.deepEqual(
        (await iterated(store, 'rb', {})).map((r) => r.id),
        [...big, ...later],
      );
      const limited = await store.requestBatch('rb', {}, null, { limit: 3 });
      assert.deepEqual(
        limited.requests.map((r) => r.id),
        big.slice(0, 3),
      );
      assert.equal(limited.next, null);
      assert.deepEqual(await store.requestBatch('rb-empty', {}, null), { requests: [], next: null });
      await assert.rejects(store.requestBatch('nope', {}, null), { code: 'not_found' });
    });

    it('an unknown bucket is not_found for all three', async () => {
      const { store } = ctx.set;
      await assert.rejects(store.listRequests('nope', {}, { limit: 1 }), { code: 'not_found' });
      await assert.rejects(store.countRequests('nope', {}), { code: 'not_found' });
      await assert.rejects(
        async () => {
          for await (const _ of store.iterateRequests('nope', {})) void _;
        },
        { code: 'not_found' },
      );
    });
  });
}

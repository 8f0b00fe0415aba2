import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { StoredVerdict } from '../../../src/store/store.js';
import { selectReplay } from '../../../src/replay/select-replay.js';
import { captured, DEST, idAt, submitAll, T0, type Ctx } from './harness.js';

const VERIFIED: StoredVerdict = { scheme: 'github', result: 'verified', reason: null };
const INVALID: StoredVerdict = { scheme: 'github', result: 'invalid', reason: 'signature_mismatch' };
const WINDOW = 60_000;

/** Issue 15 on the store side: dispositions, verdicts and dedup written by ingest, read back everywhere. */
export function providerContract(ctx: Ctx): void {
  describe('provider: ingest writes', () => {
    it('stores disposition and verdict; only accepted requests get a delivery', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [ok, quarantined, handshake] = await submitAll(ctx.set, [
        captured('b', T0, { verdict: VERIFIED }),
        captured('b', T0 + 1, { disposition: 'quarantined', verdict: INVALID }),
        captured('b', T0 + 2, { disposition: 'handshake', method: 'GET' }),
      ]);
      const a = await store.getRequest(ok!);
      assert.equal(a!.disposition, 'accepted');
      assert.equal(a!.state, 'pending');
      assert.deepEqual(a!.verdict, VERIFIED);
      const q = await store.getRequest(quarantined!);
      assert.equal(q!.disposition, 'quarantined');
      assert.equal(q!.state, 'quarantined');
      assert.deepEqual(q!.verdict, INVALID);
      assert.deepEqual(await store.requestHistory(quarantined!), []);
      const h = await store.getRequest(handshake!);
      assert.equal(h!.state, 'handshake');
      assert.equal(h!.verdict, null);
      assert.deepEqual(await store.requestHistory(handshake!), []);
    });

    it('dedup: a key seen within the window makes a duplicate of the first, never delivered; the first of one batch wins', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const dedup = { key: 'h:evt_1', windowMs: WINDOW };
      // One batch: three copies of one key; the first in order is the original.
      const [first, second, third] = await submitAll(ctx.set, [
        captured('b', T0, { dedup }),
        captured('b', T0 + 1, { dedup }),
        captured('b', T0 + 2, { dedup }),
      ]);
      const f = await store.getRequest(first!);
      assert.equal(f!.disposition, 'accepted');
      assert.equal(f!.dedupKey, 'h:evt_1');
      assert.equal(f!.duplicateOf, null);
      for (const id of [second!, third!]) {
        const d = await store.getRequest(id);
        assert.equal(d!.disposition, 'duplicate');
        assert.equal(d!.state, 'duplicate');
        assert.equal(d!.dedupKey, 'h:evt_1');
        assert.equal(d!.duplicateOf, first);
        assert.deepEqual(await store.requestHistory(id), []);
      }
      // A later batch within the window: a duplicate too. Another key and another bucket are not.
      await store.createBucket({ name: 'c', destination: DEST });
      const [later, other, otherBucket] = await submitAll(ctx.set, [
        captured('b', T0 + WINDOW - 1, { dedup }),
        captured('b', T0 + 10, { dedup: { key: 'h:evt_2', windowMs: WINDOW } }),
        captured('c', T0 + 11, { dedup }),
      ]);
      assert.equal((await store.getRequest(later!))!.duplicateOf, first);
      assert.equal((await store.getRequest(other!))!.disposition, 'accepted');
      assert.equal((await store.getRequest(otherBucket!))!.disposition, 'accepted');
      // Past the window the key is free again: the new request takes it, and a copy of it repeats the new one.
      const [renewed] = await submitAll(ctx.set, [captured('b', T0 + WINDOW, { dedup })]);
      assert.equal((await store.getRequest(renewed!))!.disposition, 'accepted');
      assert.equal((await store.getRequest(renewed!))!.state, 'pending');
      const [again] = await submitAll(ctx.set, [captured('b', T0 + WINDOW + 5, { dedup })]);
      assert.equal((await store.getRequest(again!))!.duplicateOf, renewed);
    });

    it('dedup: a request that is not accepted neither registers a key nor is de-duplicated', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const dedup = { key: 'j:abc', windowMs: WINDOW };
      const [q] = await submitAll(ctx.set, [captured('b', T0, { disposition: 'quarantined', verdict: INVALID, dedup })]);
      const [real] = await submitAll(ctx.set, [captured('b', T0 + 1, { verdict: VERIFIED, dedup })]);
      assert.equal((await store.getRequest(q!))!.disposition, 'quarantined');
      assert.equal((await store.getRequest(real!))!.disposition, 'accepted');
      assert.equal((await store.getRequest(real!))!.state, 'pending');
    });

    it('import: rows of a verifying bucket are marked unverified (imported), accepted', async () => {
      const { store } = ctx.set;
      const b = await store.createBucket({ name: 'b', destination: DEST });
      const importer = await store.openImporter();
      try {
        const item = { method: 'POST', path: '', query: null, rawHeaders: ['A', '1'], body: Buffer.from('x') };
        const [v] = await importer.write({ name: 'b', createdAt: b.createdAt, verifyScheme: 'stripe' }, [item], { createDelivery: true });
        const [n] = await importer.write({ name: 'b', createdAt: b.createdAt }, [item], { createDelivery: false });
        const got = await store.getRequest(v!);
        assert.equal(got!.disposition, 'accepted');
        assert.deepEqual(got!.verdict, { scheme: 'stripe', result: 'unverified', reason: 'imported' });
        assert.equal(got!.state, 'pending');
        assert.equal((await store.getRequest(n!))!.verdict, null);
      } finally {
        await importer.close();
      }
    });
  });

  describe('provider: reads', () => {
    /** A bucket with one of each: accepted verified (delivered later), quarantined, duplicate, handshake, accepted without delivery. */
    async function mixed(): Promise<{ accepted: string; quarantined: string; duplicate: string; handshake: string; none: string }> {
      const { store } = ctx.set;
      await store.createBucket({ name: 'm', destination: DEST });
      const dedup = { key: 'h:k', windowMs: WINDOW };
      const [accepted, quarantined, duplicate, handshake] = await submitAll(ctx.set, [
        captured('m', T0, { verdict: VERIFIED, dedup }),
        captured('m', T0 + 1, { disposition: 'quarantined', verdict: INVALID }),
        captured('m', T0 + 2, { verdict: VERIFIED, dedup }),
        captured('m', T0 + 3, { disposition: 'handshake', method: 'GET' }),
      ]);
      const [none] = await submitAll(
        ctx.set,
        [captured('m', T0 + 4, { verdict: { scheme: 'github', result: 'missing', reason: null } })],
        false,
      );
      return { accepted: accepted!, quarantined: quarantined!, duplicate: duplicate!, handshake: handshake!, none: none! };
    }

    it('listings: a disposition state reads those requests only; none is accepted without a delivery; verdicts filter', async () => {
      const { store } = ctx.set;
      const ids = await mixed();
      const list = async (filter: Parameters<typeof store.listRequests>[1]) =>
        (await store.listRequests('m', filter, { limit: 50 })).requests.map((r) => [r.id, r.state, r.disposition]);
      assert.deepEqual(await list({ states: ['quarantined'] }), [[ids.quarantined, 'quarantined', 'quarantined']]);
      assert.deepEqual(await list({ states: ['duplicate'] }), [[ids.duplicate, 'duplicate', 'duplicate']]);
      assert.deepEqual(await list({ states: ['handshake'] }), [[ids.handshake, 'handshake', 'handshake']]);
      assert.deepEqual(await list({ states: ['none'] }), [[ids.none, 'none', 'accepted']]);
      assert.deepEqual(await list({ states: ['pending', 'quarantined'] }), [
        [ids.quarantined, 'quarantined', 'quarantined'],
        [ids.accepted, 'pending', 'accepted'],
      ]);
      // No state: everything, newest first, each with its disposition and verdict.
      const all = (await store.listRequests('m', {}, { limit: 50 })).requests;
      assert.deepEqual(
        all.map((r) => [r.state, r.verdict?.result ?? null]),
        [
          ['none', 'missing'],
          ['handshake', null],
          ['duplicate', 'verified'],
          ['quarantined', 'invalid'],
          ['pending', 'verified'],
        ],
      );
      assert.deepEqual(all[3]!.verdict, INVALID);
      assert.deepEqual(await list({ verified: ['invalid', 'missing'] }), [
        [ids.none, 'none', 'accepted'],
        [ids.quarantined, 'quarantined', 'quarantined'],
      ]);
      assert.deepEqual(await list({ verified: ['verified'], states: ['duplicate'] }), [[ids.duplicate, 'duplicate', 'duplicate']]);
      assert.deepEqual(await list({ verified: ['unverified'] }), []);
      // A status filter needs a delivery: the dispositions have none.
      assert.deepEqual(await list({ states: ['quarantined'], status: { class: 5 } }), []);
      // Pages through the disposition index by id.
      const p1 = await store.listRequests('m', { states: ['quarantined', 'duplicate', 'handshake'] }, { limit: 2 });
      assert.deepEqual(
        p1.requests.map((r) => r.id),
        [ids.handshake, ids.duplicate],
      );
      const p2 = await store.listRequests('m', { states: ['quarantined', 'duplicate', 'handshake'] }, { limit: 2, before: p1.nextCursor! });
      assert.deepEqual(
        p2.requests.map((r) => r.id),
        [ids.quarantined],
      );
      assert.equal(p2.nextCursor, null);
      assert.equal(await store.countRequests('m', { states: ['quarantined', 'duplicate', 'handshake'] }), 3);
      assert.equal(await store.countRequests('m', { states: ['none'] }), 1);
      assert.equal(await store.countRequests('m', { verified: ['verified'] }), 2);
      const iterated = [];
      for await (const r of store.iterateRequests('m', { states: ['duplicate'] })) iterated.push(r);
      assert.equal(iterated.length, 1);
      assert.equal(iterated[0]!.duplicateOf, ids.accepted);
      assert.equal(iterated[0]!.dedupKey, 'h:k');
      assert.deepEqual(iterated[0]!.verdict, VERIFIED);
    });

    it('counts, stats, overview and tail report dispositions; none stays accepted-without-delivery', async () => {
      const { store } = ctx.set;
      const ids = await mixed();
      const states = { duplicate: 1, handshake: 1, none: 1, pending: 1, quarantined: 1 };
      assert.deepEqual((await store.bucketCounts('m')).states, states);
      assert.deepEqual((await store.allBucketCounts()).get('m')!.states, states);
      const overview = await store.bucketOverview({ limit: 10, sinceMs: T0, binMs: 1000, bins: 0 });
      assert.deepEqual(overview.buckets[0]!.counts.states, states);
      const stats = await store.statsSamples({ sinceMs: T0, untilMs: T0 + 1000 });
      const m = stats.buckets.find((b) => b.bucket === 'm')!;
      assert.deepEqual(m.dispositions, { duplicate: 1, handshake: 1, quarantined: 1 });
      assert.equal(m.requests, 5);
      const { events } = await store.tail('m', { requestId: '', sinceMs: T0, seen: [] });
      const byId = new Map(events.flatMap((e) => (e.kind === 'request' ? [[e.request.id, e.request] as const] : [])));
      assert.equal(byId.get(ids.quarantined)!.disposition, 'quarantined');
      assert.equal(byId.get(ids.quarantined)!.state, 'quarantined');
      assert.deepEqual(byId.get(ids.quarantined)!.verdict, INVALID);
      assert.equal(byId.get(ids.accepted)!.disposition, 'accepted');
    });
  });

  describe('provider: retention and delete', () => {
    it('prune deletes old non-accepted requests whatever the states named, and expired dedup keys', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'p', destination: DEST });
      const dedup = { key: 'h:x', windowMs: WINDOW };
      const [orig, dup, q, h] = await submitAll(ctx.set, [
        captured('p', T0, { dedup }),
        captured('p', T0 + 1, { dedup }),
        captured('p', T0 + 2, { disposition: 'quarantined', verdict: INVALID }),
        captured('p', T0 + 3, { disposition: 'handshake' }),
      ]);
      const [none] = await submitAll(ctx.set, [captured('p', T0 + 4)], false);
      const [young] = await submitAll(ctx.set, [captured('p', T0 + 10_000, { disposition: 'handshake' })]);
      const options = { bucket: 'p', receivedBeforeMs: T0 + 5_000, states: ['delivered' as const], nowMs: T0 + 1000 };
      // Not yet expired: the key stays.
      const dry = await store.prune({ ...options, dryRun: true });
      assert.equal(dry.requests, 3);
      assert.equal(dry.dedupKeys, 0);
      const r = await store.prune({ ...options, dryRun: false });
      assert.equal(r.requests, 3);
      for (const id of [dup!, q!, h!]) assert.equal(await store.getRequest(id), undefined);
      for (const id of [orig!, none!, young!]) assert.ok(await store.getRequest(id), 'kept');
      // The key is still live: a copy is a duplicate of the original.
      const [copy] = await submitAll(ctx.set, [captured('p', T0 + 2000, { dedup })]);
      assert.equal((await store.getRequest(copy!))!.duplicateOf, orig);
      // Once expired, prune deletes it (a dry run counts it first).
      assert.equal((await store.prune({ ...options, nowMs: T0 + WINDOW, dryRun: true })).dedupKeys, 1);
      assert.equal((await store.prune({ ...options, nowMs: T0 + WINDOW, dryRun: false })).dedupKeys, 1);
      assert.equal((await store.prune({ ...options, nowMs: T0 + WINDOW, dryRun: false })).dedupKeys, 0);
    });

    it('bucket delete purges its dedup keys: a new bucket of that name starts with none', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'd', destination: DEST });
      const dedup = { key: 'h:y', windowMs: WINDOW };
      await submitAll(ctx.set, [captured('d', T0, { dedup })]);
      await store.deleteBucket('d', { force: true });
      await store.createBucket({ name: 'd', destination: DEST });
      const [again] = await submitAll(ctx.set, [captured('d', T0 + 1, { dedup })]);
      assert.equal((await store.getRequest(again!))!.disposition, 'accepted');
    });
  });

  describe('provider: replay', () => {
    it('selects only accepted requests unless the state is named; a replayed quarantined request becomes accepted and delivered', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'r', destination: DEST });
      const [ok, q] = await submitAll(ctx.set, [
        captured('r', T0),
        captured('r', T0 + 1, { disposition: 'quarantined', verdict: INVALID }),
      ]);
      const base = { bucket: 'r', all: true, to: null };
      const plain = await selectReplay(store, { ...base, filter: {} });
      assert.deepEqual(plain.ids, [ok]);
      const named = await selectReplay(store, { ...base, all: false, filter: { states: ['quarantined'] } });
      assert.deepEqual(named.ids, [q]);
      await assert.rejects(selectReplay(store, { ...base, all: false, filter: { ids: [q!] } }), /--state quarantined/);
      await store.createReplay({
        id: idAt(T0 + 5),
        bucket: 'r',
        requestIds: [q!],
        selection: {},
        destination: null,
        rate: null,
        nowMs: T0 + 5,
      });
      const after = await store.getRequest(q!);
      assert.equal(after!.disposition, 'accepted');
      assert.equal(after!.state, 'pending');
      assert.deepEqual(after!.verdict, INVALID, 'the verdict stays as evidence');
      assert.deepEqual((await store.bucketCounts('r')).states, { pending: 2 });
    });
  });
}

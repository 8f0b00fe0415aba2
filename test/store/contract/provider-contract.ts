import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { StoredVerdict } from '../../../src/store/store.js';
import { captured, DEST, submitAll, T0, type Ctx } from './harness.js';

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
}

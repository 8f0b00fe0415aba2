import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { StoredVerdict } from '../../../src/store/store.js';
import { captured, claim, DEST, submitAll, T0, type Ctx } from './harness.js';

const INVALID: StoredVerdict = { scheme: 'stripe', result: 'invalid', reason: 'no_matching_signature' };
const VERIFIED: StoredVerdict = { scheme: 'stripe', result: 'verified', reason: 'signature_matches' };
const LATER = T0 + 3_600_000;

/** `requests verify`: Store.applyVerdicts stores re-checked verdicts and releases quarantined requests. */
export function verdictsContract(ctx: Ctx): void {
  describe('verdicts: applyVerdicts', () => {
    it('with release: a quarantined request that now verifies is accepted and gets its first delivery, due now', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [q, stillBad, accepted] = await submitAll(ctx.set, [
        captured('b', T0, { disposition: 'quarantined', verdict: INVALID }),
        captured('b', T0 + 1, { disposition: 'quarantined', verdict: INVALID }),
        captured('b', T0 + 2, { verdict: VERIFIED }),
      ]);
      // The accepted one's delivery is claimed away, so the claim below sees only the released one.
      const first = await claim(ctx.set, 'b', T0 + 10);
      assert.deepEqual(
        first.claimed.map((a) => a.requestId),
        [accepted],
      );
      const out = await store.applyVerdicts(
        'b',
        [
          { id: q!, verdict: VERIFIED, release: true },
          { id: stillBad!, verdict: INVALID, release: true },
          { id: accepted!, verdict: VERIFIED, release: true },
          { id: 'no-such-id', verdict: VERIFIED, release: true },
        ],
        LATER,
      );
      assert.equal(out.updated, 3);
      assert.deepEqual(out.released, [q]);
      assert.deepEqual(out.duplicates, []);
      const r = await store.getRequest(q!);
      assert.equal(r!.disposition, 'accepted');
      assert.equal(r!.state, 'pending');
      assert.deepEqual(r!.verdict, VERIFIED);
      const history = await store.requestHistory(q!);
      assert.equal(history.length, 1);
      assert.equal(history[0]!.generation, 1);
      const s = await store.getRequest(stillBad!);
      assert.equal(s!.state, 'quarantined');
      assert.deepEqual(await store.requestHistory(stillBad!), []);
      // Only one generation for the accepted one: release never touches a request that was not quarantined.
      assert.equal((await store.requestHistory(accepted!)).length, 1);
      // Due now: the worker claims it.
      const next = await claim(ctx.set, 'b', LATER);
      assert.deepEqual(
        next.claimed.map((a) => a.requestId),
        [q],
      );
      // Listing by state finds it among pending, no longer among quarantined.
      assert.equal(await store.countRequests('b', { states: ['quarantined'] }), 1);
    });

    it('without release: the verdict is updated and the request stays quarantined, with no delivery', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [q] = await submitAll(ctx.set, [captured('b', T0, { disposition: 'quarantined', verdict: INVALID })]);
      const out = await store.applyVerdicts('b', [{ id: q!, verdict: VERIFIED, release: false }], LATER);
      assert.deepEqual(out, { updated: 1, released: [], duplicates: [] });
      const r = await store.getRequest(q!);
      assert.equal(r!.state, 'quarantined');
      assert.deepEqual(r!.verdict, VERIFIED);
      assert.deepEqual(await store.requestHistory(q!), []);
      assert.equal((await claim(ctx.set, 'b', LATER)).claimed.length, 0);
    });

    it("a bucket without a destination: released requests are accepted with no delivery; another bucket's ids are skipped", async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: null });
      await store.createBucket({ name: 'c', destination: DEST });
      const [q] = await submitAll(ctx.set, [captured('b', T0, { disposition: 'quarantined', verdict: INVALID })], false);
      const [other] = await submitAll(ctx.set, [captured('c', T0, { disposition: 'quarantined', verdict: INVALID })]);
      const out = await store.applyVerdicts(
        'b',
        [
          { id: q!, verdict: VERIFIED, release: true },
          { id: other!, verdict: VERIFIED, release: true },
        ],
        LATER,
      );
      assert.deepEqual(out, { updated: 1, released: [q], duplicates: [] });
      const r = await store.getRequest(q!);
      assert.equal(r!.disposition, 'accepted');
      assert.equal(r!.state, 'none');
      assert.equal((await store.getRequest(other!))!.state, 'quarantined');
      await assert.rejects(store.applyVerdicts('nope', [], LATER), (e: { code?: string }) => e.code === 'not_found');
    });
  });

  describe('verdicts: release on a bucket with dedup', () => {
    const WINDOW = 60_000;
    const key = (k: string) => ({ key: k, windowMs: WINDOW });

    it("the sender's verified retry holds the key: the released original becomes its duplicate, never delivered", async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      // Ingest registers no key for a quarantined request; the retry, verified after the fix, takes it.
      const [original] = await submitAll(ctx.set, [captured('b', T0, { disposition: 'quarantined', verdict: INVALID })]);
      const [retry] = await submitAll(ctx.set, [captured('b', T0 + 1_000, { verdict: VERIFIED, dedup: key('j:evt_1') })]);
      const out = await store.applyVerdicts('b', [{ id: original!, verdict: VERIFIED, release: true, dedup: key('j:evt_1') }], LATER);
      assert.deepEqual(out, { updated: 1, released: [], duplicates: [{ id: original!, duplicateOf: retry! }] });
      const r = await store.getRequest(original!);
      assert.equal(r!.disposition, 'duplicate');
      assert.equal(r!.state, 'duplicate');
      assert.equal(r!.duplicateOf, retry);
      assert.equal(r!.dedupKey, 'j:evt_1');
      assert.deepEqual(r!.verdict, VERIFIED);
      assert.deepEqual(await store.requestHistory(original!), []);
      // Only the retry is ever delivered.
      assert.deepEqual(
        (await claim(ctx.set, 'b', LATER)).claimed.map((a) => a.requestId),
        [retry],
      );
      assert.equal(await store.countRequests('b', { states: ['duplicate'] }), 1);
      // Released again: it is no longer quarantined, so nothing changes.
      const again = await store.applyVerdicts('b', [{ id: original!, verdict: VERIFIED, release: true, dedup: key('j:evt_1') }], LATER);
      assert.deepEqual(again, { updated: 1, released: [], duplicates: [] });
    });

    it('released first, the original takes the key: a retry within the window of its arrival is the duplicate', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [original, other] = await submitAll(ctx.set, [
        captured('b', T0, { disposition: 'quarantined', verdict: INVALID }),
        captured('b', T0 + 1, { disposition: 'quarantined', verdict: INVALID }),
      ]);
      const out = await store.applyVerdicts(
        'b',
        [
          { id: original!, verdict: VERIFIED, release: true, dedup: key('j:evt_2') },
          // No key in the request (or no dedup on the bucket): released as before.
          { id: other!, verdict: VERIFIED, release: true },
        ],
        T0 + 10,
      );
      assert.deepEqual(out, { updated: 2, released: [original, other], duplicates: [] });
      const r = await store.getRequest(original!);
      assert.equal(r!.disposition, 'accepted');
      assert.equal(r!.dedupKey, 'j:evt_2');
      assert.equal(r!.duplicateOf, null);
      assert.equal((await store.getRequest(other!))!.dedupKey, null);
      const [retry] = await submitAll(ctx.set, [captured('b', T0 + WINDOW - 1, { verdict: VERIFIED, dedup: key('j:evt_2') })]);
      assert.equal((await store.getRequest(retry!))!.duplicateOf, original);
      assert.deepEqual((await claim(ctx.set, 'b', T0 + WINDOW)).claimed.map((a) => a.requestId).sort(), [original, other].sort());
    });

    it("the window counts from the released request's arrival, not from the release", async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [original] = await submitAll(ctx.set, [captured('b', T0, { disposition: 'quarantined', verdict: INVALID })]);
      // Released an hour later (past the window): it takes the key until T0 + WINDOW.
      const out = await store.applyVerdicts('b', [{ id: original!, verdict: VERIFIED, release: true, dedup: key('j:evt_3') }], LATER);
      assert.deepEqual(out.released, [original]);
      const [late] = await submitAll(ctx.set, [captured('b', T0 + WINDOW, { verdict: VERIFIED, dedup: key('j:evt_3') })]);
      assert.equal((await store.getRequest(late!))!.disposition, 'accepted');
      // A key whose hold ended before the quarantined request arrived does not make it a duplicate.
      const [old] = await submitAll(ctx.set, [captured('b', T0 + 2 * WINDOW, { disposition: 'quarantined', verdict: INVALID })]);
      await submitAll(ctx.set, [captured('b', T0 + WINDOW - 5, { verdict: VERIFIED, dedup: key('j:evt_4') })]);
      const freed = await store.applyVerdicts('b', [{ id: old!, verdict: VERIFIED, release: true, dedup: key('j:evt_4') }], LATER);
      assert.deepEqual(freed, { updated: 1, released: [old], duplicates: [] });
      // It took the key over: a copy arriving after it repeats it.
      const [copy] = await submitAll(ctx.set, [captured('b', T0 + 2 * WINDOW + 1, { verdict: VERIFIED, dedup: key('j:evt_4') })]);
      assert.equal((await store.getRequest(copy!))!.duplicateOf, old);
    });

    it('two quarantined copies of one event released together: the older is accepted, the newer is its duplicate', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [first, second] = await submitAll(ctx.set, [
        captured('b', T0, { disposition: 'quarantined', verdict: INVALID }),
        captured('b', T0 + 5, { disposition: 'quarantined', verdict: INVALID }),
      ]);
      // Given newest first: the outcome follows the requests' order, not the call's.
      const out = await store.applyVerdicts(
        'b',
        [
          { id: second!, verdict: VERIFIED, release: true, dedup: key('h:msg_1') },
          { id: first!, verdict: VERIFIED, release: true, dedup: key('h:msg_1') },
        ],
        LATER,
      );
      assert.deepEqual(out, { updated: 2, released: [first], duplicates: [{ id: second!, duplicateOf: first! }] });
      assert.deepEqual(
        (await claim(ctx.set, 'b', LATER)).claimed.map((a) => a.requestId),
        [first],
      );
    });
  });
}

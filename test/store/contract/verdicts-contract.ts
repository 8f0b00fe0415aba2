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
      assert.deepEqual(out, { updated: 1, released: [] });
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
      assert.deepEqual(out, { updated: 1, released: [q] });
      const r = await store.getRequest(q!);
      assert.equal(r!.disposition, 'accepted');
      assert.equal(r!.state, 'none');
      assert.equal((await store.getRequest(other!))!.state, 'quarantined');
      await assert.rejects(store.applyVerdicts('nope', [], LATER), (e: { code?: string }) => e.code === 'not_found');
    });
  });
}

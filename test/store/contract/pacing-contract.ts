import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { claim, DEST, drainBucket, ingestN, LEASE_MS, result, T0, type Ctx } from './harness.js';

const SECOND = 1000;

/**
 * The pacer state is the store's (src/store/pacer-row.ts): a second drain store on the same
 * database (another worker process, or the same worker after a restart) finds the tokens, the
 * retry budget and the Retry-After block where the first left them. Processes register with
 * heartbeats, and attempt rows name their worker.
 */
export function pacingContract(ctx: Ctx): void {
  describe('pacer state and processes', () => {
    it('a second drain store (a restarted or another worker) finds the tokens the first one took', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST, drain: { rate: { count: 1, perMs: SECOND }, burst: 1 } });
      await ingestN(ctx.set, 'b', 3, T0);
      const now = T0 + 100;
      assert.equal((await claim(ctx.set, 'b', now)).claimed.length, 1);
      const other = await ctx.set.anotherDrain();
      const b = await drainBucket(ctx.set, 'b');
      const early = await other.claim(b, { nowMs: now + 10, limit: 10, leaseUntilMs: now + 10 + LEASE_MS }, {});
      assert.deepEqual([early.claimed.length, early.verdict.deferred, early.verdict.wakeAt], [0, { rate: 1 }, now + SECOND]);
      const later = await other.claim(b, { nowMs: now + SECOND, limit: 10, leaseUntilMs: now + SECOND + LEASE_MS }, {});
      assert.equal(later.claimed.length, 1);
    });

    it('rate tokens within the horizon are claimed now, each attempt starting (and leased) at its token time', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST, drain: { rate: { count: 10, perMs: SECOND }, burst: 1 } }); // a token every 100 ms
      await ingestN(ctx.set, 'b', 5, T0);
      const now = T0 + SECOND;
      const c = await claim(ctx.set, 'b', now, { policy: { horizonMs: 250 } });
      assert.deepEqual(
        c.claimed.map((a) => [a.startedAt - now, a.sendAfterMs]),
        [
          [0, 0],
          [100, 100],
          [200, 200],
        ],
      );
      // The 300 ms token is past the horizon: held by the rate, back as it enters the horizon.
      assert.deepEqual([c.verdict.deferred, c.verdict.rateAt - now, c.verdict.wakeAt - now], [{ rate: 1 }, 300, 50]);
      for (const [i, a] of c.claimed.entries()) {
        const [h] = await store.requestHistory(a.requestId);
        assert.equal(h!.attemptLog[0]!.startedAt, now + 100 * i, 'the attempt row starts at its token time');
      }
      // Each lease runs from its attempt's start: 150 ms past the first lease, two have expired.
      const expired = await ctx.set.drain.recoverExpired(now + LEASE_MS + 150, [await drainBucket(ctx.set, 'b')]);
      assert.deepEqual(
        expired.map((e) => e.deliveryId).sort(),
        c.claimed
          .slice(0, 2)
          .map((a) => a.deliveryId)
          .sort(),
      );
      // The next claim finds the tokens taken: the next one is at 300 ms.
      const again = await claim(ctx.set, 'b', now + 10, { policy: { horizonMs: 250 } });
      assert.deepEqual([again.claimed.length, again.verdict.rateAt - now], [0, 300]);
    });

    it('a Retry-After block outlives the drain store that recorded it', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      await ingestN(ctx.set, 'b', 2, T0);
      const [a] = (await claim(ctx.set, 'b', T0 + SECOND, { limit: 1 })).claimed;
      const until = T0 + 40 * SECOND;
      await ctx.set.drain.complete([
        { ...result(a!, T0 + SECOND + 3, 'retry', { status: 503, nextAttemptAt: until }), block: { bucket: 'b', untilMs: until } },
      ]);
      await ctx.set.drain.close();
      const restarted = await ctx.set.anotherDrain();
      const b = await drainBucket({ ...ctx.set, drain: restarted }, 'b');
      const r = await restarted.claim(b, { nowMs: T0 + 2 * SECOND, limit: 10, leaseUntilMs: T0 + 2 * SECOND + LEASE_MS }, {});
      assert.deepEqual([r.claimed.length, r.verdict.deferred, r.verdict.wakeAt], [0, { retry_after: 1 }, until]);
    });

    it('the retry budget counts the attempts of every drain store', async () => {
      const { store } = ctx.set;
      // No floor, 1 retry per first attempt: the two first attempts below allow two retries in the window.
      await store.createBucket({ name: 'b', destination: DEST, drain: { retryBudget: { fraction: 1, floorPerSecond: 0 } } });
      await ingestN(ctx.set, 'b', 2, T0);
      const first = (await claim(ctx.set, 'b', T0 + SECOND)).claimed;
      assert.equal(first.length, 2);
      await ctx.set.drain.complete(first.map((a) => result(a, T0 + SECOND + 5, 'retry', { status: 500, nextAttemptAt: T0 + 2 * SECOND })));
      // Both retries go through the other store (2 allowed); failing again, a third retry is over budget.
      const other = await ctx.set.anotherDrain();
      const b = await drainBucket(ctx.set, 'b');
      const second = await other.claim(b, { nowMs: T0 + 2 * SECOND, limit: 10, leaseUntilMs: T0 + 2 * SECOND + LEASE_MS }, {});
      assert.equal(second.claimed.length, 2);
      await other.complete(
        second.claimed.map((a) => result(a, T0 + 2 * SECOND + 5, 'retry', { status: 500, nextAttemptAt: T0 + 3 * SECOND })),
      );
      const third = await claim(ctx.set, 'b', T0 + 3 * SECOND);
      assert.deepEqual([third.claimed.length, third.verdict.deferred], [0, { retry_budget: 1 }]);
    });

    it('attempt rows name the worker that made them; processes register, beat and stop', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [id] = await ingestN(ctx.set, 'b', 1, T0);
      const b = await drainBucket(ctx.set, 'b');
      await ctx.set.drain.heartbeat({ id: 'w-1', roles: ['worker'], host: 'h', pid: 7, info: '{}', leaseMs: LEASE_MS }, T0, 15 * SECOND);
      await store.heartbeat({ id: 'r-1', roles: ['receiver'], host: 'h', pid: 8, info: '{"url":"x"}', leaseMs: null }, T0, 15 * SECOND);
      const c = await ctx.set.drain.claim(b, { nowMs: T0 + SECOND, limit: 1, leaseUntilMs: T0 + SECOND + LEASE_MS, workerId: 'w-1' }, {});
      assert.equal(c.claimed.length, 1);
      assert.equal((await store.requestHistory(id!))[0]!.attemptLog[0]!.workerId, 'w-1');
      const alive = await store.processes(T0 + 2 * SECOND);
      assert.deepEqual(alive.map((p) => [p.id, p.roles, p.alive, p.leaseMs, p.inflight]).sort(), [
        ['r-1', ['receiver'], true, null, 0],
        ['w-1', ['worker'], true, LEASE_MS, 1],
      ]);
      await ctx.set.drain.markStopped('w-1', T0 + 3 * SECOND);
      const after = await store.processes(T0 + 3 * SECOND);
      assert.deepEqual(after.map((p) => [p.id, p.alive, p.stoppedAt]).sort(), [
        ['r-1', true, null],
        ['w-1', false, T0 + 3 * SECOND],
      ]);
      // A receiver that stops beating is dead once its TTL passes.
      assert.equal((await store.processes(T0 + 16 * SECOND)).find((p) => p.id === 'r-1')!.alive, false);
      // Newer rows past the limit (stopped `worker --once` runs) never hide a live process.
      await store.heartbeat(
        { id: 'r-1', roles: ['receiver'], host: 'h', pid: 8, info: '{}', leaseMs: null },
        T0 + 20 * SECOND,
        15 * SECOND,
      );
      for (let i = 0; i < 3; i++) {
        await ctx.set.drain.heartbeat(
          { id: `once-${i}`, roles: ['worker'], host: 'h', pid: 10 + i, info: '{}', leaseMs: LEASE_MS },
          T0 + 21 * SECOND + i,
          15 * SECOND,
        );
        await ctx.set.drain.markStopped(`once-${i}`, T0 + 21 * SECOND + i);
      }
      const few = await store.processes(T0 + 22 * SECOND, { limit: 2 });
      assert.ok(
        few.some((p) => p.id === 'r-1' && p.alive),
        few.map((p) => p.id).join(', '),
      );
      assert.ok(
        few.some((p) => p.id === 'w-1' && p.inflight === 1),
        'the stopped worker still holding a delivery is listed',
      );
    });
  });
}

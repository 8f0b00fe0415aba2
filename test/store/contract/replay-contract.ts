import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { NewReplay } from '../../../src/store/store.js';
import { progress } from '../../helpers/replay-progress.js';
import { claim, DEST, idAt, ingestN, result, T0, type Ctx } from './harness.js';

const SECOND = 1000;
const TO = 'http://127.0.0.1:9/staging';

export function replayContract(ctx: Ctx): void {
  describe('replay and supersede', () => {
    let seq = 0;
    const replay = (bucket: string, requestIds: string[], at: number, o: Partial<NewReplay> = {}) =>
      ctx.set.store.createReplay({
        id: idAt(at + seq++),
        bucket,
        requestIds,
        selection: { states: ['failed'], n: requestIds.length },
        destination: null,
        rate: null,
        nowMs: at,
        ...o,
      });
    const generations = async (id: string) =>
      (await ctx.set.store.requestHistory(id)).map((d) => [d.generation, d.state, d.latest, d.destination, d.trigger]);

    it('a settled request gets a new generation; the old one stays with its attempts', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [id] = await ingestN(ctx.set, 'b', 1, T0);
      const a = (await claim(ctx.set, 'b', T0)).claimed[0]!;
      await drain.complete([result(a, T0 + 10, 'exhausted', { status: 500 })]);
      const r = await replay('b', [id!], T0 + SECOND);
      assert.deepEqual(
        { ...r, id: undefined },
        {
          id: undefined,
          bucket: 'b',
          selection: { states: ['failed'], n: 1 },
          destination: null,
          rate: null,
          total: 1,
          superseded: 0,
          createdAt: T0 + SECOND,
        },
      );
      assert.deepEqual(await store.getReplay(r.id), r);
      assert.equal(await store.getReplay(idAt(T0)), undefined);
      assert.deepEqual(await generations(id!), [
        [1, 'exhausted', false, null, 'initial'],
        [2, 'pending', true, null, 'replay'],
      ]);
      assert.equal((await store.getRequest(id!))!.state, 'pending');
      assert.deepEqual(await store.replayProgress(r.id), progress({ total: 1, pending: 1 }));
      assert.deepEqual(await drain.dueBuckets(T0 + SECOND), ['b']);
      const a2 = (await claim(ctx.set, 'b', T0 + SECOND)).claimed[0]!;
      assert.deepEqual([a2.generation, a2.number, a2.trigger, a2.replayId], [2, 1, 'replay', r.id]);
      await drain.complete([result(a2, T0 + 2 * SECOND, 'delivered')]);
      assert.deepEqual(await store.replayProgress(r.id), progress({ total: 1, delivered: 1, settled: 1, lastSettledAt: T0 + 2 * SECOND }));
      const history = await store.requestHistory(id!);
      assert.deepEqual(
        history.map((d) => d.attemptLog.map((x) => x.status)),
        [[500], [200]],
      );
      assert.deepEqual(
        history.map((d) => d.replayId),
        [null, r.id],
      );
      const listed = (await store.listRequests('b', {}, { limit: 1 })).requests[0]!;
      assert.deepEqual([listed.state, listed.generation, listed.attempts, listed.lastStatus], ['delivered', 2, 1, 200]);
    });

    it('supersedes pending and retrying deliveries at once; generations count per request', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [retrying, pending] = await ingestN(ctx.set, 'b', 2, T0);
      const a = (await claim(ctx.set, 'b', T0, { limit: 1 })).claimed[0]!;
      await drain.complete([result(a, T0 + 10, 'retry', { status: 503, nextAttemptAt: T0 + 60 * SECOND })]);
      const r = await replay('b', [retrying!, pending!, idAt(T0 + 5)], T0 + SECOND);
      assert.deepEqual([r.total, r.superseded], [2, 2], 'an id not in the bucket is left out');
      for (const id of [retrying!, pending!]) {
        const [g1, g2] = await store.requestHistory(id);
        assert.deepEqual([g1!.state, g1!.settledAt, g1!.latest], ['superseded', T0 + SECOND, false]);
        assert.deepEqual([g2!.state, g2!.latest, g2!.generation], ['pending', true, 2]);
      }
      await replay('b', [pending!], T0 + 2 * SECOND);
      assert.deepEqual(
        (await generations(pending!)).map(([g, s]) => [g, s]),
        [
          [1, 'superseded'],
          [2, 'superseded'],
          [3, 'pending'],
        ],
      );
      assert.deepEqual(
        await store.replayProgress(r.id),
        progress({ total: 2, pending: 1, superseded: 1, settled: 1, lastSettledAt: T0 + 2 * SECOND }),
      );
      // Only the latest generation is claimed; the request stays one row in listings.
      const claimed = (await claim(ctx.set, 'b', T0 + 3 * SECOND)).claimed;
      assert.deepEqual(
        claimed.map((c) => [c.requestId, c.generation]).sort(),
        [
          [pending!, 3],
          [retrying!, 2],
        ].sort(),
      );
      assert.equal(await store.countRequests('b', {}), 2);
      assert.equal((await store.bucketCounts('b')).requests, 2);
    });

    it('an in-flight attempt finishes and is recorded, then its delivery is superseded; the new generation waits for it', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const ids = await ingestN(ctx.set, 'b', 4, T0);
      const inflight = (await claim(ctx.set, 'b', T0 + 10)).claimed;
      assert.equal(inflight.length, 4);
      const r = await replay('b', ids, T0 + SECOND);
      assert.deepEqual([r.total, r.superseded], [4, 4]);
      const [g1] = await store.requestHistory(ids[0]!);
      assert.deepEqual([g1!.state, g1!.supersedeRequested, g1!.latest], ['delivering', true, false]);
      assert.equal((await store.getRequest(ids[0]!))!.state, 'pending', 'the state follows the new generation');
      assert.equal((await claim(ctx.set, 'b', T0 + 2 * SECOND)).claimed.length, 0, 'never two attempts in flight for one request');
      const at = T0 + 3 * SECOND;
      // Whatever the outcome (delivered, retry, failed, released), the old generation ends superseded.
      await drain.complete([
        result(inflight[0]!, at, 'delivered'),
        result(inflight[1]!, at, 'retry', { status: 503, nextAttemptAt: at + 60 * SECOND }),
        result(inflight[2]!, at, 'failed', { status: 400 }),
        result(inflight[3]!, at, 'released', { nextAttemptAt: at }),
      ]);
      for (const [i, id] of ids.entries()) {
        const [old, fresh] = await store.requestHistory(id);
        assert.deepEqual([old!.state, old!.settledAt, fresh!.state], ['superseded', at, 'pending'], `request ${i}`);
      }
      assert.deepEqual(
        (await store.requestHistory(ids[0]!))[0]!.attemptLog.map((x) => [x.status, x.outcome]),
        [[200, 'delivered']],
        'its attempt is recorded as it went',
      );
      const next = (await claim(ctx.set, 'b', at)).claimed;
      assert.deepEqual(
        next.map((c) => [c.generation, c.number]),
        [
          [2, 1],
          [2, 1],
          [2, 1],
          [2, 1],
        ],
      );
    });

    it('an in-flight delivery marked to be superseded is superseded when its lease expires', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [id] = await ingestN(ctx.set, 'b', 1, T0);
      await claim(ctx.set, 'b', T0, { leaseMs: 10 * SECOND });
      await replay('b', [id!], T0 + SECOND);
      assert.equal((await drain.recoverExpired(T0 + 10 * SECOND, await drain.listBuckets())).length, 1);
      assert.deepEqual(
        (await generations(id!)).map(([g, s]) => [g, s]),
        [
          [1, 'superseded'],
          [2, 'pending'],
        ],
      );
      assert.equal((await claim(ctx.set, 'b', T0 + 10 * SECOND)).claimed[0]?.generation, 2);
    });

    it('a replay --to another URL supersedes nothing and leaves the state alone; it goes out of a bucket without a destination too', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      await store.createBucket({ name: 'n' });
      const [id] = await ingestN(ctx.set, 'b', 1, T0);
      const [stored] = await ingestN(ctx.set, 'n', 1, T0, {}, false);
      await store.pauseBucket('b');
      const r = await replay('b', [id!], T0 + SECOND, { destination: TO });
      assert.deepEqual([r.superseded, r.destination], [0, TO]);
      assert.deepEqual(await generations(id!), [
        [1, 'pending', true, null, 'initial'],
        [2, 'pending', false, TO, 'replay'],
      ]);
      assert.equal((await store.getRequest(id!))!.state, 'held');
      assert.deepEqual(await store.replayProgress(r.id), progress({ total: 1, held: 1, paused: true }));
      assert.deepEqual(await drain.dueBuckets(T0 + SECOND), [], 'paused: held like the rest');
      await store.resumeBucket('b');
      const claimed = (await claim(ctx.set, 'b', T0 + 2 * SECOND)).claimed;
      const to = claimed.find((c) => c.destination === TO)!;
      assert.deepEqual([to.generation, to.url], [2, TO]);
      assert.equal(claimed.length, 2, 'the --to row is not held back by generation 1 to the bucket destination');

      const rn = await replay('n', [stored!], T0 + 3 * SECOND, { destination: `${TO}/n` });
      assert.equal((await store.getRequest(stored!))!.state, 'none', 'a --to row is not the request state');
      assert.deepEqual(await drain.dueBuckets(T0 + 3 * SECOND), ['n']);
      const sent = (await claim(ctx.set, 'n', T0 + 3 * SECOND)).claimed;
      assert.deepEqual(
        sent.map((c) => [c.requestId, c.destination, c.replayId]),
        [[stored, `${TO}/n`, rn.id]],
      );
      await drain.complete([result(sent[0]!, T0 + 4 * SECOND, 'delivered')]);
      assert.deepEqual(await store.replayProgress(rn.id), progress({ total: 1, delivered: 1, settled: 1, lastSettledAt: T0 + 4 * SECOND }));
      assert.deepEqual((await store.bucketCounts('n')).states, { none: 1 });
    });

    it('a replay with its own rate is paced by it, the token buckets kept by the worker', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const ids = await ingestN(ctx.set, 'b', 3, T0);
      const r = await replay('b', ids, T0 + SECOND, { rate: { count: 1, perMs: 10 * SECOND } });
      assert.deepEqual((await store.getReplay(r.id))!.rate, { count: 1, perMs: 10 * SECOND });
      const now = T0 + 2 * SECOND;
      // The superseded first generations were never claimed; the three replay deliveries are due.
      const p1 = await claim(ctx.set, 'b', now);
      assert.equal(p1.claimed.length, 1);
      assert.deepEqual(p1.verdict.deferred, { replay_rate: 1 });
      // The replay's token bucket is the store's: the next claims find it where this one left it.
      const p2 = await claim(ctx.set, 'b', now + 10 * SECOND - 1);
      assert.equal(p2.claimed.length, 0);
      const p3 = await claim(ctx.set, 'b', now + 10 * SECOND);
      assert.equal(p3.claimed.length, 1);
      // Past `aheadFrom` claims, a delivery paced by its replay's rate is left for a free slot, untouched.
      const ahead = await claim(ctx.set, 'b', now + 20 * SECOND, { policy: { aheadFrom: 0 } });
      assert.deepEqual([ahead.claimed.length, ahead.verdict.skippedAhead, ahead.verdict.deferred], [0, 1, {}]);
      assert.equal((await claim(ctx.set, 'b', now + 20 * SECOND, {})).claimed.length, 1);
    });

    it('lists replays newest first, by bucket; refuses an unknown bucket', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'a', destination: DEST });
      await store.createBucket({ name: 'b', destination: DEST });
      const r1 = await replay('a', [], T0);
      const r2 = await replay('b', [], T0 + SECOND);
      const r3 = await replay('a', [], T0 + 2 * SECOND);
      assert.deepEqual(
        (await store.listReplays({ limit: 10 })).map((r) => r.id),
        [r3.id, r2.id, r1.id],
      );
      assert.deepEqual(
        (await store.listReplays({ bucket: 'a', limit: 10 })).map((r) => r.id),
        [r3.id, r1.id],
      );
      assert.deepEqual(
        (await store.listReplays({ limit: 2 })).map((r) => r.id),
        [r3.id, r2.id],
      );
      assert.deepEqual(r1.total, 0);
      assert.deepEqual(await store.replayProgress(r1.id), progress({}));
      await assert.rejects(replay('nope', [], T0), { code: 'not_found' });
    });

    it('requests without a delivery get their first one from a replay to the bucket destination, however many', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      // More than one write batch of a replay on any sensible dialect.
      const ids = await ingestN(ctx.set, 'b', 1100, T0, {}, false);
      const r = await replay('b', ids, T0 + 2 * SECOND);
      assert.deepEqual([r.total, r.superseded], [1100, 0]);
      assert.deepEqual(await generations(ids[0]!), [[1, 'pending', true, null, 'replay']]);
      assert.equal((await store.getRequest(ids[1099]!))!.state, 'pending');
      assert.deepEqual(await store.replayProgress(r.id), progress({ total: 1100, pending: 1100 }));
      assert.equal(await store.countRequests('b', { states: ['pending'] }), 1100);
    });
  });
}

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { captured, claim, DEST, drainBucket, ingestN, LEASE_MS, result, submitAll, T0, type Ctx } from './harness.js';

const SECOND = 1000;

export function drainContract(ctx: Ctx): void {
  describe('claims', () => {
    it('claims due deliveries oldest due first, at most `limit`, with everything the attempt needs', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const body = Buffer.from([0x00, 0xff, 0x7b, 0x7d]);
      const first = captured('b', T0, {
        method: 'PUT',
        path: '/x/y',
        query: 'a=1&b=%20',
        rawHeaders: ['X-One', '1', 'x-one', '2'],
        body: Buffer.from(body),
      });
      await submitAll(ctx.set, [first]);
      const later = await ingestN(ctx.set, 'b', 4, T0 + 1);
      await ingestN(ctx.set, 'b', 1, T0 + 60_000);
      const now = T0 + 10 * SECOND;
      ctx.clock.set(now);
      const r = await claim(ctx.set, 'b', now, { limit: 2 });
      assert.deepEqual(
        r.claimed.map((a) => a.requestId),
        [first.id, later[0]],
      );
      const a = r.claimed[0]!;
      assert.ok(a.body.equals(body));
      assert.deepEqual(
        { ...a, body: null, attemptId: typeof a.attemptId, deliveryId: typeof a.deliveryId },
        {
          attemptId: 'string',
          deliveryId: 'string',
          requestId: first.id,
          bucket: 'b',
          generation: 1,
          number: 1,
          trigger: 'initial',
          replayId: null,
          destination: null,
          url: 'http://127.0.0.1:9/in/x/y?a=1&b=%20',
          target: { origin: 'http://127.0.0.1:9', path: '/in/x/y?a=1&b=%20' },
          startedAt: now,
          sendAfterMs: 0,
          firstAttemptAt: now,
          pausedMsAtFirst: 0,
          method: 'PUT',
          path: '/x/y',
          query: 'a=1&b=%20',
          rawHeaders: ['X-One', '1', 'x-one', '2'],
          body: null,
          verdict: null,
          dedupKey: null,
        },
      );
      assert.deepEqual(r.verdict.deferred, {});
      assert.equal(r.verdict.wakeAt, Infinity);
      assert.equal((await store.getRequest(first.id))!.state, 'delivering');
      const [h] = await store.requestHistory(first.id);
      assert.deepEqual([h!.id, h!.state, h!.attempts], [a.deliveryId, 'delivering', 1]);
      assert.deepEqual(
        h!.attemptLog.map((x) => [x.id, x.number, x.url, x.startedAt, x.durationMs, x.status, x.outcome]),
        [[a.attemptId, 1, a.url, now, null, null, null]],
      );
      // The rest, up to what is due: the one received after `now` waits.
      assert.deepEqual(
        (await claim(ctx.set, 'b', now, { limit: 10 })).claimed.map((x) => x.requestId),
        later.slice(1),
      );
      assert.equal((await claim(ctx.set, 'b', now, { limit: 10 })).claimed.length, 0, 'claimed ones are not claimed twice');
      assert.equal((await claim(ctx.set, 'b', T0 + 60_000, { limit: 0 })).claimed.length, 0, 'limit 0 claims nothing');
      assert.equal((await claim(ctx.set, 'b', T0 + 60_000, { limit: 10 })).claimed.length, 1);
    });

    it('forward settings shape the url: the destination alone, or the raw path kept', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'plain', destination: DEST, drain: { forwardPath: false } });
      await store.createBucket({ name: 'raw', destination: DEST, drain: { forwardRawPath: true } });
      await store.createBucket({ name: 'clean', destination: DEST });
      for (const name of ['plain', 'raw', 'clean']) await submitAll(ctx.set, [captured(name, T0, { path: '/a/./b//c', query: 'q=1' })]);
      const url = async (name: string) => (await claim(ctx.set, name, T0)).claimed[0]!.url;
      assert.equal(await url('plain'), 'http://127.0.0.1:9/in?q=1');
      assert.equal(await url('raw'), 'http://127.0.0.1:9/in/a/./b//c?q=1');
      assert.equal(await url('clean'), 'http://127.0.0.1:9/in/a/b/c?q=1');
    });

    it('a paused bucket is not due; a bucket without a destination has nothing to claim', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'p', destination: DEST });
      await store.createBucket({ name: 'n' });
      await ingestN(ctx.set, 'p', 2, T0);
      await ingestN(ctx.set, 'n', 2, T0, {}, false);
      assert.deepEqual(await drain.dueBuckets(T0), ['p']);
      await store.pauseBucket('p');
      assert.deepEqual(await drain.dueBuckets(T0), []);
      assert.equal(await drain.nextDueAt(T0 - 1), null);
      assert.equal((await claim(ctx.set, 'n', T0)).claimed.length, 0);
      ctx.clock.advance(30 * SECOND);
      await store.resumeBucket('p');
      assert.deepEqual(await drain.dueBuckets(T0), ['p']);
      // The paused time is the bucket's, and each first attempt records how much there was.
      const a = (await claim(ctx.set, 'p', T0 + 40 * SECOND)).claimed;
      assert.deepEqual(
        a.map((x) => x.pausedMsAtFirst),
        [30 * SECOND, 30 * SECOND],
      );
    });

    it('rate: claims what the tokens allow, defers the head of the line once, and the store keeps the tokens for the next claim', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST, drain: { rate: { count: 1, perMs: SECOND }, burst: 2 } });
      const ids = await ingestN(ctx.set, 'b', 5, T0);
      const now = T0 + 100;
      const r1 = await claim(ctx.set, 'b', now, { limit: 10 });
      assert.deepEqual(
        r1.claimed.map((a) => a.requestId),
        ids.slice(0, 2),
      );
      assert.deepEqual(r1.verdict.deferred, { rate: 1 });
      assert.equal(r1.verdict.wakeAt, now + SECOND);
      const deferred = await store.requestHistory(ids[2]!);
      assert.deepEqual(
        [deferred[0]!.state, deferred[0]!.deferrals, deferred[0]!.lastDeferralReason, deferred[0]!.attempts],
        ['pending', 1, 'rate', 0],
      );
      assert.equal((await store.requestHistory(ids[3]!))[0]!.deferrals, 0, 'the ones behind it keep their place untouched');
      assert.equal((await claim(ctx.set, 'b', now + SECOND - 1)).claimed.length, 0);
      const r2 = await claim(ctx.set, 'b', now + SECOND);
      assert.deepEqual(
        r2.claimed.map((a) => a.requestId),
        [ids[2]],
      );
    });

    it('a Retry-After block recorded with a completion is kept by the store: it defers and stops the walk until it ends', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [r0, r1, r2] = await ingestN(ctx.set, 'b', 3, T0);
      const first = await claim(ctx.set, 'b', T0 + SECOND, { limit: 1 });
      assert.deepEqual(
        first.claimed.map((a) => a.requestId),
        [r0],
      );
      const until = T0 + 30 * SECOND;
      await ctx.set.drain.complete([
        {
          ...result(first.claimed[0]!, T0 + SECOND + 5, 'retry', { status: 429, nextAttemptAt: until }),
          block: { bucket: 'b', untilMs: until },
        },
      ]);
      const b = await claim(ctx.set, 'b', T0 + 2 * SECOND);
      assert.deepEqual(
        [b.claimed.length, b.verdict.deferred, b.verdict.wakeAt, b.verdict.pacer.blockedUntilMs],
        [0, { retry_after: 1 }, until, until],
      );
      assert.equal((await store.requestHistory(r1!))[0]!.lastDeferralReason, 'retry_after');
      assert.equal((await store.requestHistory(r2!))[0]!.deferrals, 0);
      assert.equal((await claim(ctx.set, 'b', until - 1)).claimed.length, 0, 'still blocked a moment before');
      const c = await claim(ctx.set, 'b', until);
      assert.deepEqual(c.claimed.map((a) => a.requestId).sort(), [r0, r1, r2].sort());
    });

    it('the retry budget holds retries but not first attempts', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST, drain: { retryBudget: { fraction: 0, floorPerSecond: 0 } } });
      const [r1, r2] = await ingestN(ctx.set, 'b', 2, T0);

      // Both fail once; with a zero budget their retries wait, while a new first attempt goes.
      const { claimed } = await claim(ctx.set, 'b', T0 + SECOND);
      await ctx.set.drain.complete(
        claimed.map((a, i) => result(a, T0 + 2 * SECOND, 'retry', { status: 500, nextAttemptAt: T0 + 5 * SECOND + i })),
      );
      const [fresh] = await ingestN(ctx.set, 'b', 1, T0 + 4 * SECOND);
      const c = await claim(ctx.set, 'b', T0 + 6 * SECOND);
      assert.deepEqual(
        c.claimed.map((a) => a.requestId),
        [fresh],
      );
      assert.deepEqual(c.verdict.deferred, { retry_budget: 1 });
      const h1 = (await store.requestHistory(r1!))[0]!;
      const h2 = (await store.requestHistory(r2!))[0]!;
      assert.deepEqual(
        [h1.state, h1.deferrals, h1.lastDeferralReason],
        ['retrying', 1, 'retry_budget'],
        'recorded once, on the head of the line',
      );
      assert.deepEqual([h2.state, h2.deferrals, h2.lastDeferralReason], ['retrying', 0, null]);
    });
  });

  describe('completions', () => {
    it('delivered, failed and exhausted settle the delivery and record the attempt', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const ids = await ingestN(ctx.set, 'b', 3, T0);
      const { claimed } = await claim(ctx.set, 'b', T0 + SECOND);
      const [d, f, x] = claimed;
      const respBody = Buffer.from([0x00, 0x01, 0xfe, 0xff, 0x41]);
      await ctx.set.drain.complete([
        result(d!, T0 + SECOND + 25, 'delivered', { status: 201, body: respBody, headers: ['X-Resp', 'a', 'x-resp', 'b'] }),
        result(f!, T0 + SECOND + 30, 'failed', { status: 410 }),
        {
          ...result(x!, T0 + SECOND + 35, 'exhausted', { status: null, errorClass: 'refused', reason: 'refused; gave up: max_attempts' }),
          responseTruncated: true,
        },
      ]);
      assert.deepEqual(await Promise.all(ids.map(async (id) => (await store.getRequest(id))!.state)), ['delivered', 'failed', 'exhausted']);
      const [h] = await store.requestHistory(ids[0]!);
      assert.deepEqual([h!.state, h!.settledAt, h!.attempts], ['delivered', T0 + SECOND + 25, 1]);
      const log = h!.attemptLog[0]!;
      assert.ok(log.responseBody!.equals(respBody));
      assert.deepEqual(
        { ...log, responseBody: null },
        {
          id: d!.attemptId,
          number: 1,
          url: d!.url,
          startedAt: T0 + SECOND,
          durationMs: 25,
          status: 201,
          errorClass: null,
          errorMessage: null,
          responseHeaders: ['X-Resp', 'a', 'x-resp', 'b'],
          responseBody: null,
          responseTruncated: false,
          outcome: 'delivered',
          reason: 'http_201',
          nextAttemptAt: null,
          nextWhy: null,
          workerId: null,
        },
      );
      const ex = (await store.requestHistory(ids[2]!))[0]!.attemptLog[0]!;
      assert.deepEqual(
        [ex.status, ex.errorClass, ex.errorMessage, ex.outcome, ex.reason, ex.responseTruncated, ex.responseHeaders],
        [null, 'refused', 'refused: test', 'exhausted', 'refused; gave up: max_attempts', true, null],
      );
      const listed = (await store.listRequests('b', {}, { limit: 10 })).requests.map((r) => [r.state, r.attempts, r.lastStatus]);
      assert.deepEqual(listed, [
        ['exhausted', 1, null],
        ['failed', 1, 410],
        ['delivered', 1, 201],
      ]);
      assert.deepEqual(await ctx.set.drain.dueBuckets(T0 + 3_600_000), [], 'nothing left to do');
    });

    it('a retry is due again at its time, numbered on, with its first attempt time kept', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [id] = await ingestN(ctx.set, 'b', 1, T0);
      const first = (await claim(ctx.set, 'b', T0 + SECOND)).claimed[0]!;
      const retryAt = T0 + 31 * SECOND;
      // Recorded through the next claim's own transaction.
      const none = await claim(ctx.set, 'b', T0 + 2 * SECOND, {
        complete: [result(first, T0 + 2 * SECOND, 'retry', { status: 503, nextAttemptAt: retryAt })],
      });
      assert.equal(none.claimed.length, 0);
      assert.equal((await store.getRequest(id!))!.state, 'retrying');
      const [h] = await store.requestHistory(id!);
      assert.deepEqual([h!.state, h!.nextAttemptAt, h!.settledAt], ['retrying', retryAt, null]);
      assert.deepEqual(
        [h!.attemptLog[0]!.nextAttemptAt, h!.attemptLog[0]!.nextWhy, h!.attemptLog[0]!.outcome],
        [retryAt, 'schedule', 'retry'],
      );
      assert.deepEqual(await drain.dueBuckets(retryAt - 1), []);
      assert.equal(await drain.nextDueAt(T0 + 2 * SECOND), retryAt);
      assert.deepEqual(await drain.dueBuckets(retryAt), ['b']);
      assert.equal((await claim(ctx.set, 'b', retryAt - 1)).claimed.length, 0);
      const second = (await claim(ctx.set, 'b', retryAt)).claimed[0]!;
      assert.deepEqual(
        [second.number, second.deliveryId, second.firstAttemptAt, second.startedAt],
        [2, first.deliveryId, T0 + SECOND, retryAt],
      );
      await drain.complete([result(second, retryAt + 5, 'delivered')]);
      const after = await store.requestHistory(id!);
      assert.deepEqual(
        after[0]!.attemptLog.map((a) => [a.number, a.status, a.outcome]),
        [
          [1, 503, 'retry'],
          [2, 200, 'delivered'],
        ],
      );
      assert.equal(after[0]!.attempts, 2);
    });

    it('a release gives the attempt back uncounted: due again at once, claimed again with the same number', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [id] = await ingestN(ctx.set, 'b', 1, T0);
      const a1 = (await claim(ctx.set, 'b', T0 + SECOND)).claimed[0]!;
      await ctx.set.drain.complete([result(a1, T0 + 2 * SECOND, 'released', { nextAttemptAt: T0 + 2 * SECOND })]);
      let [h] = await store.requestHistory(id!);
      assert.deepEqual([h!.state, h!.attempts, h!.nextAttemptAt], ['pending', 0, T0 + 2 * SECOND]);
      assert.deepEqual(
        h!.attemptLog.map((a) => [a.outcome, a.reason]),
        [['released', 'released_on_shutdown']],
      );
      const a2 = (await claim(ctx.set, 'b', T0 + 2 * SECOND)).claimed[0]!;
      assert.deepEqual([a2.number, a2.firstAttemptAt], [1, T0 + 2 * SECOND], 'a released first attempt does not count as the first');
      await ctx.set.drain.complete([result(a2, T0 + 3 * SECOND, 'retry', { nextAttemptAt: T0 + 4 * SECOND })]);
      const a3 = (await claim(ctx.set, 'b', T0 + 4 * SECOND)).claimed[0]!;
      await ctx.set.drain.complete([result(a3, T0 + 5 * SECOND, 'released', { nextAttemptAt: T0 + 5 * SECOND })]);
      [h] = await store.requestHistory(id!);
      assert.deepEqual([h!.state, h!.attempts], ['retrying', 1], 'a released retry is a retry again');
      const a4 = (await claim(ctx.set, 'b', T0 + 5 * SECOND)).claimed[0]!;
      assert.deepEqual([a4.number, a4.firstAttemptAt], [2, T0 + 2 * SECOND]);
      // A claim with no free slot still records what it was given.
      const none = await claim(ctx.set, 'b', T0 + 6 * SECOND, { limit: 0, complete: [result(a4, T0 + 6 * SECOND, 'delivered')] });
      assert.equal(none.claimed.length, 0);
      assert.equal((await store.getRequest(id!))!.state, 'delivered');
    });
  });

  describe('lease expiry', () => {
    it('an expired lease closes the attempt as lease_expired and makes the delivery due again at once', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [id] = await ingestN(ctx.set, 'b', 1, T0);
      const a = (await claim(ctx.set, 'b', T0, { leaseMs: 60 * SECOND })).claimed[0]!;
      const leaseUntil = T0 + 60 * SECOND;
      assert.deepEqual(await drain.dueBuckets(T0 + SECOND), [], 'in flight: not due');
      assert.equal(await drain.nextDueAt(T0 + SECOND), leaseUntil, 'the lease expiry is the next thing due');
      assert.deepEqual(await drain.recoverExpired(leaseUntil - 1, await drain.listBuckets()), []);
      const expired = await drain.recoverExpired(leaseUntil, await drain.listBuckets());
      assert.deepEqual(expired, [{ deliveryId: a.deliveryId, bucket: 'b', attempts: 1 }]);
      const [h] = await store.requestHistory(id!);
      assert.deepEqual([h!.state, h!.nextAttemptAt, h!.attempts], ['retrying', leaseUntil, 1]);
      assert.deepEqual(
        h!.attemptLog.map((x) => [x.outcome, x.durationMs, x.nextAttemptAt]),
        [['lease_expired', null, leaseUntil]],
      );
      assert.deepEqual(await drain.recoverExpired(leaseUntil + SECOND, await drain.listBuckets()), [], 'recovered once');
      assert.deepEqual(await drain.dueBuckets(leaseUntil), ['b']);
      const again = (await claim(ctx.set, 'b', leaseUntil)).claimed[0]!;
      assert.equal(again.number, 2);
      // The first worker's late answer changes nothing: the delivery is the second attempt's now.
      await drain.complete([result(a, leaseUntil + SECOND, 'delivered')]);
      assert.equal((await store.getRequest(id!))!.state, 'delivering');
      await drain.complete([result(again, leaseUntil + 2 * SECOND, 'delivered')]);
      assert.equal((await store.getRequest(id!))!.state, 'delivered');
    });

    it("an expired lease on the schedule's last attempt exhausts the delivery", async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({
        name: 'b',
        destination: DEST,
        drain: { schedule: { baseMs: 1000, multiplier: 1, capMs: 1000, maxAttempts: 1, jitter: 'none' } },
      });
      const [id] = await ingestN(ctx.set, 'b', 1, T0);
      await claim(ctx.set, 'b', T0, { leaseMs: 10 * SECOND });
      const expired = await drain.recoverExpired(T0 + 10 * SECOND, await drain.listBuckets());
      assert.equal(expired.length, 1);
      const [h] = await store.requestHistory(id!);
      assert.deepEqual([h!.state, h!.settledAt, h!.attemptLog[0]!.outcome], ['exhausted', T0 + 10 * SECOND, 'lease_expired']);
      assert.deepEqual(await drain.dueBuckets(T0 + 3_600_000), []);
      assert.equal(await drain.nextDueAt(T0), null);
    });
  });

  describe('due buckets', () => {
    it('lists the unpaused buckets with work due, and the next time one falls due', async () => {
      const { store, drain } = ctx.set;
      assert.deepEqual(await drain.dueBuckets(T0), []);
      assert.equal(await drain.nextDueAt(T0), null);
      for (const name of ['a', 'b', 'c']) await store.createBucket({ name, destination: DEST });
      await ingestN(ctx.set, 'a', 1, T0 + 10);
      await ingestN(ctx.set, 'b', 1, T0 + 20);
      assert.deepEqual(await drain.dueBuckets(T0), []);
      assert.equal(await drain.nextDueAt(T0), T0 + 10);
      assert.deepEqual(await drain.dueBuckets(T0 + 10), ['a']);
      assert.equal(await drain.nextDueAt(T0 + 10), T0 + 20);
      assert.deepEqual((await drain.dueBuckets(T0 + 20)).sort(), ['a', 'b']);
      assert.equal(await drain.nextDueAt(T0 + 20), null);
      await claim(ctx.set, 'a', T0 + 20);
      assert.deepEqual(await drain.dueBuckets(T0 + 20), ['b'], 'a claim that takes everything moves its bucket on');
      assert.equal(await drain.nextDueAt(T0 + 20), T0 + 20 + LEASE_MS, 'the lease is next');
    });
  });

  describe('worker lease', () => {
    it('one holder at a time: acquire, renew, refuse, expire, release; activeWorker names the holder', async () => {
      const { store, drain } = ctx.set;
      assert.equal(await store.activeWorker(T0), undefined);
      assert.deepEqual(await drain.acquireWorkerLease('w1', 'host-a pid 1', T0, 30 * SECOND), { ok: true });
      const holder = { holder: 'w1', info: 'host-a pid 1', acquiredAt: T0, heartbeatAt: T0, expiresAt: T0 + 30 * SECOND };
      assert.deepEqual(await store.activeWorker(T0 + SECOND), holder);
      assert.deepEqual(await drain.acquireWorkerLease('w2', 'host-b', T0 + SECOND, 30 * SECOND), { ok: false, current: holder });
      assert.deepEqual(await drain.acquireWorkerLease('w1', 'host-a pid 1', T0 + 10 * SECOND, 30 * SECOND), { ok: true }, 'renewed');
      const renewed = { ...holder, heartbeatAt: T0 + 10 * SECOND, expiresAt: T0 + 40 * SECOND };
      assert.deepEqual(await store.activeWorker(T0 + 39 * SECOND), renewed);
      assert.equal(await store.activeWorker(T0 + 40 * SECOND), undefined, 'expired');
      assert.deepEqual(
        await drain.acquireWorkerLease('w2', 'host-b', T0 + 40 * SECOND, 30 * SECOND),
        { ok: true },
        'an expired lease is taken over',
      );
      assert.deepEqual(await store.activeWorker(T0 + 41 * SECOND), {
        holder: 'w2',
        info: 'host-b',
        acquiredAt: T0 + 40 * SECOND,
        heartbeatAt: T0 + 40 * SECOND,
        expiresAt: T0 + 70 * SECOND,
      });
      await drain.releaseWorkerLease('w1');
      assert.equal((await store.activeWorker(T0 + 41 * SECOND))?.holder, 'w2', 'only the holder releases');
      await drain.releaseWorkerLease('w2');
      assert.equal(await store.activeWorker(T0 + 41 * SECOND), undefined);
      assert.deepEqual(await drain.acquireWorkerLease('w3', '', T0 + 42 * SECOND, 30 * SECOND), { ok: true });
      // The bucket list the drain reads stays its own: a released lease does not hide buckets.
      await store.createBucket({ name: 'b' });
      assert.equal((await drainBucket(ctx.set, 'b')).name, 'b');
    });
  });
}

import { NO_PROVIDER } from '../../../src/store/provider-row.js';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { newId } from '../../../src/shared/ids.js';
import { pausedMsAt, type Bucket, type NewBucket } from '../../../src/store/store.js';
import { captured, claim, DEST, drainBucket, freshPolicy, ingestN, LEASE_MS, result, submitAll, T0, type Ctx } from './harness.js';
import { until } from '../../helpers/until.js';

const MINUTE = 60_000;

/** A bucket with every setting away from its default (fractions included: they must read back exactly). */
const EVERYTHING: NewBucket = {
  name: 'full',
  destination: 'https://consumer.example:8443/hooks?token=abc',
  maxBody: 1024 * 1024,
  ackStatus: 202,
  ackBody: '{"ok":true}',
  ackContentType: 'application/json',
  retainMs: 7 * 86_400_000,
  retainStates: ['delivered', 'failed', 'none'],
  drain: {
    rate: { count: 0.1, perMs: 1000 },
    burst: 5,
    concurrency: 3,
    timeoutMs: 2500,
    schedule: { baseMs: 1500, multiplier: 1.7, capMs: 90_000, maxAttempts: 7, jitter: 'full' },
    retryOn: { statusClasses: [5], statuses: [409, 429], errors: ['refused', 'timeout'] },
    retryBudget: { fraction: 0.3, floorPerSecond: 0.25 },
    forwardPath: false,
    forwardRawPath: true,
    forwardHeaders: [
      ['X-Env', 'prod'],
      ['x-env', 'second'],
    ],
  },
  // Every provider setting away from its default; secrets with characters a JSON list must escape.
  provider: {
    verify: {
      scheme: { kind: 'hmac', header: 'x-signature', algorithm: 'sha1', encoding: 'base64', prefix: 'v0:' },
      secrets: ['first "secret", with a comma', 'second\\one é'],
      toleranceMs: 90_000,
      onInvalid: 'reject',
    },
    handshakes: ['graph', 'meta', 'dropbox'],
    verifyToken: 'meta-token-123',
    graphClientState: 'graph state: secret',
    methods: ['POST', 'PUT'],
    dedup: { key: { kind: 'json', path: ['data', 'object', 'id'] }, windowMs: 3_600_000 },
    sign: {
      scheme: 'standard',
      secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw', 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD'],
    },
  },
};

/** How long another process's bucket write may take to reach a cached lookup (a bound that catches a lost notice, not a timing target). */
const NOTICE_BOUND_MS = 5_000;

export function bucketsContract(ctx: Ctx): void {
  describe('buckets', () => {
    it('creates with the defaults, lists by name, refuses a name twice', async () => {
      const { store } = ctx.set;
      const b = await store.createBucket({ name: 'zeta' });
      assert.deepEqual(
        { ...b, drain: undefined },
        {
          name: 'zeta',
          destination: null,
          maxBody: 25 * 1024 * 1024,
          ackStatus: 200,
          ackBody: null,
          ackContentType: null,
          paused: false,
          createdAt: T0,
          updatedAt: T0,
          drain: undefined,
          pausedAt: null,
          pausedTotalMs: 0,
          retainMs: null,
          retainStates: ['delivered'],
          deletingAt: null,
          provider: NO_PROVIDER,
        },
      );
      assert.deepEqual(b.drain, {
        rate: null,
        burst: 1,
        concurrency: 10,
        timeoutMs: 10_000,
        schedule: { baseMs: 30_000, multiplier: 3, capMs: 3 * 3_600_000, maxAttempts: 14, jitter: 'upper' },
        retryOn: null,
        retryBudget: { fraction: 0.1, floorPerSecond: 1 },
        forwardPath: true,
        forwardRawPath: false,
        forwardHeaders: [],
      });
      await store.createBucket({ name: 'alpha' });
      await assert.rejects(store.createBucket({ name: 'zeta' }), { code: 'bucket_exists' });
      assert.deepEqual(
        (await store.listBuckets()).map((x) => x.name),
        ['alpha', 'zeta'],
      );
      assert.deepEqual(
        (await ctx.set.drain.listBuckets()).map((x) => x.name),
        ['alpha', 'zeta'],
      );
      assert.deepEqual(await store.getBucket('zeta'), b);
      assert.equal(await store.getBucket('nope'), undefined);
    });

    it('keeps every setting exactly as given, on both stores', async () => {
      const { store } = ctx.set;
      const b = await store.createBucket(EVERYTHING);
      const expected: Bucket = {
        ...(EVERYTHING as Required<Omit<NewBucket, 'drain' | 'provider'>>),
        drain: EVERYTHING.drain as Bucket['drain'],
        provider: EVERYTHING.provider as Bucket['provider'],
        paused: false,
        createdAt: T0,
        updatedAt: T0,
        pausedAt: null,
        pausedTotalMs: 0,
        deletingAt: null,
      };
      assert.deepEqual(b, expected);
      assert.deepEqual(await store.getBucket('full'), expected);
      assert.deepEqual(await drainBucket(ctx.set, 'full'), expected);
      // An uncapped schedule that gives up after a time instead of a count.
      ctx.clock.advance(1000);
      const u = await store.updateBucket('full', {
        drain: { schedule: { baseMs: 1000, multiplier: 1, capMs: Infinity, giveUpMs: 3_600_000, jitter: 'none' } },
      });
      assert.deepEqual(u.drain.schedule, { baseMs: 1000, multiplier: 1, capMs: Infinity, giveUpMs: 3_600_000, jitter: 'none' });
      assert.deepEqual({ ...u.drain, schedule: null }, { ...expected.drain, schedule: null }, 'the rest of the drain settings stay');
      assert.deepEqual(u.provider, expected.provider, 'the provider settings stay');
    });

    it('updates provider settings one by one, each kind of scheme and key, and removes each', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'prov' });
      const v = await store.updateBucket('prov', {
        provider: {
          verify: { scheme: { kind: 'stripe' }, secrets: ['whsec_a', 'whsec_b'], toleranceMs: 300_000, onInvalid: 'quarantine' },
        },
      });
      assert.deepEqual(v.provider, {
        ...NO_PROVIDER,
        verify: { scheme: { kind: 'stripe' }, secrets: ['whsec_a', 'whsec_b'], toleranceMs: 300_000, onInvalid: 'quarantine' },
      });
      const cases: Array<Partial<Bucket['provider']>> = [
        { dedup: { key: { kind: 'provider' }, windowMs: 72 * 3_600_000 } },
        { dedup: { key: { kind: 'header', name: 'x-github-delivery' }, windowMs: 1000 } },
        { methods: ['GET'] },
        { handshakes: ['graph'] },
        { verifyToken: 't' },
        { graphClientState: 's' },
        { sign: { scheme: 'standard', secrets: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] } },
        { verify: { scheme: { kind: 'github' }, secrets: ['gh'], toleranceMs: 1000, onInvalid: 'reject' } },
      ];
      let want: Bucket['provider'] = v.provider;
      for (const c of cases) {
        want = { ...want, ...c };
        const u = await store.updateBucket('prov', { provider: c });
        assert.deepEqual(u.provider, want, JSON.stringify(c));
        assert.deepEqual((await store.getBucket('prov'))?.provider, want);
      }
      const off = await store.updateBucket('prov', {
        provider: { verify: null, dedup: null, methods: null, handshakes: [], verifyToken: null, graphClientState: null, sign: null },
      });
      assert.deepEqual(off.provider, NO_PROVIDER);
      assert.deepEqual(await drainBucket(ctx.set, 'prov'), off, 'the drain store reads the change at once');
    });

    it('updates only what a patch names; refuses an unknown bucket', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST, drain: { concurrency: 4, rate: { count: 5, perMs: 1000 } } });
      ctx.clock.advance(1000);
      const u = await store.updateBucket('b', { ackStatus: 204, drain: { concurrency: 2 } });
      assert.equal(u.ackStatus, 204);
      assert.equal(u.destination, DEST);
      assert.deepEqual([u.drain.concurrency, u.drain.rate], [2, { count: 5, perMs: 1000 }]);
      assert.deepEqual([u.createdAt, u.updatedAt], [T0, T0 + 1000]);
      assert.deepEqual(await drainBucket(ctx.set, 'b'), u, 'the drain store reads the change at once');
      const cleared = await store.updateBucket('b', { destination: null, drain: { rate: null }, retainMs: 60_000 });
      assert.deepEqual([cleared.destination, cleared.drain.rate, cleared.retainMs, cleared.ackStatus], [null, null, 60_000, 204]);
      await assert.rejects(store.updateBucket('missing', { ackStatus: 201 }), { code: 'not_found' });
    });

    it('pause and resume: idempotent, and the paused time adds up across pauses', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const p = await store.pauseBucket('b');
      assert.deepEqual([p.paused, p.pausedAt, p.pausedTotalMs, p.updatedAt], [true, T0, 0, T0]);
      ctx.clock.advance(2 * MINUTE);
      const again = await store.pauseBucket('b');
      assert.deepEqual([again.pausedAt, again.updatedAt], [T0, T0], 'a second pause changes nothing');
      assert.equal(pausedMsAt(again, ctx.clock.now()), 2 * MINUTE);
      assert.equal((await drainBucket(ctx.set, 'b')).paused, true, 'the drain store sees the pause');
      ctx.clock.advance(3 * MINUTE);
      const r = await store.resumeBucket('b');
      assert.deepEqual([r.paused, r.pausedAt, r.pausedTotalMs, r.updatedAt], [false, null, 5 * MINUTE, T0 + 5 * MINUTE]);
      ctx.clock.advance(MINUTE);
      assert.equal((await store.resumeBucket('b')).updatedAt, T0 + 5 * MINUTE, 'resuming a running bucket changes nothing');
      await store.pauseBucket('b');
      ctx.clock.advance(90_000);
      const r2 = await store.resumeBucket('b');
      assert.equal(r2.pausedTotalMs, 5 * MINUTE + 90_000, 'time between pauses is not counted');
      assert.deepEqual((await drainBucket(ctx.set, 'b')).pausedTotalMs, 5 * MINUTE + 90_000);
      await assert.rejects(store.pauseBucket('nope'), { code: 'not_found' });
      await assert.rejects(store.resumeBucket('nope'), { code: 'not_found' });
    });

    it("resolveBucket finds live buckets and notices another process's create, change and delete", async () => {
      const { store } = ctx.set;
      const other = await ctx.set.another();
      assert.equal(await store.resolveBucket('b'), undefined);
      await other.createBucket({ name: 'b', ackStatus: 201 });
      assert.equal((await store.resolveBucket('b'))?.ackStatus, 201, 'a miss is not remembered');
      // A cached bucket follows another process's writes within a bound, not at once: on
      // PostgreSQL a NOTIFY reaches the cache a moment after the commit (and an epoch re-read
      // within 1 s covers a lost one); SQLite's data_version check happens to be immediate.
      await other.updateBucket('b', { ackStatus: 204 });
      await until(async () => (await store.resolveBucket('b'))?.ackStatus === 204, 'the change seen', NOTICE_BOUND_MS);
      await other.pauseBucket('b');
      await until(async () => (await store.resolveBucket('b'))?.paused === true, 'the pause seen', NOTICE_BOUND_MS);
      await other.deleteBucket('b', { force: false });
      await until(async () => (await store.resolveBucket('b')) === undefined, 'the delete seen', NOTICE_BOUND_MS);
    });

    it('bucketCounts and allBucketCounts agree: requests, bytes, states (held, none), refusals', async () => {
      const { store, sink } = ctx.set;
      await store.createBucket({ name: 'a', destination: DEST });
      await store.createBucket({ name: 'held', destination: DEST });
      await store.createBucket({ name: 'none' });
      await store.createBucket({ name: 'empty', destination: DEST });
      const ids = await submitAll(ctx.set, [
        captured('a', T0, { body: 'x' }),
        captured('a', T0 + 1, { body: 'yy' }),
        captured('a', T0 + 2, { body: 'zzz' }),
      ]);
      await ingestN(ctx.set, 'held', 3, T0);
      await ingestN(ctx.set, 'none', 2, T0, { body: '12345' }, false);
      const { claimed } = await claim(ctx.set, 'a', T0 + 10);
      const of = (id: string) => claimed.find((c) => c.requestId === id)!;
      await ctx.set.drain.complete([
        result(of(ids[0]!), T0 + 20, 'delivered'),
        result(of(ids[1]!), T0 + 20, 'retry', { status: 503, nextAttemptAt: T0 + MINUTE }),
      ]);
      const { claimed: heldClaims } = await claim(ctx.set, 'held', T0 + 10, { limit: 2 });
      await ctx.set.drain.complete(heldClaims.map((c) => result(c, T0 + 20, 'delivered')));
      await store.pauseBucket('held');
      sink.countRejection('a', 'too_large');
      await sink.close();

      const all = await store.allBucketCounts();
      assert.deepEqual([...all.keys()].sort(), ['a', 'empty', 'held', 'none']);
      for (const name of all.keys()) assert.deepEqual(all.get(name), await store.bucketCounts(name), name);
      assert.deepEqual(all.get('a'), {
        requests: 3,
        bytes: 6,
        states: { delivered: 1, retrying: 1, delivering: 1 },
        rejections: { too_large: 1 },
      });
      assert.deepEqual(all.get('held')!.states, { delivered: 2, held: 1 });
      assert.deepEqual(all.get('none'), { requests: 2, bytes: 10, states: { none: 2 }, rejections: {} });
      assert.deepEqual(all.get('empty'), { requests: 0, bytes: 0, states: {}, rejections: {} });
    });

    it('delete refuses undelivered work unless forced, then takes every row with it and frees the name', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const ids = await ingestN(ctx.set, 'b', 3, T0);
      await assert.rejects(store.deleteBucket('b', { force: false }), { code: 'bucket_not_empty', message: /3 undelivered/ });
      assert.equal((await store.getBucket('b'))?.deletingAt, null, 'a refused delete leaves the bucket live');
      assert.notEqual(await store.resolveBucket('b'), undefined);
      const stale = await drainBucket(ctx.set, 'b');
      const { claimed } = await claim(ctx.set, 'b', T0 + 10, { limit: 1 });
      await ctx.set.drain.complete([result(claimed[0]!, T0 + 20, 'delivered')]);
      await store.createReplay({
        id: newId(),
        bucket: 'b',
        requestIds: [ids[0]!],
        selection: {},
        destination: 'http://127.0.0.1:9/to',
        rate: null,
        nowMs: T0 + 30,
      });

      assert.deepEqual(await store.deleteBucket('b', { force: true }), { requests: 3 });
      assert.equal(await store.getBucket('b'), undefined);
      assert.deepEqual(await store.listBuckets(), []);
      for (const id of ids) {
        assert.equal(await store.getRequest(id), undefined);
        assert.deepEqual(await store.requestHistory(id), []);
      }
      assert.deepEqual(await store.listReplays({ bucket: 'b', limit: 10 }), []);
      await assert.rejects(store.deleteBucket('b', { force: true }), { code: 'not_found' });
      // Nothing of it is stored or claimed any more, not even into a bucket made anew with its name.
      await assert.rejects(ctx.set.sink.submit(captured('b', T0 + 40), { createDelivery: true }), { code: 'unknown_bucket' });
      ctx.clock.advance(1000);
      const fresh = await store.createBucket({ name: 'b', destination: 'http://127.0.0.1:9/new' });
      assert.deepEqual(await store.bucketCounts('b'), { requests: 0, bytes: 0, states: {}, rejections: {} });
      await ingestN(ctx.set, 'b', 2, T0 + 50);
      const late = await ctx.set.drain.claim(stale, { nowMs: T0 + 100, limit: 10, leaseUntilMs: T0 + 100 + LEASE_MS }, freshPolicy());
      assert.equal(late.claimed.length, 0, 'a claim with the bucket as read before the delete claims nothing');
      assert.equal((await claim(ctx.set, 'b', T0 + 100)).claimed[0]?.url.startsWith('http://127.0.0.1:9/new'), true);
      assert.equal(fresh.deletingAt, null);
    });

    it('a bucket with nothing undelivered is deleted without force', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      await ingestN(ctx.set, 'b', 2, T0, {}, false);
      const [d] = await ingestN(ctx.set, 'b', 1, T0 + 5);
      const { claimed } = await claim(ctx.set, 'b', T0 + 10);
      await ctx.set.drain.complete([result(claimed[0]!, T0 + 20, 'failed', { status: 404 })]);
      assert.equal((await store.getRequest(d!))!.state, 'failed');
      assert.deepEqual(await store.deleteBucket('b', { force: false }), { requests: 3 });
      assert.equal(await store.getBucket('b'), undefined);
    });

    it('while the purge runs the bucket is a tombstone: listed as deleting, nothing stored, claimed, changed or replayed', async () => {
      const { store, sink, drain } = ctx.set;
      const other = await ctx.set.another();
      await store.createBucket({ name: 'big', destination: DEST });
      // Enough rows that the purge takes many batches (500 rows or 8 MiB each, 100 ms apart: about
      // 2 s), so every check below runs while the tombstone stands, on a loaded machine too.
      const n = 10_000;
      const ids = await ingestN(ctx.set, 'big', n, T0, { body: 'x' });
      const stale = await drainBucket(ctx.set, 'big');
      assert.equal((await other.resolveBucket('big'))?.name, 'big');

      const deleting = store.deleteBucket('big', { force: true });
      let settled = false;
      void deleting.then(
        () => (settled = true),
        () => (settled = true),
      );
      let tomb: Bucket | undefined;
      while (!settled && (tomb = await other.getBucket('big'))?.deletingAt == null) await new Promise((r) => setImmediate(r));
      assert.ok(!settled && tomb?.deletingAt != null, 'the tombstone was seen before the purge ended (more rows would widen the window)');
      assert.equal(tomb.deletingAt, T0);
      // Ingest stops finding it (within the notice bound: `other` had it cached).
      await until(async () => (await other.resolveBucket('big')) === undefined, 'ingest no longer finding it', NOTICE_BOUND_MS);
      const checks = await Promise.allSettled([
        other.resolveBucket('big'),
        sink.submit(captured('big', T0 + 10_000), { createDelivery: true }),
        drain.claim(stale, { nowMs: T0 + 10_000, limit: 10, leaseUntilMs: T0 + 10_000 + LEASE_MS }, freshPolicy()),
        drain.listBuckets(),
        other.listBuckets(),
        other.createBucket({ name: 'big', destination: 'http://127.0.0.1:9/new' }),
        other.updateBucket('big', { ackStatus: 204 }),
        other.pauseBucket('big'),
        other.resumeBucket('big'),
        other.statsSamples({ sinceMs: T0, untilMs: T0 + 10_000 }),
        other.statsSamples({ sinceMs: T0, untilMs: T0 + 10_000, bucket: 'big' }),
        other.createReplay({
          id: newId(),
          bucket: 'big',
          requestIds: ids.slice(-3),
          selection: {},
          destination: null,
          rate: null,
          nowMs: T0 + 10_000,
        }),
      ]);
      const stillDeleting = (await other.getBucket('big'))?.deletingAt != null;
      assert.ok(stillDeleting, 'every check ran while the tombstone stood (more rows would widen the window)');
      const [resolved, submitted, claimed, drainList, list, create, update, pause, resume, allStats, namedStats, replayed] = checks;
      assert.deepEqual(resolved, { status: 'fulfilled', value: undefined }, 'ingest does not find it');
      assert.equal(submitted!.status, 'rejected');
      assert.equal((submitted as PromiseRejectedResult).reason.code, 'unknown_bucket');
      assert.equal(claimed!.status === 'fulfilled' && claimed.value.claimed.length, 0, 'nothing claimed');
      assert.deepEqual(drainList!.status === 'fulfilled' && drainList.value.map((b) => b.name), [], 'the worker does not see it');
      assert.deepEqual(list!.status === 'fulfilled' && list.value.map((b) => [b.name, b.deletingAt]), [['big', T0]], 'listed as deleting');
      for (const r of [create, update, pause, resume, replayed])
        assert.equal(r!.status === 'rejected' && r!.reason.code, 'bucket_deleting');
      assert.deepEqual(
        allStats!.status === 'fulfilled' && allStats.value.buckets.map((b) => b.bucket),
        [],
        'stats over every bucket leave it out',
      );
      assert.deepEqual(namedStats!.status === 'fulfilled' && namedStats.value.buckets.map((b) => b.bucket), ['big'], 'named, it is shown');

      assert.deepEqual(await deleting, { requests: n });
      assert.equal(await other.getBucket('big'), undefined);
      assert.equal((await other.createBucket({ name: 'big' })).deletingAt, null, 'the name is free again');
      assert.equal((await other.bucketCounts('big')).requests, 0);
    });

    it('purgeDeleting finishes what a delete left; with a delete running beside it every request is purged once', async () => {
      const { store } = ctx.set;
      assert.deepEqual(await store.purgeDeleting(), { finished: [], requests: 0, bytes: 0 }, 'nothing deleting: nothing to do');
      const other = await ctx.set.another();
      await store.createBucket({ name: 'big' });
      const n = 2000;
      await ingestN(ctx.set, 'big', n, T0, { body: 'abcd' }, false);
      const deleting = store.deleteBucket('big', { force: false });
      while ((await other.getBucket('big'))?.deletingAt == null) {
        if (await Promise.race([deleting.then(() => true), new Promise<false>((r) => setImmediate(() => r(false)))])) break;
      }
      const [del, purge] = await Promise.all([deleting, other.purgeDeleting()]);
      assert.equal(purge.stopped, undefined);
      assert.equal(del.requests + purge.requests, n, 'each request purged once');
      assert.equal(purge.bytes, purge.requests * 4);
      assert.ok(purge.finished.length === 0 || (purge.finished.length === 1 && purge.finished[0] === 'big'));
      assert.equal(await store.getBucket('big'), undefined);
      const aborted = new AbortController();
      aborted.abort();
      assert.deepEqual(await store.purgeDeleting({ signal: aborted.signal }), { finished: [], requests: 0, bytes: 0 });
    });
  });
}

import { randomBytes } from 'node:crypto';
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { PruneProgress, RequestSummary, StatsSample, TailCursor, TailEvent } from '../../../src/store/store.js';
import { captured, claim, DEST, idAt, ingestN, result, submitAll, T0, type Ctx } from './harness.js';

const SECOND = 1000;
const TO = 'http://127.0.0.1:9/staging';

const SUMMARY_KEYS: Array<keyof RequestSummary> = ['id', 'bucket', 'receivedAt', 'method', 'path', 'query', 'size', 'state', 'generation'];

const byBucket = (a: StatsSample, b: StatsSample) => (a.bucket < b.bucket ? -1 : 1);
const sortedAttempts = (s: StatsSample) =>
  [...s.attempts].sort((x, y) => (x.durationMs ?? -1) - (y.durationMs ?? -1) || Number(x.delivered) - Number(y.delivered));

export function statsContract(ctx: Ctx): void {
  describe('statsSamples', () => {
    it('counts deferrals by reason: what each claim recorded on the head of the line, since the bucket was made', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'r', destination: DEST, drain: { rate: { count: 1, perMs: 60 * SECOND }, burst: 1 } });
      await store.createBucket({ name: 'idle', destination: DEST });
      const ids = await ingestN(ctx.set, 'r', 3, T0);
      const window = { sinceMs: T0, untilMs: T0 + 10 * SECOND };
      const deferredOf = async () =>
        Object.fromEntries((await store.statsSamples(window)).buckets.map((b) => [b.bucket, b.deferred]).sort());
      assert.deepEqual(await deferredOf(), { idle: {}, r: {} });
      // The first claim takes the one token, and records the rate on the next in line: 1.
      const first = await claim(ctx.set, 'r', T0 + SECOND);
      assert.deepEqual([first.claimed.length, first.verdict.deferred], [1, { rate: 1 }]);
      // Two more walks, each held by the rate once (the head of the line only).
      for (const at of [T0 + 2 * SECOND, T0 + 3 * SECOND]) assert.deepEqual((await claim(ctx.set, 'r', at)).verdict.deferred, { rate: 1 });
      assert.deepEqual(await deferredOf(), { idle: {}, r: { rate: 3 } });
      // The same count as the deliveries carry.
      let onDeliveries = 0;
      for (const id of ids) for (const d of await store.requestHistory(id)) onDeliveries += d.deferrals;
      assert.equal(onDeliveries, 3);
      // A bucket made anew under the name starts from nothing.
      await store.deleteBucket('r', { force: true });
      await store.createBucket({ name: 'r', destination: DEST });
      assert.deepEqual(await deferredOf(), { idle: {}, r: {} });
    });

    it("a bucket's raw figures for a window: stored, by state, settled and attempts in the window, oldest waiting, refusals", async () => {
      const { store, drain, sink } = ctx.set;
      await store.createBucket({ name: 's', destination: DEST });
      await store.createBucket({ name: 'q' });
      await store.pauseBucket('q');
      const at = (s: number) => T0 + s * SECOND;
      const [r0] = await ingestN(ctx.set, 's', 1, at(0));
      const [r1] = await ingestN(ctx.set, 's', 1, at(10));
      const [r5, r6] = await submitAll(ctx.set, [captured('s', at(11)), captured('s', at(11) + 1)]);
      const [r4] = await ingestN(ctx.set, 's', 1, at(12), {}, false);
      const [r2] = await ingestN(ctx.set, 's', 1, at(15));
      const [r3] = await ingestN(ctx.set, 's', 1, at(20));
      void r4;

      // r0: first attempt before the window, delivered inside it.
      const a0 = (await claim(ctx.set, 's', at(1))).claimed;
      assert.deepEqual(
        a0.map((a) => a.requestId),
        [r0],
      );
      await drain.complete([result(a0[0]!, at(11), 'delivered')]);
      // r1 delivered in 50 ms; r5's worker dies (lease expired); r6 released unsent.
      const a1 = (await claim(ctx.set, 's', at(12), { leaseMs: SECOND })).claimed;
      assert.deepEqual(
        a1.map((a) => a.requestId),
        [r1, r5, r6],
      );
      await drain.complete([
        result(a1[0]!, at(12) + 50, 'delivered'),
        result(a1[2]!, at(12) + 5, 'released', { nextAttemptAt: at(12) + 5 }),
      ]);
      assert.equal((await drain.recoverExpired(at(13), await drain.listBuckets())).length, 1);
      // r2 retried (200 ms), r5 exhausted (200 ms), r6 failed (100 ms).
      const a2 = (await claim(ctx.set, 's', at(16))).claimed;
      const of = (id: string) => a2.find((a) => a.requestId === id)!;
      await drain.complete([
        result(of(r2!), at(16) + 200, 'retry', { status: 500, nextAttemptAt: at(60) }),
        result(of(r5!), at(16) + 200, 'exhausted', { status: 500 }),
        result(of(r6!), at(16) + 100, 'failed', { status: 404 }),
      ]);
      // A --to replay's attempt and settlement are not the bucket destination's figures.
      await store.createReplay({
        id: idAt(at(17)),
        bucket: 's',
        requestIds: [r0!],
        selection: {},
        destination: TO,
        rate: null,
        nowMs: at(17),
      });
      const to = (await claim(ctx.set, 's', at(17))).claimed;
      assert.deepEqual(
        to.map((a) => a.destination),
        [TO],
      );
      await drain.complete([result(to[0]!, at(17) + 10, 'delivered')]);
      // r3 superseded by a replay to the bucket destination (its new generation pending).
      await store.createReplay({
        id: idAt(at(18)),
        bucket: 's',
        requestIds: [r3!],
        selection: {},
        destination: null,
        rate: null,
        nowMs: at(18),
      });
      sink.countRejection('s', 'too_large');
      sink.countRejection('', 'unknown_bucket');
      await sink.close();

      const window = { sinceMs: at(10), untilMs: at(20) };
      const all = await store.statsSamples(window);
      assert.deepEqual(all.unattributedRejections, { unknown_bucket: 1 });
      const [q, s] = [...all.buckets].sort(byBucket);
      assert.deepEqual(q, {
        bucket: 'q',
        paused: true,
        requests: 0,
        latest: {},
        superseded: 0,
        oldestWaitingAt: null,
        receivedInWindow: 0,
        settled: { delivered: 0, failed: 0, exhausted: 0 },
        attempts: [],
        rejected: {},
        deferred: {},
        dispositions: {},
      });
      assert.deepEqual(
        { ...s!, attempts: sortedAttempts(s!) },
        {
          bucket: 's',
          paused: false,
          requests: 7,
          latest: { delivered: 2, retrying: 1, pending: 1, exhausted: 1, failed: 1 },
          superseded: 1,
          oldestWaitingAt: at(15),
          receivedInWindow: 5,
          settled: { delivered: 2, failed: 1, exhausted: 1 },
          attempts: [
            { durationMs: null, delivered: false, count: 1 },
            { durationMs: 50, delivered: true, count: 1 },
            { durationMs: 100, delivered: false, count: 1 },
            { durationMs: 200, delivered: false, count: 2 },
          ],
          rejected: { too_large: 1 },
          deferred: {},
          dispositions: {},
        },
      );
      const one = await store.statsSamples({ ...window, bucket: 'q' });
      assert.deepEqual(
        one.buckets.map((b) => b.bucket),
        ['q'],
      );
      const later = (await store.statsSamples({ sinceMs: at(20), untilMs: at(30) })).buckets.find((b) => b.bucket === 's')!;
      assert.deepEqual([later.receivedInWindow, later.attempts, later.settled], [1, [], { delivered: 0, failed: 0, exhausted: 0 }]);
      await assert.rejects(store.statsSamples({ ...window, bucket: 'nope' }), { code: 'not_found' });
    });
  });

  describe('prune', () => {
    it('removes old requests in the named terminal states with their rows; keeps live ones; a dry run only counts', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 'r', destination: DEST });
      await store.createBucket({ name: 'o', destination: DEST });
      const body = (n: number) => ({ body: Buffer.alloc(n, 0x61) });
      const [d1] = await ingestN(ctx.set, 'r', 1, T0, body(10));
      const [f1] = await ingestN(ctx.set, 'r', 1, T0 + 1, body(20));
      const [n1] = await ingestN(ctx.set, 'r', 1, T0 + 2, body(30), false);
      const [k1] = await ingestN(ctx.set, 'r', 1, T0 + 3, body(40));
      const [p1] = await ingestN(ctx.set, 'r', 1, T0 + 4, body(50));
      const [d2] = await ingestN(ctx.set, 'r', 1, T0 + 200 * SECOND, body(60));
      const [o1] = await ingestN(ctx.set, 'o', 1, T0 + 5, body(70));
      const now = T0 + 300 * SECOND;
      const claimed = (await claim(ctx.set, 'r', now)).claimed;
      const of = (id: string) => claimed.find((a) => a.requestId === id)!;
      await drain.complete([
        result(of(d1!), now + 1, 'delivered'),
        result(of(f1!), now + 1, 'failed', { status: 404 }),
        result(of(k1!), now + 1, 'delivered'),
        result(of(p1!), now + 1, 'released', { nextAttemptAt: now + 1 }),
        result(of(d2!), now + 1, 'delivered'),
      ]);
      await drain.complete((await claim(ctx.set, 'o', now)).claimed.map((a) => result(a, now + 1, 'delivered')));
      // A live delivery to another URL keeps its request.
      await store.createReplay({ id: idAt(now), bucket: 'r', requestIds: [k1!], selection: {}, destination: TO, rate: null, nowMs: now });
      const cutoff = T0 + 100 * SECOND;

      const dry = await store.prune({ receivedBeforeMs: cutoff, states: ['delivered'], dryRun: true });
      assert.deepEqual(dry, {
        requests: 2,
        bytes: 80,
        deliveries: 2,
        attempts: 2,
        keptLive: 1,
        buckets: {
          r: { requests: 1, bytes: 10, deliveries: 1, attempts: 1, keptLive: 1 },
          o: { requests: 1, bytes: 70, deliveries: 1, attempts: 1, keptLive: 0 },
        },
        reclaimedBytes: 0,
        dedupKeys: 0,
      });
      assert.equal((await store.getRequest(d1!))?.state, 'delivered', 'a dry run deletes nothing');

      const progress: PruneProgress[] = [];
      const real = await store.prune(
        { bucket: 'r', receivedBeforeMs: cutoff, states: ['delivered', 'failed', 'none'], dryRun: false },
        { onProgress: (p) => progress.push(p) },
      );
      assert.deepEqual(
        { ...real, reclaimedBytes: 0 },
        {
          requests: 3,
          bytes: 60,
          deliveries: 2,
          attempts: 2,
          keptLive: 1,
          buckets: { r: { requests: 3, bytes: 60, deliveries: 2, attempts: 2, keptLive: 1 } },
          reclaimedBytes: 0,
          dedupKeys: 0,
        },
      );
      assert.ok(real.reclaimedBytes >= 0);
      assert.equal(progress.filter((p) => p.phase === 'delete').at(-1)?.requests, 3);
      for (const id of [d1!, f1!, n1!]) {
        assert.equal(await store.getRequest(id), undefined);
        assert.deepEqual(await store.requestHistory(id), []);
      }
      assert.deepEqual(
        await Promise.all([k1!, p1!, d2!, o1!].map(async (id) => (await store.getRequest(id))?.state)),
        ['delivered', 'pending', 'delivered', 'delivered'],
        'live, never-prunable, recent, and another bucket stay',
      );
      assert.deepEqual(await store.bucketCounts('r').then((c) => [c.requests, c.bytes]), [3, 150]);

      // received_at before the cutoff, strictly.
      assert.equal(
        (await store.prune({ bucket: 'r', receivedBeforeMs: T0 + 200 * SECOND, states: ['delivered'], dryRun: false })).requests,
        0,
      );
      assert.equal(
        (await store.prune({ bucket: 'r', receivedBeforeMs: T0 + 200 * SECOND + 1, states: ['delivered'], dryRun: false })).requests,
        1,
      );
      await assert.rejects(store.prune({ bucket: 'nope', receivedBeforeMs: now, states: ['delivered'], dryRun: true }), {
        code: 'not_found',
      });
    });
  });

  describe('prune batches', () => {
    it('goes through more requests than one batch holds, and stops at the cutoff', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'r', destination: DEST });
      const old = await ingestN(ctx.set, 'r', 1200, T0, { body: 'abc' }, false);
      const recent = await ingestN(ctx.set, 'r', 5, T0 + 100 * SECOND, { body: 'abc' }, false);
      const dry = await store.prune({ receivedBeforeMs: T0 + 100 * SECOND, states: ['none'], dryRun: true });
      assert.deepEqual([dry.requests, dry.bytes, dry.deliveries], [1200, 3600, 0]);
      const real = await store.prune({ receivedBeforeMs: T0 + 100 * SECOND, states: ['none', 'delivered'], dryRun: false });
      assert.deepEqual([real.requests, real.bytes, real.keptLive], [1200, 3600, 0]);
      assert.equal(await store.getRequest(old[1199]!), undefined);
      assert.deepEqual(await store.listRequests('r', {}, { limit: 10 }).then((p) => p.requests.map((x) => x.id)), [...recent].reverse());
    });
  });

  describe('tail', () => {
    it('gives new requests and finished attempts once each, in time order', async () => {
      const { store, drain } = ctx.set;
      await store.createBucket({ name: 't', destination: DEST });
      await store.createBucket({ name: 'other', destination: DEST });
      ctx.clock.set(T0 + 10 * SECOND);
      const ids = await ingestN(ctx.set, 't', 3, T0, { path: '/p', query: 'x=1', body: 'abc' });
      await ingestN(ctx.set, 'other', 2, T0);
      let cursor: TailCursor = { requestId: '', sinceMs: T0, seen: [] };
      let r = await store.tail('t', cursor);
      // A request event carries the request's summary (RequestSummary); a dialect may add list fields.
      const summary = (e: TailEvent) =>
        e.kind === 'request'
          ? { kind: e.kind, at: e.at, request: Object.fromEntries(SUMMARY_KEYS.map((k) => [k, e.request[k]])) }
          : { kind: e.kind };
      assert.deepEqual(
        r.events.map(summary),
        ids.map((id, i) => ({
          kind: 'request',
          at: T0 + i,
          request: {
            id,
            bucket: 't',
            receivedAt: T0 + i,
            method: 'POST',
            path: '/p',
            query: 'x=1',
            size: 3,
            state: 'pending',
            generation: 1,
          },
        })),
      );
      cursor = r.cursor;
      assert.equal(cursor.requestId, ids[2]);
      assert.deepEqual((await store.tail('t', cursor)).events, [], 'nothing new');

      const claimed = (await claim(ctx.set, 't', T0 + 5 * SECOND)).claimed;
      await drain.complete([
        result(claimed[0]!, T0 + 7 * SECOND, 'delivered'),
        result(claimed[1]!, T0 + 6 * SECOND, 'retry', { status: 503, nextAttemptAt: T0 + 60 * SECOND }),
      ]);
      r = await store.tail('t', cursor);
      assert.deepEqual(
        r.events.map((e) =>
          e.kind === 'attempt' ? [e.at, e.requestId, e.deliveryId, e.generation, e.attempt.id, e.attempt.outcome] : e.kind,
        ),
        [
          [T0 + 6 * SECOND, ids[1], claimed[1]!.deliveryId, 1, claimed[1]!.attemptId, 'retry'],
          [T0 + 7 * SECOND, ids[0], claimed[0]!.deliveryId, 1, claimed[0]!.attemptId, 'delivered'],
        ],
        'finished attempts only (the third is in flight), by when they finished',
      );
      cursor = r.cursor;
      assert.deepEqual((await store.tail('t', cursor)).events, [], 'each attempt once');
      await drain.complete([result(claimed[2]!, T0 + 8 * SECOND, 'failed', { status: 400 })]);
      const [late] = await ingestN(ctx.set, 't', 1, T0 + 9 * SECOND);
      r = await store.tail('t', cursor);
      assert.deepEqual(
        r.events.map((e) => (e.kind === 'attempt' ? ['attempt', e.requestId, e.attempt.status] : ['request', e.request.id])),
        [
          ['attempt', ids[2], 400],
          ['request', late],
        ],
      );
      assert.deepEqual((await store.tail('t', r.cursor)).events, []);
      await assert.rejects(store.tail('nope', cursor), { code: 'not_found' });
    });
  });

  describe('storageSize', () => {
    it("the database's bytes, which grow as requests are stored; the WAL's on SQLite, null on PostgreSQL", async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'big' });
      const before = await store.storageSize();
      assert.ok(before.databaseBytes > 0);
      if (ctx.dialect.name === 'postgres') assert.equal(before.walBytes, null);
      else assert.ok(before.walBytes !== null && before.walBytes >= 0);
      // 2 MiB of random bytes (no compression shrinks them), a body each (the SQLite sink transfers
      // each body's memory to its writer thread). On SQLite the WAL's space is reused after a
      // checkpoint and up to its 1 MiB after migrating may move into the database file, so the
      // two files together grow by at least 1 MiB; PostgreSQL's relation files grow by the 2 MiB.
      await submitAll(
        ctx.set,
        Array.from({ length: 32 }, (_, i) => captured('big', T0 + i, { body: randomBytes(64 * 1024) })),
        false,
      );
      const after = await store.storageSize();
      const total = (s: typeof before) => s.databaseBytes + (s.walBytes ?? 0);
      assert.ok(
        total(after) >= total(before) + (ctx.dialect.name === 'postgres' ? 2 : 1) * 1024 * 1024,
        `${total(before)} -> ${total(after)}`,
      );
    });
  });
}

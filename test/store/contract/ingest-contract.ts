import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { describe, it } from 'node:test';
import { captured, DEST, idAt, submitAll, T0, type Ctx } from './harness.js';

/** IngestSink.submit and countRejection, read back through getRequest, requestHistory and the counts. */
export function ingestContract(ctx: Ctx): void {
  describe('ingest', () => {
    it('takes many requests at once and gives each back byte-exact: body, raw headers, trailers, path, query, peer', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const every = Buffer.from(Array.from({ length: 256 }, (_, i) => i));
      const requests = [
        captured('b', T0, { body: every, method: 'PATCH', path: '/a/%2F/./b', query: 'x=1&x=2&y=%20' }),
        captured('b', T0 + 1, { body: Buffer.alloc(0), path: '', query: '', peer: null }),
        // Invalid UTF-8 and NULs must not be decoded or cut.
        captured('b', T0 + 2, { body: Buffer.from([0xff, 0xfe, 0x00, 0xc3, 0x28, 0x00, 0x61]) }),
        captured('b', T0 + 3, {
          // Order, case and repeats as received; values with quotes, backslashes and latin1 text.
          rawHeaders: ['X-Dup', 'one', 'x-dup', 'two', 'Host', 'example.test', 'X-Quote', 'say "hi" \\ caf\u00e9', 'Empty', ''],
          rawTrailers: ['X-Checksum', 'abc', 'x-checksum', 'def'],
          peer: '::ffff:10.0.0.7',
        }),
        captured('b', T0 + 4, { body: Buffer.alloc(300 * 1024, 0x5a), method: 'PUT' }),
        ...Array.from({ length: 45 }, (_, i) => captured('b', T0 + 10 + i, { body: `body ${i}`, rawHeaders: ['X-N', String(i)] })),
      ];
      // submit() may take the body's memory (the SQLite sink transfers an exact-size buffer to its
      // writer thread), so the expected values are copies made before.
      const expected = requests.map((r) => ({ ...r, body: Buffer.from(r.body) }));
      const ids = await submitAll(ctx.set, requests);
      assert.equal(new Set(ids).size, 50);
      for (const sent of expected) {
        const got = await store.getRequest(sent.id);
        assert.ok(got, sent.id);
        assert.ok(got.body.equals(sent.body), `body of ${sent.id}`);
        const { rawTrailers, body: _body, ...rest } = got;
        assert.deepEqual(rest, {
          id: sent.id,
          bucket: 'b',
          receivedAt: sent.receivedAt,
          method: sent.method,
          path: sent.path,
          query: sent.query,
          rawHeaders: sent.rawHeaders,
          size: sent.body.length,
          sha256: createHash('sha256').update(sent.body).digest('hex'),
          peer: sent.peer,
          state: 'pending',
          disposition: 'accepted',
          verdict: null,
          dedupKey: null,
          duplicateOf: null,
        });
        assert.deepEqual(rawTrailers ?? [], sent.rawTrailers ?? [], `trailers of ${sent.id}`);
      }
      assert.equal(await store.getRequest(idAt(T0)), undefined, 'an id never stored');
      const counts = await store.bucketCounts('b');
      assert.equal(counts.requests, 50);
      assert.equal(
        counts.bytes,
        expected.reduce((n, r) => n + r.body.length, 0),
      );
      assert.deepEqual(counts.states, { pending: 50 });
    });

    it('createDelivery true makes the first delivery (generation 1, due at receipt); false stores the request alone (state none)', async () => {
      const { store } = ctx.set;
      await store.createBucket({ name: 'b', destination: DEST });
      const [withDelivery] = await submitAll(ctx.set, [captured('b', T0 + 5)], true);
      const [without] = await submitAll(ctx.set, [captured('b', T0 + 6)], false);
      assert.equal((await store.getRequest(withDelivery!))!.state, 'pending');
      assert.equal((await store.getRequest(without!))!.state, 'none');
      const [d, ...more] = await store.requestHistory(withDelivery!);
      assert.equal(more.length, 0);
      assert.deepEqual(
        { ...d!, id: typeof d!.id },
        {
          id: 'string',
          generation: 1,
          destination: null,
          state: 'pending',
          trigger: 'initial',
          replayId: null,
          attempts: 0,
          nextAttemptAt: T0 + 5,
          deferrals: 0,
          lastDeferralReason: null,
          createdAt: T0 + 5,
          settledAt: null,
          supersedeRequested: false,
          latest: true,
          attemptLog: [],
        },
      );
      assert.deepEqual(await store.requestHistory(without!), []);
      // A paused bucket keeps storing; its new requests wait, held.
      await store.pauseBucket('b');
      const [held] = await submitAll(ctx.set, [captured('b', T0 + 7)], true);
      assert.equal((await store.getRequest(held!))!.state, 'held');
      await store.resumeBucket('b');
      assert.deepEqual(await store.requestHistory(idAt(T0)), [], 'an unknown request has no history');
      assert.deepEqual((await store.bucketCounts('b')).states, { pending: 2, none: 1 });
    });

    it('refuses a request to an unknown or deleted bucket with unknown_bucket and stores nothing of it', async () => {
      const { store, sink } = ctx.set;
      await store.createBucket({ name: 'gone', destination: DEST });
      await store.deleteBucket('gone', { force: false });
      for (const bucket of ['never', 'gone']) {
        const r = captured(bucket, T0);
        await assert.rejects(sink.submit(r, { createDelivery: true }), { code: 'unknown_bucket' }, bucket);
        assert.equal(await store.getRequest(r.id), undefined);
      }
      // A refusal in a batch does not fail the others committed with it.
      await store.createBucket({ name: 'live' });
      const ok = captured('live', T0 + 1);
      const bad = captured('never', T0 + 1);
      const [a, b] = await Promise.allSettled([sink.submit(ok, { createDelivery: false }), sink.submit(bad, { createDelivery: false })]);
      assert.equal(a.status, 'fulfilled');
      assert.equal(b.status, 'rejected');
      assert.equal((await store.getRequest(ok.id))?.bucket, 'live');
    });

    it('counts refusals by bucket and reason; those naming no bucket, or one that does not exist, are unattributed', async () => {
      const { store, sink } = ctx.set;
      await store.createBucket({ name: 'a' });
      await store.createBucket({ name: 'b' });
      sink.countRejection('a', 'too_large');
      sink.countRejection('a', 'too_large');
      sink.countRejection('a', 'client_aborted');
      sink.countRejection('', 'unknown_bucket');
      sink.countRejection('nope', 'too_large');
      await submitAll(ctx.set, [captured('a', T0)], false);
      // close() flushes what the sink holds (countRejection is buffered).
      await sink.close();
      assert.deepEqual((await store.bucketCounts('a')).rejections, { too_large: 2, client_aborted: 1 });
      assert.deepEqual((await store.bucketCounts('b')).rejections, {});
      assert.deepEqual(await store.unattributedRejections(), { unknown_bucket: 1, too_large: 1 });
      const all = await store.allBucketCounts();
      assert.deepEqual(all.get('a')!.rejections, { too_large: 2, client_aborted: 1 });
      const stats = await store.statsSamples({ sinceMs: 0, untilMs: T0 + 1 });
      assert.deepEqual(stats.unattributedRejections, { unknown_bucket: 1, too_large: 1 });
      assert.deepEqual(stats.buckets.find((s) => s.bucket === 'a')!.rejected, { too_large: 2, client_aborted: 1 });
    });

    it('reports itself healthy and accepting', () => {
      assert.deepEqual(ctx.set.sink.health(), { ok: true });
      assert.deepEqual(ctx.set.sink.accepting(), { ok: true });
    });
  });
}

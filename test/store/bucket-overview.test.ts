import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { DIALECT_NAMES, openFixture, seed, T0, type Fixture } from '../api/store-reads-fixture.js';

/**
 * Store.bucketOverview (the inspector's overview, GET /api/buckets?limit=) on every dialect: one
 * statement for a page of buckets, whose figures must be exactly what the per-bucket reads give
 * (bucketCounts, statsSamples over the same windows), and whose pages join up.
 */
for (const dialect of DIALECT_NAMES) {
  describe(`bucketOverview (${dialect})`, () => {
    let f: Fixture;
    before(async () => {
      f = await openFixture(dialect);
      await seed(f);
    });
    after(async () => {
      await f?.close();
    });

    const BIN = 60_000;
    const SINCE = T0 - BIN;

    it('a page: each bucket as getBucket, counts as bucketCounts, oldest waiting and windows as statsSamples', async () => {
      const page = await f.store.bucketOverview({ limit: 50, sinceMs: SINCE, binMs: BIN, bins: 3 });
      assert.equal(page.total, 2);
      assert.equal(page.nextAfter, null);
      assert.deepEqual(
        page.buckets.map((r) => r.bucket.name),
        ['alpha', 'beta'],
      );
      for (const row of page.buckets) {
        const name = row.bucket.name;
        assert.deepStrictEqual(row.bucket, await f.store.getBucket(name));
        assert.deepStrictEqual(row.counts, await f.store.bucketCounts(name));
        const whole = (await f.store.statsSamples({ bucket: name, sinceMs: SINCE, untilMs: SINCE + 3 * BIN })).buckets[0]!;
        assert.equal(row.oldestWaitingAt, whole.oldestWaitingAt, `${name}: oldest waiting`);
        for (let i = 0; i < 3; i++) {
          const one = (await f.store.statsSamples({ bucket: name, sinceMs: SINCE + i * BIN, untilMs: SINCE + (i + 1) * BIN })).buckets[0]!;
          assert.equal(row.arrivals[i], one.receivedInWindow, `${name}: arrivals in window ${i}`);
          assert.equal(row.delivered[i], one.settled.delivered, `${name}: delivered in window ${i}`);
        }
      }
      const alpha = page.buckets[0]!;
      // 15 requests stored from T0 on, six delivered a minute later, three retrying and one delivering.
      assert.deepEqual(alpha.arrivals, [0, 15, 0]);
      assert.deepEqual(alpha.delivered, [0, 0, 6]);
      assert.equal(alpha.oldestWaitingAt, T0);
      // beta is paused: its pending requests are held, and none of them is waiting to be sent.
      const beta = page.buckets[1]!;
      assert.equal(beta.counts.states.held, 5);
      assert.deepEqual(beta.arrivals, [0, 5, 0]);
    });

    it('pages join up in name order, and a page past the end is empty with the total', async () => {
      const one = await f.store.bucketOverview({ limit: 1, sinceMs: SINCE, binMs: BIN, bins: 0 });
      assert.deepEqual(
        one.buckets.map((r) => r.bucket.name),
        ['alpha'],
      );
      assert.equal(one.nextAfter, 'alpha');
      assert.deepEqual(one.buckets[0]!.arrivals, []);
      const two = await f.store.bucketOverview({ after: one.nextAfter!, limit: 1, sinceMs: SINCE, binMs: BIN, bins: 0 });
      assert.deepEqual(
        two.buckets.map((r) => r.bucket.name),
        ['beta'],
      );
      assert.equal(two.nextAfter, null);
      const none = await f.store.bucketOverview({ after: 'zzz', limit: 5, sinceMs: SINCE, binMs: BIN, bins: 0 });
      assert.deepEqual(none, { buckets: [], total: 2, nextAfter: null });
    });
  });
}

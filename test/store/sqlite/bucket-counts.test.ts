import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { newId } from '../../../src/shared/ids.js';
import { BUCKET_TOTALS_SQL } from '../../../src/store/sqlite/sqlite-bucket-counts.js';
import { startConsumer, type Consumer } from '../../helpers/consumer.js';
import { drainBench, type DrainBench } from '../../helpers/drain.js';

// `bucket list` reads every bucket's counts in a fixed number of aggregate queries
// (allBucketCounts); they must be exactly what bucketCounts gives one bucket at a time.

describe('allBucketCounts', () => {
  let b: DrainBench;
  let consumer: Consumer;
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
  });
  afterEach(async () => {
    await b.close();
    await consumer.close();
  });

  it('gives every bucket the counts bucketCounts gives it: states, held, none, bytes, refusals', async () => {
    await b.store.createBucket({ name: 'a', destination: `${consumer.url}/a` });
    await b.store.createBucket({ name: 'held', destination: `${consumer.url}/h` });
    await b.store.createBucket({ name: 'none' });
    await b.store.createBucket({ name: 'empty', destination: `${consumer.url}/e` });
    consumer.script({ status: 500 });
    const ids = b.ingest('a', { body: 'x' }, { body: 'yy' }, { body: 'zzz' });
    b.ingest('held', {}, {});
    const [n1] = b.ingest('none', { body: '12345' }, {});
    await b.worker().runOnce();
    // A replay --to of a request without a delivery: it stays `none` (the --to row is not its state).
    await b.store.createReplay({
      id: newId(),
      bucket: 'none',
      requestIds: [n1!],
      selection: {},
      destination: `${consumer.url}/to`,
      rate: null,
      nowMs: b.clock.now(),
    });
    // A replay to the destination: the earlier generation superseded, the new one pending.
    await b.store.createReplay({
      id: newId(),
      bucket: 'a',
      requestIds: [ids[1]!],
      selection: {},
      destination: null,
      rate: null,
      nowMs: b.clock.now(),
    });
    b.ingest('held', {});
    await b.store.pauseBucket('held');
    b.raw
      .prepare(`insert into rejections (bucket, reason, count, last_at) values ('a', 'too_large', 2, 0), ('', 'unknown_bucket', 1, 0)`)
      .run();

    const all = await b.store.allBucketCounts();
    assert.deepEqual([...all.keys()].sort(), ['a', 'empty', 'held', 'none']);
    for (const name of all.keys()) assert.deepEqual(all.get(name), await b.store.bucketCounts(name), name);
    assert.deepEqual(all.get('held')!.states, { delivered: 2, held: 1 });
    assert.deepEqual(all.get('none')!.states, { none: 2 });
    assert.equal(all.get('a')!.requests, 3);
    assert.equal(all.get('a')!.bytes, 6);
    assert.deepEqual(all.get('a')!.rejections, { too_large: 2 });
    assert.deepEqual(all.get('empty'), { requests: 0, bytes: 0, states: {}, rejections: {} });
  });

  it('reads requests and bytes from the covering index, not the rows that hold the bodies', () => {
    const plan = (b.raw.prepare(`explain query plan ${BUCKET_TOTALS_SQL}`).all() as Array<{ detail: string }>).map((r) => r.detail);
    const searches = plan.filter((d) => d.startsWith('SEARCH r'));
    assert.equal(searches.length, 2, plan.join('\n'));
    for (const d of searches) assert.match(d, /^SEARCH r USING COVERING INDEX requests_bucket_id \(bucket=\?\)$/, plan.join('\n'));
  });
});

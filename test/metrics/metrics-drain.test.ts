import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { createMetrics, type Metrics, type MetricsSource } from '../../src/metrics/metrics.js';
import { silentLogger } from '../../src/shared/logger.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';
import { parseExposition, type Exposition } from '../helpers/exposition.js';

// The drain worker feeding the metrics through its observer, against a real SQLite file and a real
// consumer on loopback, one pass at a time with a manual clock (which also drives the metrics'
// read cache): no sleeps.

describe('metrics fed by the drain worker', () => {
  let b: DrainBench;
  let consumer: Consumer;
  let reads: number;
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
    reads = 0;
  });
  afterEach(async () => {
    await b.close();
    await consumer.close();
  });

  /** The store as the metrics' source, counting its reads. */
  const source = (): MetricsSource => ({
    statsSamples: (q) => {
      reads++;
      return b.store.statsSamples(q);
    },
    storageSize: () => b.store.storageSize(),
  });
  const metricsFor = (options: { bucketHistograms?: boolean } = {}) =>
    createMetrics({ source: source(), clock: b.clock, logger: silentLogger, processMetrics: false, ...options });
  const scrape = async (m: Metrics): Promise<Exposition> => parseExposition((await m.render()).body);
  const create = (name: string, drain: Record<string, unknown> = {}) =>
    b.store.createBucket({ name, destination: `${consumer.url}/in`, drain });

  it('counts attempts by outcome and deferrals by reason as the store records them', async () => {
    await create('s', { rate: { count: 1, perMs: 1000 }, burst: 1 });
    b.ingest('s', {}, {}, {});
    consumer.script({ status: 503 });
    const metrics = metricsFor();
    const w = b.worker({ observer: metrics });
    const pass = await w.runOnce();
    assert.equal(pass.started, 1);
    assert.deepEqual(pass.deferred, { rate: 1 });
    const m = await scrape(metrics);
    assert.equal(m.value('hookbucket_attempts_total', { bucket: 's', outcome: 'retry' }), 1);
    assert.equal(m.find('hookbucket_attempts_total').length, 1);
    assert.equal(m.value('hookbucket_deferrals_total', { bucket: 's', reason: 'rate' }), 1);
    // The same figure the deliveries' deferral counts hold.
    assert.equal(b.raw.prepare('select sum(deferrals) from deliveries').pluck().get(), 1);
    assert.equal(m.value('hookbucket_attempt_duration_seconds_count'), 1);
    const states = Object.fromEntries(m.find('hookbucket_deliveries', { bucket: 's' }).map((s) => [s.labels.state, s.value]));
    assert.deepEqual(states, { pending: 2, retrying: 1, delivering: 0, delivered: 0, failed: 0, exhausted: 0, superseded: 0 });
    // The requests were stored at the bench clock's start; nothing has moved it yet.
    assert.equal(m.value('hookbucket_oldest_waiting_age_seconds', { bucket: 's' }), 0);
  });

  it("gives the oldest waiting request's age in seconds, from the database read and the clock", async () => {
    await create('s');
    await b.store.pauseBucket('s');
    b.ingest('s', {});
    const metrics = metricsFor();
    b.clock.advance(90_000);
    let m = await scrape(metrics);
    assert.equal(m.value('hookbucket_oldest_waiting_age_seconds', { bucket: 's' }), 90);
    assert.equal(m.value('hookbucket_bucket_paused', { bucket: 's' }), 1);
    // Within the cache the read is reused, and the age still follows the clock.
    b.clock.advance(1_500);
    m = await scrape(metrics);
    assert.equal(m.value('hookbucket_oldest_waiting_age_seconds', { bucket: 's' }), 91.5);
    assert.equal(reads, 1);
  });

  it('reads the database at most once per cacheMs, however often it is scraped', async () => {
    await create('s');
    const metrics = metricsFor();
    await Promise.all([metrics.render(), metrics.render(), metrics.render()]);
    assert.equal(reads, 1, 'concurrent scrapes share one read');
    b.clock.advance(4_999);
    await metrics.render();
    assert.equal(reads, 1);
    b.clock.advance(1);
    await metrics.render();
    assert.equal(reads, 2);
  });

  it('has no bucket label on the duration histogram by default, and one with bucketHistograms', async () => {
    await create('a');
    await create('c');
    b.ingest('a', {});
    b.ingest('c', {}, {});
    const plain = metricsFor();
    const perBucket = metricsFor({ bucketHistograms: true });
    // Both observers watch the same worker: one through a small fan-out.
    await b
      .worker({
        observer: {
          attemptRecorded: (...args) => {
            plain.attemptRecorded(...args);
            perBucket.attemptRecorded(...args);
          },
          deferred: (...args) => {
            plain.deferred(...args);
            perBucket.deferred(...args);
          },
        },
      })
      .runOnce();
    const p = await scrape(plain);
    assert.equal(p.value('hookbucket_attempt_duration_seconds_count'), 3);
    assert.deepEqual(p.labelValues('hookbucket_attempt_duration_seconds_count', 'bucket'), []);
    const q = await scrape(perBucket);
    assert.equal(q.value('hookbucket_attempt_duration_seconds_count'), undefined);
    assert.equal(q.value('hookbucket_attempt_duration_seconds_count', { bucket: 'a' }), 1);
    assert.equal(q.value('hookbucket_attempt_duration_seconds_count', { bucket: 'c' }), 2);
    assert.equal(q.value('hookbucket_attempt_duration_seconds_bucket', { bucket: 'c', le: '+Inf' }), 2);
  });

  it("removes a deleted bucket's series at the first read that finds it gone", async () => {
    await create('keep');
    await create('gone');
    b.ingest('keep', {});
    b.ingest('gone', {});
    const metrics = metricsFor({ bucketHistograms: true });
    await b.worker({ observer: metrics }).runOnce();
    metrics.ingestRefused('gone', 'body_too_large');
    metrics.ingestRefused('', 'unknown_bucket');
    let m = await scrape(metrics);
    assert.equal(m.value('hookbucket_attempts_total', { bucket: 'gone', outcome: 'delivered' }), 1);
    assert.equal(m.value('hookbucket_deliveries', { bucket: 'gone', state: 'delivered' }), 1);

    await b.store.deleteBucket('gone', { force: true });
    // Within the cache nothing is re-read: the series stay until the next read.
    m = await scrape(metrics);
    assert.equal(m.value('hookbucket_attempts_total', { bucket: 'gone', outcome: 'delivered' }), 1);
    b.clock.advance(5_000);
    const text = (await metrics.render()).body;
    m = parseExposition(text);
    assert.doesNotMatch(text, /bucket="gone"/);
    assert.equal(m.value('hookbucket_attempts_total', { bucket: 'keep', outcome: 'delivered' }), 1);
    assert.equal(m.value('hookbucket_attempt_duration_seconds_count', { bucket: 'keep' }), 1);
    assert.equal(m.value('hookbucket_deliveries', { bucket: 'keep', state: 'delivered' }), 1);
    assert.equal(m.value('hookbucket_ingest_refused_total', { bucket: '', reason: 'unknown_bucket' }), 1, 'bucket="" is never removed');

    // Made again under the same name: counted afresh.
    await create('gone');
    b.ingest('gone', {});
    await b.worker({ observer: metrics }).runOnce();
    b.clock.advance(5_000);
    m = await scrape(metrics);
    assert.equal(m.value('hookbucket_attempts_total', { bucket: 'gone', outcome: 'delivered' }), 1);
  });

  it('keeps the series of a bucket counted after the last read began (made a moment ago)', async () => {
    const metrics = metricsFor();
    await metrics.render();
    await create('late');
    metrics.requestReceived('late');
    // The cached read predates the bucket: not a reason to remove it.
    let m = await scrape(metrics);
    assert.equal(m.value('hookbucket_requests_received_total', { bucket: 'late' }), 1);
    b.clock.advance(5_000);
    m = await scrape(metrics);
    assert.equal(m.value('hookbucket_requests_received_total', { bucket: 'late' }), 1);
  });

  it('counts an attempt whose lease expired, without a duration', async () => {
    await create('s');
    const [id] = b.ingest('s', {});
    // A worker that claims and never records (it "died"): its delivery is leased for 60 s.
    const dead = await b.drain.claim(
      (await b.drain.listBuckets())[0]!,
      { nowMs: b.clock.now(), limit: 1, leaseUntilMs: b.clock.now() + 60_000 },
      {},
    );
    assert.equal(dead.claimed.length, 1);
    b.clock.advance(60_001);
    const metrics = metricsFor();
    await b.worker({ observer: metrics }).runOnce();
    const m = await scrape(metrics);
    assert.equal(m.value('hookbucket_attempts_total', { bucket: 's', outcome: 'lease_expired' }), 1);
    assert.equal(m.value('hookbucket_attempts_total', { bucket: 's', outcome: 'delivered' }), 1);
    assert.equal(m.value('hookbucket_attempt_duration_seconds_count'), 1, 'only the attempt that was timed');
    assert.equal(b.delivery(id!).state, 'delivered');
  });

  it('leaves the database gauges out of a scrape whose read fails, and counts the failure', async () => {
    const metrics = createMetrics({
      source: {
        statsSamples: () => Promise.reject(new Error('database is locked')),
        storageSize: () => b.store.storageSize(),
      },
      clock: b.clock,
      logger: silentLogger,
      processMetrics: false,
    });
    metrics.requestReceived('s');
    const m = await scrape(metrics);
    assert.equal(m.value('hookbucket_metrics_read_errors_total'), 1);
    assert.equal(m.find('hookbucket_deliveries').length, 0);
    assert.equal(m.value('hookbucket_database_bytes'), undefined);
    assert.equal(m.value('hookbucket_requests_received_total', { bucket: 's' }), 1, 'counters are still served');
  });
});

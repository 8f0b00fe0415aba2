import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { Hono } from 'hono';
import type { Counter } from 'prom-client';
import { createMetricsRoute } from '../../src/metrics/metrics-route.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { parseExposition, type Exposition } from '../helpers/exposition.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { until } from '../helpers/until.js';

// A real server (ingest on a real socket, SQLite file, its drain worker) and a real consumer on
// loopback; /metrics is read through the route the admin listener mounts, and its text parsed.

describe('/metrics of serve', () => {
  let server: TestServer;
  let consumer: Consumer;
  let text: string;
  let contentType: string | null;
  let m: Exposition;

  before(async () => {
    consumer = await startConsumer();
    server = await startTestServer({ worker: true });
    await server.store.createBucket({ name: 'hooks', destination: `${consumer.url}/in`, maxBody: 64 });
    await server.store.createBucket({ name: 'quiet' });
    for (let i = 0; i < 3; i++) {
      const res = await fetch(`${server.url}/b/hooks/evt`, { method: 'POST', body: `{"n":${i}}` });
      assert.equal(res.status, 200);
    }
    assert.equal((await fetch(`${server.url}/b/quiet`, { method: 'POST', body: 'x' })).status, 200);
    const unknown = await fetch(`${server.url}/b/invented-name-4711`, { method: 'POST', body: 'x' });
    assert.equal(unknown.status, 404);
    const tooLarge = await fetch(`${server.url}/b/hooks`, { method: 'POST', body: 'y'.repeat(100) });
    assert.equal(tooLarge.status, 413);
    await consumer.waitFor(3);
    // Attempts are counted once the store has recorded them.
    const attempts = server.metrics.registry.getSingleMetric('hookbucket_attempts_total') as Counter;
    await until(async () => (await attempts.get()).values.reduce((n, v) => n + v.value, 0) === 3, 'three attempts recorded');
    // Mounted the way the admin listener mounts it.
    const admin = new Hono().route('/metrics', createMetricsRoute(server.metrics));
    const res = await admin.request('/metrics');
    assert.equal(res.status, 200);
    contentType = res.headers.get('content-type');
    text = await res.text();
    m = parseExposition(text);
  });
  after(async () => {
    await server.stop();
    await consumer.close();
  });

  it('answers the Prometheus text format 0.0.4', () => {
    assert.equal(contentType, 'text/plain; version=0.0.4; charset=utf-8');
    assert.equal(m.types.get('hookbucket_requests_received_total'), 'counter');
    assert.equal(m.types.get('hookbucket_attempt_duration_seconds'), 'histogram');
    assert.equal(m.types.get('hookbucket_deliveries'), 'gauge');
  });

  it('counts stored requests by bucket', () => {
    assert.equal(m.value('hookbucket_requests_received_total', { bucket: 'hooks' }), 3);
    assert.equal(m.value('hookbucket_requests_received_total', { bucket: 'quiet' }), 1);
    assert.deepEqual(m.labelValues('hookbucket_requests_received_total', 'bucket'), ['hooks', 'quiet']);
  });

  it('counts refusals by bucket and reason, an unknown bucket as bucket="" and never its name', () => {
    assert.equal(m.value('hookbucket_ingest_refused_total', { bucket: '', reason: 'unknown_bucket' }), 1);
    assert.equal(m.value('hookbucket_ingest_refused_total', { bucket: 'hooks', reason: 'body_too_large' }), 1);
    assert.equal(m.find('hookbucket_ingest_refused_total').length, 2);
    assert.doesNotMatch(text, /invented-name-4711/);
  });

  it('counts attempts by outcome and their durations in one histogram without a bucket label', () => {
    assert.equal(m.value('hookbucket_attempts_total', { bucket: 'hooks', outcome: 'delivered' }), 3);
    assert.equal(m.find('hookbucket_attempts_total').length, 1);
    assert.equal(m.value('hookbucket_attempt_duration_seconds_count'), 3);
    assert.equal(m.value('hookbucket_attempt_duration_seconds_bucket', { le: '+Inf' }), 3);
    for (const s of m.find('hookbucket_attempt_duration_seconds_bucket')) assert.deepEqual(Object.keys(s.labels), ['le']);
    assert.equal(m.find('hookbucket_deferrals_total').length, 0, 'nothing was held back');
  });

  it('reads deliveries by state, the oldest waiting age and paused from the database', () => {
    const states = (bucket: string) =>
      Object.fromEntries(m.find('hookbucket_deliveries', { bucket }).map((s) => [s.labels.state, s.value]));
    assert.deepEqual(states('hooks'), { pending: 0, retrying: 0, delivering: 0, delivered: 3, failed: 0, exhausted: 0, superseded: 0 });
    // A bucket without a destination has no deliveries.
    assert.deepEqual(states('quiet'), { pending: 0, retrying: 0, delivering: 0, delivered: 0, failed: 0, exhausted: 0, superseded: 0 });
    assert.equal(m.value('hookbucket_oldest_waiting_age_seconds', { bucket: 'hooks' }), 0);
    assert.equal(m.value('hookbucket_bucket_paused', { bucket: 'hooks' }), 0);
  });

  it('reports the database and WAL file sizes, and the process metrics', () => {
    assert.ok(m.value('hookbucket_database_bytes')! > 0);
    assert.ok(m.value('hookbucket_database_wal_bytes')! >= 0);
    assert.ok(m.value('process_cpu_user_seconds_total')! > 0);
    assert.ok(m.find('nodejs_eventloop_lag_seconds').length > 0);
  });

  it("labels only by bucket, reason, outcome, state (and le, and the process metrics' own)", () => {
    const allowed = new Set(['bucket', 'reason', 'outcome', 'state', 'le']);
    for (const s of m.samples.filter((s) => s.name.startsWith('hookbucket_'))) {
      for (const k of Object.keys(s.labels)) assert.ok(allowed.has(k), `${s.name} has label ${k}`);
    }
  });

  it('is not served on the ingest port', async () => {
    const res = await fetch(`${server.url}/metrics`);
    assert.equal(res.status, 404);
  });
});

import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { startMetricsListener } from '../../src/metrics/metrics-listener.js';
import { isLoopbackAddress } from '../../src/config/config.js';
import { bearerMatches, bearerToken, tokensEqual } from '../../src/shared/bearer.js';
import { ManualClock } from '../../src/shared/clock.js';
import { AppError } from '../../src/shared/errors.js';
import { silentLogger } from '../../src/shared/logger.js';

const TOKEN = 'a-token-of-at-least-32-characters-0123456789';
const metrics = () => createMetrics({ source: {}, clock: new ManualClock(), logger: silentLogger, processMetrics: false });

describe('bearer tokens', () => {
  it('compares tokens by their SHA-256, so different lengths compare without throwing', () => {
    assert.equal(tokensEqual(TOKEN, TOKEN), true);
    assert.equal(tokensEqual(`${TOKEN}x`, TOKEN), false);
    assert.equal(tokensEqual('', TOKEN), false);
    assert.equal(tokensEqual(`${TOKEN.slice(0, -1)}X`, TOKEN), false);
  });

  it('reads the Bearer scheme case-insensitively and nothing else', () => {
    const table: Array<[string | undefined, string | undefined]> = [
      [`Bearer ${TOKEN}`, TOKEN],
      [`bearer ${TOKEN}`, TOKEN],
      [`BEARER  ${TOKEN} `, TOKEN],
      [`Basic ${TOKEN}`, undefined],
      [`Bearer`, undefined],
      [`Bearer a b`, undefined],
      ['', undefined],
      [undefined, undefined],
    ];
    for (const [header, want] of table) assert.equal(bearerToken(header), want, String(header));
    assert.equal(bearerMatches(`Bearer ${TOKEN}`, TOKEN), true);
    assert.equal(bearerMatches(undefined, TOKEN), false);
    assert.equal(bearerMatches('Bearer wrong', TOKEN), false);
  });

  it('tells loopback bind addresses from the others', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', 'localhost', '::1', '[::1]', '::ffff:127.0.0.1', 'LOCALHOST'])
      assert.equal(isLoopbackAddress(h), true, h);
    for (const h of ['0.0.0.0', '::', '10.0.0.1', '192.168.1.1', 'example.com', '127.0.0.1.example.com', ''])
      assert.equal(isLoopbackAddress(h), false, h);
  });
});

describe('the metrics listener of a standalone worker', () => {
  it('serves /metrics only, on loopback without a token', async () => {
    const l = await startMetricsListener(metrics(), { host: '127.0.0.1', port: 0, token: undefined, logger: silentLogger });
    try {
      assert.ok(l.port > 0);
      assert.equal(l.url, `http://127.0.0.1:${l.port}/metrics`);
      const res = await fetch(l.url);
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
      assert.match(await res.text(), /^# TYPE hookbucket_attempts_total counter$/m);
      const other = await fetch(`http://127.0.0.1:${l.port}/api/buckets`);
      assert.equal(other.status, 404);
      assert.equal(((await other.json()) as { code: string }).code, 'not_found');
    } finally {
      await l.close();
    }
  });

  it('with a token, answers 401 without the right Bearer token and 200 with it', async () => {
    const l = await startMetricsListener(metrics(), { host: '127.0.0.1', port: 0, token: TOKEN, logger: silentLogger });
    try {
      for (const authorization of [undefined, 'Bearer wrong', `Basic ${TOKEN}`, `Bearer ${TOKEN}x`]) {
        const res = await fetch(l.url, authorization === undefined ? {} : { headers: { authorization } });
        assert.equal(res.status, 401, String(authorization));
        assert.equal(res.headers.get('www-authenticate'), 'Bearer');
        const body = await res.text();
        assert.equal(JSON.parse(body).code, 'unauthorized');
        assert.ok(!body.includes(TOKEN));
      }
      const ok = await fetch(l.url, { headers: { authorization: `Bearer ${TOKEN}` } });
      assert.equal(ok.status, 200);
    } finally {
      await l.close();
    }
  });

  it('refuses an address beyond loopback without a token, saying why', async () => {
    await assert.rejects(
      startMetricsListener(metrics(), { host: '0.0.0.0', port: 0, token: undefined, logger: silentLogger }),
      (e: unknown) => e instanceof AppError && e.code === 'usage' && e.exitCode === 2 && /HOOKBUCKET_ADMIN_TOKEN/.test(e.message),
    );
    await assert.rejects(
      startMetricsListener(metrics(), { host: '0.0.0.0', port: 0, token: '', logger: silentLogger }),
      /HOOKBUCKET_ADMIN_TOKEN/,
    );
  });

  it('says port_in_use when the port is taken', async () => {
    const taken = createServer();
    await new Promise<void>((r) => taken.listen(0, '127.0.0.1', r));
    const port = (taken.address() as AddressInfo).port;
    try {
      await assert.rejects(
        startMetricsListener(metrics(), { host: '127.0.0.1', port, token: undefined, logger: silentLogger }),
        (e: unknown) => e instanceof AppError && e.code === 'port_in_use' && e.message.includes(String(port)),
      );
    } finally {
      await new Promise((r) => taken.close(r));
    }
  });
});

describe('metrics settings', () => {
  it('reads --metrics-bucket-histograms, --metrics-port and --metrics-host from flags and the environment', () => {
    const d = loadConfig({}, {});
    assert.deepEqual([d.metricsBucketHistograms, d.metricsPort, d.metricsHost], [false, null, '127.0.0.1']);
    const e = loadConfig(
      { HOOKBUCKET_METRICS_BUCKET_HISTOGRAMS: 'true', HOOKBUCKET_METRICS_PORT: '9464', HOOKBUCKET_METRICS_HOST: '::1' },
      {},
    );
    assert.deepEqual([e.metricsBucketHistograms, e.metricsPort, e.metricsHost], [true, 9464, '::1']);
    const f = loadConfig({ HOOKBUCKET_METRICS_PORT: '9464' }, {}, { metricsBucketHistograms: true, metricsPort: '0' });
    assert.deepEqual([f.metricsBucketHistograms, f.metricsPort], [true, 0]);
    assert.throws(() => loadConfig({ HOOKBUCKET_METRICS_PORT: '70000' }, {}), /HOOKBUCKET_METRICS_PORT/);
    assert.throws(() => loadConfig({ HOOKBUCKET_METRICS_BUCKET_HISTOGRAMS: 'maybe' }, {}), /HOOKBUCKET_METRICS_BUCKET_HISTOGRAMS/);
  });
});

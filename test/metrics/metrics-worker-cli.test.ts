import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { BIN, runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';
import { parseExposition } from '../helpers/exposition.js';
import { until } from '../helpers/until.js';

// The real CLI binary: `worker --metrics-port 0` binds a free port, logs it, serves /metrics with
// the attempts it made, and stops cleanly on SIGTERM.

describe('hookbucket worker --metrics-port', () => {
  let b: DrainBench;
  let consumer: Consumer;
  before(async () => {
    b = await drainBench();
    consumer = await startConsumer();
    await b.store.createBucket({ name: 'shop', destination: `${consumer.url}/in` });
  });
  after(async () => {
    await consumer.close();
    await b.close();
  });

  it('serves its own /metrics on the port it logs', async () => {
    b.ingest('shop', {});
    const child = spawn(process.execPath, [BIN, '--db', b.db, 'worker', '--metrics-port', '0', '--metrics-bucket-histograms'], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, HOOKBUCKET_ADMIN_TOKEN: '', HOOKBUCKET_LOG_LEVEL: 'info' },
    });
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    try {
      let url: string | undefined;
      await until(() => {
        for (const line of stderr.split('\n')) {
          if (!line.includes('metrics listening')) continue;
          const log = JSON.parse(line) as { url: string; port: number };
          assert.ok(log.port > 0);
          url = log.url;
        }
        return url !== undefined;
      }, 'the metrics listener logged its port');
      assert.match(url!, /^http:\/\/127\.0\.0\.1:\d+\/metrics$/);
      await consumer.waitFor(1);
      // Counted once recorded: ask until the worker has written the attempt.
      let m = parseExposition('');
      await until(async () => {
        const res = await fetch(url!);
        assert.equal(res.status, 200);
        assert.equal(res.headers.get('content-type'), 'text/plain; version=0.0.4; charset=utf-8');
        m = parseExposition(await res.text());
        return m.value('hookbucket_attempts_total', { bucket: 'shop', outcome: 'delivered' }) === 1;
      }, 'the delivered attempt in /metrics');
      assert.equal(m.value('hookbucket_attempt_duration_seconds_count', { bucket: 'shop' }), 1);
      assert.ok(m.value('process_cpu_user_seconds_total')! > 0);
      // The database gauges are serve's, not a standalone worker's.
      assert.equal(m.find('hookbucket_deliveries').length, 0);
      assert.equal((await fetch(url!.replace('/metrics', '/'))).status, 404);
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0, stderr);
  });

  it('refuses a --metrics-host beyond loopback without HOOKBUCKET_ADMIN_TOKEN (exit 2)', async () => {
    const r = await runCli(['--db', b.db, 'worker', '--metrics-host', '0.0.0.0', '--metrics-port', '0'], { HOOKBUCKET_ADMIN_TOKEN: '' });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /error \[usage\]: --metrics-host 0\.0\.0\.0 is not a loopback address: set HOOKBUCKET_ADMIN_TOKEN/);
  });

  it('documents the options in --help', async () => {
    const r = await runCli(['worker', '--help']);
    assert.equal(r.code, 0);
    assert.match(r.text, /--metrics-port <port>/);
    assert.match(r.text, /--metrics-host <host>/);
    assert.match(r.text, /--metrics-bucket-histograms/);
    assert.match(r.text, /hookbucket worker --metrics-port 9464/);
    const serve = await runCli(['serve', '--help']);
    assert.equal(serve.code, 0);
    assert.match(serve.text, /--metrics-bucket-histograms/);
  });

  it('takes HOOKBUCKET_METRICS_PORT from the environment, and refuses a bad one as usage', async () => {
    const r = await runCli(['--db', b.db, 'worker', '--once'], { HOOKBUCKET_METRICS_PORT: 'nine' });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /error \[invalid_option\]: invalid HOOKBUCKET_METRICS_PORT: "nine"/);
  });
});

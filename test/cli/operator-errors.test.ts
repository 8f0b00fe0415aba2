import assert from 'node:assert/strict';
import { createServer as createNetServer, type AddressInfo, type Server as NetServer } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { startServer } from '../../src/main.js';
import { systemClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { tempDir } from '../helpers/temp-dir.js';

/** A port something else holds. */
async function holdPort(): Promise<{ port: number; server: NetServer }> {
  const server = createNetServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, server };
}

/** A real serve in this process on port 0 (worker as asked), for what it records and stores. */
async function serveIn(db: string, worker: boolean) {
  const config = loadConfig({}, {}, { db, port: 0, host: '127.0.0.1', minFreeDisk: '0', logLevel: 'silent', worker, adminPort: 0 });
  return startServer(config, { clock: systemClock, logger: silentLogger });
}

describe('port in use: serve stops before its worker starts (real CLI binary)', () => {
  const t = tempDir();
  let consumer: Consumer;
  let held: { port: number; server: NetServer };
  before(async () => {
    consumer = await startConsumer();
    held = await holdPort();
  });
  after(async () => {
    await consumer.close();
    await new Promise<void>((r) => held.server.close(() => r()));
    t.remove();
  });

  it('exits 1 with port_in_use and what to do; no lease taken, no worker registered, no attempt made', async () => {
    assert.equal((await runCli(['--db', t.db, 'bucket', 'create', 'b', '--destination', consumer.url])).code, 0);
    // One request stored and due, by a serve without a worker.
    const s = await serveIn(t.db, false);
    const res = await fetch(`${s.url}/b/b`, { method: 'POST', body: 'due' });
    assert.equal(res.status, 200);
    await s.close(2000);

    const r = await runCli(
      ['--db', t.db, 'serve', '--host', '127.0.0.1', '--port', String(held.port), '--admin-port', '0', '--min-free-disk', '0'],
      { HOOKBUCKET_ADMIN_TOKEN: '' },
    );
    assert.equal(r.code, 1, r.stderr);
    assert.match(
      r.stderr,
      new RegExp(`^error \\[port_in_use\\]: port ${held.port} is in use; pass --port or stop the other server\\n`, 'm'),
    );
    assert.doesNotMatch(r.stderr, /drain worker/, 'the worker never started');

    assert.equal(consumer.received.length, 0, 'nothing was delivered');
    const list = await runCli(['--db', t.db, 'requests', 'list', 'b', '--json']);
    assert.equal(list.code, 0, list.stderr);
    const requests = list.json<{ requests: Array<{ state: string; attempts: number }> }>().requests;
    assert.equal(requests.length, 1);
    assert.equal(requests[0]!.state, 'pending');
    assert.equal(requests[0]!.attempts, 0);
    const stats = await runCli(['--db', t.db, 'stats', '--json']);
    const processes = stats.json<{ processes: Array<{ roles: string[] }> }>().processes;
    assert.deepEqual(
      processes.filter((p) => p.roles.includes('worker')),
      [],
      'no worker registered (its row, heartbeat and lease come with start)',
    );
  });
});

describe('a misspelled bucket name gets "did you mean" (real CLI binary)', () => {
  const t = tempDir();
  before(async () => {
    for (const name of ['stripe', 'github', 'gitlab']) assert.equal((await runCli(['--db', t.db, 'bucket', 'create', name])).code, 0);
  });
  after(() => t.remove());

  const cases: Array<[string[], string]> = [
    [['bucket', 'show', 'strpe'], 'bucket strpe not found; did you mean stripe?'],
    [['bucket', 'update', 'strpe', '--rate', '1/s'], 'bucket strpe not found; did you mean stripe?'],
    [['bucket', 'pause', 'githb'], 'bucket githb not found; did you mean github?'],
    [['bucket', 'delete', 'gitlb'], 'bucket gitlb not found; did you mean gitlab?'],
    [['requests', 'list', 'stirpe'], 'bucket stirpe not found; did you mean stripe?'],
    [['requests', 'export', 'stirpe'], 'bucket stirpe not found; did you mean stripe?'],
    [['replay', 'strip', '--state', 'failed', '--yes'], 'bucket strip not found; did you mean stripe?'],
    [['stats', 'gitlub'], 'bucket gitlub not found; did you mean one of github, gitlab?'],
    [['health', 'strpe', '--fail-on', 'exhausted > 0'], 'bucket strpe not found; did you mean stripe?'],
    [['bucket', 'show', 'zzzzzz'], 'bucket zzzzzz not found'],
  ];
  for (const [args, message] of cases) {
    it(`${args.join(' ')}: exit 4, ${message}`, async () => {
      const r = await runCli(['--db', t.db, ...args]);
      assert.equal(r.code, 4, r.stderr);
      assert.equal(r.stderr, `error [not_found]: ${message}\n`);
    });
  }
});

describe('the printed bucket URL (real CLI binary)', () => {
  const t = tempDir();
  after(() => t.remove());

  it('is a labelled placeholder with no serve running and no HOOKBUCKET_PUBLIC_URL', async () => {
    const r = await runCli(['--db', t.db, 'bucket', 'create', 'x']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.text, 'created bucket x: send webhooks to http://HOST:8787/b/x (placeholder: set HOOKBUCKET_PUBLIC_URL)\n');
    const show = await runCli(['--db', t.db, 'bucket', 'show', 'x']);
    assert.match(show.text, /^url {15}http:\/\/HOST:8787\/b\/x \(placeholder: set HOOKBUCKET_PUBLIC_URL\)$/m);
  });

  it('is HOOKBUCKET_PUBLIC_URL when set (environment or .env), and a bad one is refused before the bucket is made', async () => {
    const r = await runCli(['--db', t.db, 'bucket', 'create', 'y'], { HOOKBUCKET_PUBLIC_URL: 'https://hooks.example.com/' });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.text, 'created bucket y: send webhooks to https://hooks.example.com/b/y\n');
    const bad = await runCli(['--db', t.db, 'bucket', 'create', 'z'], { HOOKBUCKET_PUBLIC_URL: 'hooks.example.com' });
    assert.equal(bad.code, 2, bad.stderr);
    assert.match(bad.stderr, /^error \[invalid_option\]: invalid HOOKBUCKET_PUBLIC_URL: "hooks\.example\.com"/);
    assert.equal((await runCli(['--db', t.db, 'bucket', 'show', 'z'])).code, 4, 'not created');
  });

  for (const worker of [true, false]) {
    it(`is the address a running serve recorded (${worker ? 'with' : 'without'} its worker)`, async () => {
      const s = await serveIn(t.db, worker);
      try {
        const name = worker ? 'w1' : 'w0';
        const r = await runCli(['--db', t.db, 'bucket', 'create', name]);
        assert.equal(r.code, 0, r.stderr);
        assert.equal(
          r.text,
          `created bucket ${name}: send webhooks to ${s.url}/b/${name} (serve's local address; senders elsewhere: set HOOKBUCKET_PUBLIC_URL)\n`,
        );
        const show = await runCli(['--db', t.db, 'bucket', 'show', name]);
        assert.ok(show.text.includes(`${s.url}/b/${name}`), show.text);
      } finally {
        await s.close(2000);
      }
      // Once it stopped, back to the placeholder.
      const after = await runCli(['--db', t.db, 'bucket', 'show', 'x']);
      assert.match(after.text, /placeholder: set HOOKBUCKET_PUBLIC_URL/);
    });
  }
});

describe('units and rates on the command line (real CLI binary)', () => {
  const t = tempDir();
  after(() => t.remove());

  it('a duration without a unit is exit 2 with the fix; --rate 0/s must be greater than 0', async () => {
    const timeout = await runCli(['--db', t.db, 'bucket', 'create', 'u', '--timeout', '10']);
    assert.equal(timeout.code, 2);
    assert.match(
      timeout.stderr,
      /^error \[usage\]: option '--timeout <duration>' argument '10' is invalid\. 10 has no unit: write 10s or 10ms/,
    );
    const rate = await runCli(['--db', t.db, 'bucket', 'create', 'u', '--rate', '0/s']);
    assert.equal(rate.code, 2);
    assert.match(rate.stderr, /argument '0\/s' is invalid\. a rate must be greater than 0/);
    const lease = await runCli(['--db', t.db, 'worker', '--once', '--lease', '60000']);
    assert.equal(lease.code, 2);
    assert.match(lease.stderr, /60000 has no unit: write 60000s or 60000ms/);
    assert.equal((await runCli(['--db', t.db, 'bucket', 'show', 'u'])).code, 4, 'nothing created');
  });

  it('an environment duration without a unit still works, as ms, with a warning naming the variable and the fix', async () => {
    const r = await runCli(['--db', t.db, 'worker', '--once', '--json'], { HOOKBUCKET_LEASE: '60000' });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(
      r.stderr,
      'warning: HOOKBUCKET_LEASE=60000 has no unit: read as 60000 ms (1m); write 60000ms or 1m. A future release will refuse a number without a unit\n',
    );
  });

  it('--help says how to write durations and sizes', async () => {
    for (const cmd of [['serve'], ['bucket', 'create'], ['worker'], ['replay']]) {
      const r = await runCli([...cmd, '--help']);
      assert.match(r.text, /Durations take a unit: 500ms, 10s, 5m, 2h, 7d/, cmd.join(' '));
    }
  });
});

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { BIN, runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/** The real binary in a real pseudo-terminal (util-linux `script`), `answer` typed at its prompt. */
function runInPty(args: string[], answer: string): Promise<{ code: number; output: string }> {
  const quoted = [process.execPath, BIN, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  return new Promise((resolve, reject) => {
    const child = spawn('script', ['-qfec', quoted, '/dev/null'], { env: { ...process.env, NO_COLOR: '1', HOOKBUCKET_API: '' } });
    let output = '';
    child.stdout.on('data', (d: Buffer) => {
      output += d.toString('utf8');
      if (output.includes('[y/N]') && !child.stdin.writableEnded) child.stdin.end(`${answer}\n`);
    });
    child.on('error', reject);
    child.on('close', (code) => resolve({ code: code ?? 1, output }));
  });
}

const hasScript = await new Promise<boolean>((resolve) => {
  const c = spawn('script', ['--version']);
  c.on('error', () => resolve(false));
  c.on('close', (code) => resolve(code === 0));
});

describe('a timeout the lease does not cover (issue 16.3) and bucket delete confirmations (16.5), through the real binary', () => {
  let s: TestServer;
  const env = { HOOKBUCKET_API: '' };
  const cli = (args: string[], extra: Record<string, string> = {}) => runCli(['--db', s.db, ...args], { ...env, ...extra });
  const api = (args: string[]) => runCli(['--api', s.admin!.url, ...args], env);
  before(async () => {
    // No worker: the lease that applies is the configured default (60s unless HOOKBUCKET_LEASE).
    s = await startTestServer();
  });
  after(async () => {
    await s.stop();
  });

  it('create and update refuse a timeout not shorter than the lease, naming it and how to raise it (exit 2)', async () => {
    const refused = await cli(['bucket', 'create', 'slow', '--timeout', '2m']);
    assert.equal(refused.code, 2, refused.stderr);
    assert.match(
      refused.stderr,
      /^error \[timeout_exceeds_lease\]: --timeout 2m must be shorter than the lease 1m \(HOOKBUCKET_LEASE or its default; no worker is running\)/,
    );
    assert.match(refused.stderr, /raise the lease \(serve\/worker --lease, HOOKBUCKET_LEASE\)/);
    assert.equal(await s.store.getBucket('slow'), undefined, 'nothing was created');

    assert.equal((await cli(['bucket', 'create', 'fine', '--timeout', '30s'])).code, 0);
    const equal = await cli(['bucket', 'update', 'fine', '--timeout', '1m']);
    assert.equal(equal.code, 2, 'equal to the lease is refused too');
    assert.match(equal.stderr, /^error \[timeout_exceeds_lease\]: --timeout 1m must be shorter than the lease 1m/);
    assert.equal((await s.store.getBucket('fine'))?.drain.timeoutMs, 30_000, 'unchanged');
    // An update that leaves the timeout alone is not refused.
    assert.equal((await cli(['bucket', 'update', 'fine', '--rate', '5/s'])).code, 0);
    // The configured default is HOOKBUCKET_LEASE: a longer one lets the timeout through.
    const longer = await cli(['bucket', 'create', 'slow', '--timeout', '2m'], { HOOKBUCKET_LEASE: '5m' });
    assert.equal(longer.code, 0, longer.stderr);
  });

  it('bucket show, stats and health report a stuck bucket (text and JSON)', async () => {
    const show = await cli(['bucket', 'show', 'slow']);
    assert.equal(show.code, 0, show.stderr);
    assert.match(show.text, /^stuck +yes: bucket slow: attempt timeout 2m is not shorter than the lease 1m .*its deliveries wait/m);
    assert.match((await cli(['bucket', 'show', 'fine'])).text, /^stuck +no$/m);
    const json = (await cli(['bucket', 'show', 'slow', '--json'])).json();
    assert.deepEqual(json.stuck, { bucket: 'slow', timeout_ms: 120_000, lease_ms: 60_000, lease_source: 'default' });
    assert.equal((await cli(['bucket', 'show', 'fine', '--json'])).json().stuck, null);

    const stats = (await cli(['stats', '--json'])).json();
    assert.equal(stats.stuck_buckets, 1);
    assert.deepEqual(stats.stuck, [{ bucket: 'slow', timeout_ms: 120_000, lease_ms: 60_000, lease_source: 'default' }]);
    assert.deepEqual((await cli(['stats', 'fine', '--json'])).json().stuck, []);
    assert.match((await cli(['stats'])).text, /^stuck: bucket slow: attempt timeout 2m/m);

    // health: unhealthy whatever the expression says while a bucket in scope is stuck.
    const health = await cli(['health', '--fail-on', 'exhausted > 0']);
    assert.equal(health.code, 3, health.text + health.stderr);
    assert.match(health.text, /^unhealthy: exhausted > 0 does not hold, but a bucket is stuck/);
    assert.match(health.text, /stuck_buckets > 0 +\(stuck_buckets = 1\)/);
    const hj = await cli(['health', '--fail-on', 'exhausted > 0', '--json']);
    assert.equal(hj.code, 3);
    assert.equal(hj.json().healthy, false);
    assert.deepEqual(
      hj.json().tripped.map((t: { condition: string }) => t.condition),
      ['stuck_buckets > 0'],
    );
    assert.equal((await cli(['health', 'fine', '--fail-on', 'exhausted > 0'])).code, 0, 'another bucket alone is healthy');
    // Through the API (the server's own view).
    assert.equal((await api(['stats', '--json'])).json().stuck_buckets, 1);
    assert.equal((await api(['bucket', 'show', 'slow', '--json'])).json().stuck.bucket, 'slow');
    assert.equal((await api(['health', '--fail-on', 'exhausted > 0'])).code, 3);
  });

  it('the admin API and the CLI through --api apply the same rule (400 timeout_exceeds_lease, exit 2)', async () => {
    const res = await fetch(`${s.admin!.url}/api/buckets/fine`, {
      method: 'PATCH',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ timeout: '10m' }),
    });
    assert.equal(res.status, 400);
    const body = (await res.json()) as { code: string; error: string };
    assert.equal(body.code, 'timeout_exceeds_lease');
    assert.match(body.error, /--timeout 10m must be shorter than the lease 1m/);
    const created = await fetch(`${s.admin!.url}/api/buckets`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ name: 'apislow', timeout: '1m' }),
    });
    assert.equal(created.status, 400);
    const viaApi = await api(['bucket', 'update', 'fine', '--timeout', '10m']);
    assert.equal(viaApi.code, 2);
    assert.match(viaApi.stderr, /^error \[timeout_exceeds_lease\]/);
  });

  it('a running worker: its lease applies, not the default', async () => {
    const w = await startTestServer({ db: s.db, worker: true, leaseMs: '5m' });
    try {
      const ok = await cli(['bucket', 'update', 'fine', '--timeout', '2m']);
      assert.equal(ok.code, 0, ok.stderr);
      const json = (await cli(['bucket', 'show', 'slow', '--json'])).json();
      assert.equal(json.stuck, null, 'the worker lease 5m covers 2m');
      const over = await cli(['bucket', 'update', 'fine', '--timeout', '6m']);
      assert.equal(over.code, 2);
      assert.match(over.stderr, /must be shorter than the running worker's lease 5m/);
    } finally {
      await w.stop();
    }
    assert.equal((await cli(['bucket', 'update', 'fine', '--timeout', '30s'])).code, 0);
  });

  it('bucket delete above 100 requests: --yes off a terminal (also with --json and --api), the count asked at a terminal', async () => {
    assert.equal((await cli(['bucket', 'create', 'many'])).code, 0);
    assert.equal((await cli(['bucket', 'create', 'few'])).code, 0);
    for (let i = 0; i < 101; i++) assert.equal((await fetch(`${s.url}/b/many`, { method: 'POST', body: String(i) })).status, 200);
    for (let i = 0; i < 3; i++) assert.equal((await fetch(`${s.url}/b/few`, { method: 'POST', body: String(i) })).status, 200);

    for (const [what, run] of [
      ['--db', () => cli(['bucket', 'delete', 'many'])],
      ['--db --json', () => cli(['bucket', 'delete', 'many', '--json'])],
      ['--db --force', () => cli(['bucket', 'delete', 'many', '--force'])],
      ['--api', () => api(['bucket', 'delete', 'many'])],
    ] as const) {
      const r = await run();
      assert.equal(r.code, 2, `${what}: ${r.stderr}`);
      assert.match(r.stderr, /^error \[confirmation_required\]: bucket many holds 101 requests \(more than 100\); add --yes/, what);
    }
    assert.equal((await s.store.bucketCounts('many')).requests, 101, 'nothing deleted');
    // 100 or fewer: no question.
    const few = await cli(['bucket', 'delete', 'few', '--json']);
    assert.equal(few.code, 0, few.stderr);
    assert.deepEqual(few.json(), { name: 'few', deleted: true, requests: 3 });

    if (hasScript) {
      const no = await runInPty(['--db', s.db, 'bucket', 'delete', 'many'], 'n');
      assert.equal(no.code, 1, no.output);
      assert.match(no.output, /delete bucket many and its 101 stored requests\? \[y\/N\]/);
      assert.match(no.output, /not deleted/);
      assert.equal((await s.store.bucketCounts('many')).requests, 101);
      const yes = await runInPty(['--db', s.db, 'bucket', 'delete', 'many'], 'y');
      assert.equal(yes.code, 0, yes.output);
      assert.match(yes.output, /deleted bucket many and 101 stored request\(s\)/);
    } else {
      const r = await api(['bucket', 'delete', 'many', '--yes', '--json']);
      assert.equal(r.code, 0, r.stderr);
    }
    assert.equal(await s.store.getBucket('many'), undefined);
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { runCli, type CliResult } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * The CLI against a remote server (issue 14 point 5): each command run with --db on the server's
 * database file and with --api on its admin listener, the same data, and the outputs compared
 * (stdout, --json, exit codes). Only what differs by nature is normalised: the times a command
 * reads its clock at (stats windows), and ids the server makes (replays).
 */
const TOKEN = 'remote-cli-test-token-0123456789abcdef0123';

describe('the CLI through --api against a real serve', () => {
  let srv: TestServer;
  let api: string[];
  let db: string[];
  const env = { HOOKBUCKET_ADMIN_TOKEN: TOKEN, HOOKBUCKET_API: '' };
  const ids: Record<string, string> = {};

  const cli = (args: string[]) => runCli(args, env);
  const both = async (args: string[]): Promise<[CliResult, CliResult]> => [await cli([...db, ...args]), await cli([...api, ...args])];
  function same(l: CliResult, r: CliResult, normalise: (s: string) => string = (s) => s) {
    assert.equal(r.code, l.code, `exit codes differ; local stderr: ${l.stderr}; remote stderr: ${r.stderr}`);
    assert.equal(normalise(r.text), normalise(l.text));
    if (l.code !== 0) assert.equal(r.stderr.replace(/^error \[(\w+)\].*/s, '$1'), l.stderr.replace(/^error \[(\w+)\].*/s, '$1'));
  }
  async function ingest(
    bucket: string,
    path: string,
    body: Buffer | string,
    headers: Record<string, string> = { 'content-type': 'application/json' },
  ) {
    const res = await request(`${srv.url}/b/${bucket}${path}`, { method: 'POST', headers, body });
    const text = await res.body.text();
    assert.equal(res.statusCode, 200, text);
    return (JSON.parse(text) as { id: string }).id;
  }

  before(async () => {
    srv = await startTestServer({ adminToken: TOKEN });
    api = ['--api', srv.admin!.url];
    db = ['--db', srv.db];
    for (const args of [
      [
        'bucket',
        'create',
        'stripe',
        '--destination',
        'http://127.0.0.1:9/hooks?token=secret',
        '--rate',
        '20/s',
        '--burst',
        '5',
        '--forward-header',
        'Authorization: Bearer xyz',
      ],
      ['bucket', 'create', 'github', '--give-up', '48h', '--retain', '7d', '--retain-state', 'delivered,none'],
      ['bucket', 'create', 'empty'],
    ]) {
      const r = await cli([...db, ...args]);
      assert.equal(r.code, 0, r.stderr);
    }
    ids.json = await ingest('stripe', '/events/charge?x=1', '{"type":"charge.succeeded","amount":100}');
    ids.binary = await ingest('stripe', '/bin', Buffer.from([0, 1, 2, 0xff, 0xfe, 0x1b, 0x5b, 0x32, 0x4a, 10, 13]), {
      'content-type': 'application/octet-stream',
    });
    ids.bom = await ingest('github', '/', Buffer.from('\ufeff{"bom":true}'), {
      'content-type': 'application/json',
      'x-github-event': 'push',
    });
    ids.plain = await ingest('github', '/issues', 'hello', { 'content-type': 'text/plain', 'x-github-event': 'issues' });
  });
  after(async () => {
    await srv?.stop();
  });

  it('bucket list and show: same text and JSON, redacted the same, not found the same', async () => {
    for (const args of [
      ['bucket', 'list'],
      ['bucket', 'list', '--json'],
      ['bucket', 'list', '--reveal'],
      ['bucket', 'show', 'stripe'],
      ['bucket', 'show', 'stripe', '--json'],
      ['bucket', 'show', 'stripe', '--reveal'],
      ['bucket', 'show', 'github'],
      ['bucket', 'show', 'nope'],
      ['bucket', 'show', 'nope', '--json'],
    ]) {
      const [l, r] = await both(args);
      same(l, r);
    }
    const [, r] = await both(['bucket', 'show', 'stripe']);
    assert.match(r.text, /\[redacted\]/);
    assert.doesNotMatch(r.text, /secret/);
  });

  it('bucket create, update, pause, resume and delete through the API leave what the same commands leave locally', async () => {
    const create = [
      '--destination',
      'http://127.0.0.1:9/x',
      '--rate',
      '5/s',
      '--burst',
      '2',
      '--concurrency',
      '3',
      '--timeout',
      '5s',
      '--base',
      '10s',
      '--multiplier',
      '2',
      '--cap',
      '1h',
      '--max-attempts',
      '7',
      '--jitter',
      'full',
      '--retry-on',
      '5xx,network',
      '--retry-budget',
      '0.2',
      '--retry-floor',
      '2',
      '--no-forward-path',
      '--forward-header',
      'X-A: 1',
      '--max-body',
      '1MiB',
      '--ack-status',
      '202',
      '--ack-body',
      'ok',
      '--ack-content-type',
      'text/plain',
      '--retain',
      '30d',
      '--json',
    ];
    const updates = [
      [
        '--no-destination',
        '--no-rate',
        '--give-up',
        '6h',
        '--no-ack-body',
        '--no-retain',
        '--forward-header',
        'X-B: 2',
        '--retry-on',
        'default',
      ],
      [
        '--destination',
        'http://127.0.0.1:9/y',
        '--rate',
        '10/m',
        '--cap',
        'none',
        '--max-attempts',
        '3',
        '--no-forward-header',
        '--forward-raw-path',
        '--forward-path',
      ],
    ];
    const strip = (s: string, name: string) => {
      const j = JSON.parse(s) as Record<string, unknown>;
      assert.equal(j.name, name);
      for (const k of ['name', 'created_at', 'updated_at', 'paused_at']) delete j[k];
      return j;
    };
    const l = await cli([...db, 'bucket', 'create', 'made-local', ...create]);
    const r = await cli([...api, 'bucket', 'create', 'made-remote', ...create]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(strip(r.text, 'made-remote'), strip(l.text, 'made-local'));
    for (const u of updates) {
      const lu = await cli([...db, 'bucket', 'update', 'made-local', ...u, '--json']);
      const ru = await cli([...api, 'bucket', 'update', 'made-remote', ...u, '--json']);
      assert.equal(ru.code, lu.code, ru.stderr);
      assert.deepEqual(strip(ru.text, 'made-remote'), strip(lu.text, 'made-local'));
    }
    // The human lines, name swapped.
    const swap = (s: string) =>
      s
        .replaceAll('made-local', 'NAME')
        .replaceAll('made-remote', 'NAME')
        .replace(/after \d+(ms|s)/, 'after T');
    for (const args of [
      ['bucket', 'pause'],
      ['bucket', 'pause'],
      ['bucket', 'resume'],
      ['bucket', 'resume'],
      ['bucket', 'update'],
    ]) {
      const lo = await cli([...db, ...args, 'made-local']);
      const ro = await cli([...api, ...args, 'made-remote']);
      assert.equal(ro.code, lo.code, ro.stderr);
      assert.equal(swap(ro.text).replace(/since \S+\)/, 'since T)'), swap(lo.text).replace(/since \S+\)/, 'since T)'));
    }
    // Same refusals: the name taken, an invalid combination, a missing bucket.
    for (const args of [
      ['bucket', 'create', 'stripe'],
      ['bucket', 'create', 'x1', '--retain-state', 'none'],
      ['bucket', 'update', 'nope', '--rate', '1/s'],
      ['bucket', 'pause', 'nope'],
      ['bucket', 'delete', 'nope'],
    ]) {
      const [lo, ro] = await both(args);
      same(lo, ro);
    }
    // Delete: refused while deliveries wait (stripe's), forced, and an empty one.
    const [ld, rd] = await both(['bucket', 'delete', 'stripe']);
    same(ld, rd);
    assert.notEqual(rd.code, 0);
    const lo = await cli([...db, 'bucket', 'delete', 'made-local', '--json']);
    const ro = await cli([...api, 'bucket', 'delete', 'made-remote', '--json']);
    assert.equal(ro.code, 0, ro.stderr);
    assert.equal(ro.text.replace('made-remote', 'N'), lo.text.replace('made-local', 'N'));
  });

  it('requests list and show: the same rows, the same request, --raw byte-exact', async () => {
    for (const args of [
      ['requests', 'list', 'stripe'],
      ['requests', 'list', 'stripe', '--json'],
      ['requests', 'list', 'github', '--header', 'X-GitHub-Event=push', '--json'],
      ['requests', 'list', 'github', '--since', '1h', '--method', 'POST', '--state', 'none,pending', '--path', '/**'],
      ['requests', 'list', 'stripe', '--limit', '1'],
      ['requests', 'list', 'stripe', '--search', 'charge', '--status', '5xx'],
      ['requests', 'list', 'stripe', '--reveal'],
      ['requests', 'list', 'nope'],
      ['requests', 'show', ids.json!],
      ['requests', 'show', ids.json!, '--json'],
      ['requests', 'show', ids.json!, '--reveal'],
      ['requests', 'show', ids.binary!],
      ['requests', 'show', ids.binary!, '--json'],
      ['requests', 'show', ids.bom!, '--json'],
      ['requests', 'show', '019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00'],
      ['requests', 'show', 'not-an-id'],
    ]) {
      const [l, r] = await both(args);
      same(l, r);
    }
    for (const id of [ids.binary!, ids.bom!, ids.plain!]) {
      const [l, r] = await both(['requests', 'show', id, '--raw']);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(Buffer.compare(r.stdout, l.stdout) === 0, `raw bytes of ${id} differ`);
    }
  });

  it('stats and health: the same figures and the same exit codes', async () => {
    // The window ends at each command's own now: the times in the answer are normalised.
    // The age of the oldest waiting request grows between the two runs, as do times of day.
    const times = (s: string) =>
      s
        .replace(/\d{4}-\d\d-\d\dT[\d:.]+Z/g, 'T')
        .replace(/\d+(ms|s|m) ago */g, 'N ago ')
        .replace(/oldest_pending_age_s +\d+ +\S+/g, 'oldest_pending_age_s N')
        .replace(/oldest_pending_age_s = \d+/g, 'oldest_pending_age_s = N');
    const noTimes = (s: string) => {
      const j = JSON.parse(s) as Record<string, unknown>;
      for (const k of ['since', 'until', 'oldest_pending_age_s']) delete j[k];
      for (const b of (j.buckets as Array<Record<string, unknown>> | undefined) ?? []) delete b.oldest_pending_age_s;
      for (const p of (j.processes as Array<Record<string, unknown>> | undefined) ?? []) delete p.heartbeat_at;
      return JSON.stringify(j);
    };
    for (const args of [['stats'], ['stats', 'github'], ['stats', 'github', '--window', '15m'], ['stats', 'nope']]) {
      const [l, r] = await both(args);
      same(l, r, times);
    }
    for (const args of [
      ['stats', '--json'],
      ['stats', 'stripe', '--json'],
    ]) {
      const [l, r] = await both(args);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(noTimes(r.text), noTimes(l.text));
    }
    for (const args of [
      ['health', '--fail-on', 'received > 100'],
      ['health', 'stripe', '--fail-on', 'received > 1 || pending > 0'],
      ['health', 'stripe', '--fail-on', 'pending > 0', '--json'],
      ['health', 'nope', '--fail-on', 'pending > 0'],
      ['health', '--fail-on', 'pending >'],
      ['health', '--fail-on', 'workers_alive < 1'],
    ]) {
      const [l, r] = await both(args);
      same(l, r, (s) => (s.startsWith('{') ? noTimes(s) : times(s)));
    }
    const [, tripped] = await both(['health', 'stripe', '--fail-on', 'pending > 0']);
    assert.equal(tripped.code, 3);
  });

  it('replay, replays list and wait, requests export: same selections, same files', async () => {
    for (const format of ['ndjson', 'har', 'curl']) {
      const [l, r] = await both(['requests', 'export', 'github', '--format', format, '--base-url', 'http://127.0.0.1:9/in']);
      assert.equal(r.code, 0, r.stderr);
      assert.ok(Buffer.compare(r.stdout, l.stdout) === 0, `${format} export differs`);
    }
    for (const args of [
      ['requests', 'export', 'github', '--id', ids.plain!],
      ['requests', 'export', 'nope'],
    ]) {
      const [l, r] = await both(args);
      same(l, r);
    }
    for (const args of [
      ['replay', 'stripe', '--all', '--dry-run'],
      ['replay', 'stripe', '--all', '--dry-run', '--json'],
      ['replay', 'stripe', '--state', 'pending', '--to', 'http://127.0.0.1:9/z', '--dry-run', '--json'],
      ['replay', 'github', '--all', '--dry-run'],
      ['replay', 'nope', '--all', '--dry-run'],
      ['replay', 'stripe'],
      ['replay', 'stripe', '--id', '019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00', '--dry-run'],
    ]) {
      const [l, r] = await both(args);
      same(l, r);
    }
    // Real replays, one from each side; the server makes the remote one's id.
    const replayId = /^[0-9a-f-]{36}$/;
    const lr = await cli([
      ...db,
      'replay',
      'stripe',
      '--id',
      ids.json!,
      '--to',
      'http://127.0.0.1:9/z',
      '--rate',
      '2/s',
      '--yes',
      '--json',
    ]);
    const rr = await cli([
      ...api,
      'replay',
      'stripe',
      '--id',
      ids.json!,
      '--to',
      'http://127.0.0.1:9/z',
      '--rate',
      '2/s',
      '--yes',
      '--json',
    ]);
    assert.equal(rr.code, 0, rr.stderr);
    const lj = lr.json<Record<string, unknown>>();
    const rj = rr.json<Record<string, unknown>>();
    assert.match(String(rj.id), replayId);
    for (const j of [lj, rj]) for (const k of ['id', 'created_at']) delete j[k];
    assert.deepEqual(rj, lj);
    const norm = (s: string) => s.replace(/[0-9a-f]{8}-[0-9a-f-]{27}/g, 'ID').replace(/\d{4}-\d\d-\d\dT[\d:.]+Z/g, 'T');
    for (const args of [
      ['replays', 'list'],
      ['replays', 'list', '--json'],
      ['replays', 'list', '--bucket', 'github'],
    ]) {
      const [l, r] = await both(args);
      same(l, r, norm);
    }
    const w = await cli([...api, 'replays', 'wait', String(JSON.parse(rr.text).id), '--timeout', '300ms', '--json']);
    assert.equal(w.code, 3, w.stderr);
    assert.equal(w.json<{ timed_out: boolean }>().timed_out, true);
    const [lw, rw] = await both(['replays', 'wait', '019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00']);
    same(lw, rw);
  });

  it('refusals: --api with --db, commands that need the database, no token, a wrong token, nothing listening', async () => {
    const r1 = await cli([...api, ...db, 'bucket', 'list']);
    assert.equal(r1.code, 2);
    assert.match(r1.stderr, /error \[usage\]: --api and --db cannot be combined/);
    for (const args of [
      ['serve'],
      ['worker'],
      ['prune', '--older-than', '1d'],
      ['requests', 'import', 'stripe', '/dev/null'],
      ['migrate-data', '--from', 'a.db', '--to', 'x.db'],
    ]) {
      const r = await cli([...api, ...args]);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /needs the database itself/);
    }
    // HOOKBUCKET_API from the environment does what --api does.
    const viaEnv = await runCli(['bucket', 'show', 'github', '--json'], { HOOKBUCKET_ADMIN_TOKEN: TOKEN, HOOKBUCKET_API: srv.admin!.url });
    assert.equal(viaEnv.code, 0, viaEnv.stderr);
    assert.equal(viaEnv.json<{ name: string }>().name, 'github');
    const serveEnv = await runCli(['serve'], { HOOKBUCKET_API: srv.admin!.url });
    assert.equal(serveEnv.code, 2);
    assert.match(serveEnv.stderr, /unset HOOKBUCKET_API/);

    const none = await runCli([...api, 'bucket', 'list'], { HOOKBUCKET_ADMIN_TOKEN: '', HOOKBUCKET_API: '' });
    assert.equal(none.code, 1);
    assert.match(none.stderr, /^error \[unauthorized\]: .*401.*HOOKBUCKET_ADMIN_TOKEN is not set/);
    const wrong = await runCli([...api, 'bucket', 'list'], { HOOKBUCKET_ADMIN_TOKEN: 'x'.repeat(40), HOOKBUCKET_API: '' });
    assert.equal(wrong.code, 1);
    assert.match(wrong.stderr, /^error \[unauthorized\]: .*was refused/);
    assert.ok(!wrong.stderr.includes('x'.repeat(40)), 'the token is never printed');

    const closed = await cli(['--api', 'http://127.0.0.1:1', 'bucket', 'list']);
    assert.equal(closed.code, 1);
    assert.match(closed.stderr, /^error \[api_unreachable\]: cannot reach the API at http:\/\/127\.0\.0\.1:1/);
    const bad = await cli(['--api', 'ftp://x', 'bucket', 'list']);
    assert.equal(bad.code, 2);
    // The ingest port is not the API: a clear error, not a crash.
    const ingestPort = await cli(['--api', srv.url, 'bucket', 'list']);
    assert.equal(ingestPort.code, 1);
    assert.match(ingestPort.stderr, /^error \[api_error\]: .*not a hookbucket admin listener/);
    const ingestShow = await cli(['--api', srv.url, 'bucket', 'show', 'stripe']);
    assert.equal(ingestShow.code, 1, 'not "bucket not found" (exit 4)');
    assert.match(ingestShow.stderr, /^error \[api_error\]: .*not a hookbucket admin listener/);
    // schedule needs no server.
    const sched = await cli([...api, 'schedule', '--max-attempts', '3']);
    assert.equal(sched.code, 0, sched.stderr);
  });
});

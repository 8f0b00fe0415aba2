import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { startServer, type RunningServer } from '../../src/main.js';
import { systemClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { BIN, runCli, runInProcess } from '../helpers/cli.js';
import { startConsumer, type Consumer, type Script } from '../helpers/consumer.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases, type TestDatabase } from '../helpers/pg-database.js';
import { tempDir } from '../helpers/temp-dir.js';
import { until } from '../helpers/until.js';

// The CLI against PostgreSQL says what it says against SQLite: one sequence of commands (every
// command, human and --json) runs on a fresh SQLite file and on a fresh PostgreSQL database, each
// with a real `serve` (and its worker) on that database and a real consumer, and the outputs are
// compared step by step once ids, times and durations are normalised.

const pgServer = pgTestServer();

interface Step {
  name: string;
  code: number;
  out: string;
  err: string;
}

/** Every UUID becomes <id N> in order of first appearance; times and timings become placeholders. */
function normaliser() {
  const ids = new Map<string, string>();
  return (text: string) =>
    text
      .replace(/[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}/g, (id) => {
        if (!ids.has(id)) ids.set(id, `<id ${ids.size + 1}>`);
        return ids.get(id)!;
      })
      .replace(/\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z/g, '<time>')
      // The consumer's Date header, kept in an attempt's response headers.
      .replace(/[A-Z][a-z]{2}, \d\d [A-Z][a-z]{2} \d{4} \d\d:\d\d:\d\d GMT/g, '<date>')
      .replace(/127\.0\.0\.1:\d+/g, '127.0.0.1:<port>')
      // A worker lease holder: pid, host, and `host:pid:random`.
      .replace(/\bpid \d+ on (\S+) \(\S+\)/g, 'pid <pid> on $1 (<holder>)')
      // A registered process (stats): `host:pid:random`.
      .replace(/\b[\w.-]+:\d+:[0-9a-f]{8}\b/g, '<process>')
      .replace(/\/tmp\/[^\s"']+/g, '<tmp>');
}

/** JSON whose timing fields (durations, latencies, ages, rates over a window) become placeholders. */
const TIMING =
  /^(reclaimed_bytes|duration_ms|gap_ms|latency_p\d+_ms|oldest_.*|.*_age_ms|elapsed_ms|eta_ms|rate_per_s|.*_per_s|.*_per_min|at|received_at|settled_at|started_at|next_attempt_at|created_at|finished_at|last_settled_at|deleting_at|heartbeat_at|stopped_at)$/;
function maskTimings(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(maskTimings);
  if (value && typeof value === 'object') {
    return Object.fromEntries(Object.entries(value).map(([k, v]) => [k, TIMING.test(k) && v !== null ? '<t>' : maskTimings(v)]));
  }
  return value;
}

interface Scenario {
  steps: Step[];
  /** Checks made inside the run that are not output comparisons (e.g. raw bytes). */
  rawBody: Buffer;
  posted: Buffer;
  /** prune's reclaimed_bytes. */
  reclaimed: number;
}

/** Runs the whole sequence against one database and returns each step's normalised output. */
async function runScenario(db: string, consumer: Consumer): Promise<Scenario> {
  const dir = tempDir('hookbucket-clipg-');
  const norm = normaliser();
  const steps: Step[] = [];
  const g = ['--db', db, '--spool-dir', join(dir.dir, 'spool')];
  let server: RunningServer | undefined;
  const run = async (name: string, args: string[], opts: { json?: boolean; expect?: number } = {}) => {
    const r = await runInProcess([...g, ...args]);
    assert.equal(r.code, opts.expect ?? 0, `${name}: ${r.stderr}`);
    const out = opts.json ? JSON.stringify(maskTimings(JSON.parse(r.stdout)), null, 2) : r.stdout;
    steps.push({ name, code: r.code, out: norm(out), err: norm(r.stderr) });
    return r;
  };
  /** Human output: times already masked by the normaliser; durations "12 ms" and ages vary. */
  const human = async (name: string, args: string[], expect = 0) => {
    const r = await runInProcess([...g, ...args]);
    assert.equal(r.code, expect, `${name}: ${r.stderr}`);
    const out = r.stdout
      .replace(/(latency_p\d+_ms) +\d+/g, '$1 <n>')
      .replace(/gave back .* of disk/, 'gave back <size> of disk')
      .replace(/\b\d+(\.\d+)? ?(ms|s|m|h)\b/g, '<dur>')
      .replace(/\b\d+(\.\d+)?\/(s|min|m)\b/g, '<rate>')
      // A table column of ages ("LAST_BEAT 85ms ago", "1s ago") pads to its widest: alignment varies.
      .replace(/<dur> ago +/g, '<dur> ago ');
    steps.push({ name, code: r.code, out: norm(out), err: norm(r.stderr) });
    return r;
  };
  const post = async (path: string, init: { method?: string; body?: Buffer | string; headers?: Record<string, string> }) => {
    const res = await fetch(`${server!.url}/b/shop${path}`, {
      method: init.method ?? 'POST',
      ...(init.body !== undefined ? { body: init.body } : {}),
      headers: init.headers ?? {},
    });
    assert.equal(res.status, 200);
    return ((await res.json()) as { id: string }).id;
  };
  const states = async (bucket: string) =>
    JSON.parse((await runInProcess([...g, 'bucket', 'show', bucket, '--json'])).stdout).states as Record<string, number>;

  try {
    const config = loadConfig(
      {},
      {},
      {
        db,
        port: 0,
        host: '127.0.0.1',
        minFreeDisk: '0',
        logLevel: 'silent',
        worker: true,
        adminPort: 0,
        spoolDir: join(dir.dir, 'spool'),
      },
    );
    server = await startServer(config, { clock: systemClock, logger: silentLogger });

    // Buckets.
    await run(
      'bucket create shop',
      ['bucket', 'create', 'shop', '--destination', `${consumer.url}/hooks`, '--max-attempts', '1', '--jitter', 'none', '--json'],
      { json: true },
    );
    await human('bucket create other', ['bucket', 'create', 'other']);
    await run('bucket update', ['bucket', 'update', 'shop', '--timeout', '5s', '--rate', '100/s', '--burst', '10', '--json'], {
      json: true,
    });
    await human('bucket show', ['bucket', 'show', 'shop']);
    await run('bucket show --json', ['bucket', 'show', 'shop', '--json'], { json: true });
    await human('bucket list', ['bucket', 'list']);
    await run('bucket list --json', ['bucket', 'list', '--json'], { json: true });

    // The fixture, over HTTP to `serve`: batch A is delivered (or exhausted on a 500), batch B held.
    const binary = Buffer.concat([Buffer.from([0xff, 0xfe, 0x00]), Buffer.from('xx needle xx'), Buffer.from([0xc3, 0x28])]);
    await post('/orders/1', { body: '{"type":"order.created","n":1}', headers: { 'content-type': 'application/json', 'x-kind': 'order' } });
    const failId = await post('/orders/2/fail', {
      body: '{"type":"order.failed","n":2}',
      headers: { 'content-type': 'application/json', 'x-kind': 'order' },
    });
    const binaryId = await post('/customers/7', { method: 'PUT', body: binary, headers: { 'content-type': 'application/octet-stream' } });
    await post('/ping?token=secret&x=1', { method: 'GET' });
    await post('', { body: 'a=1&password=hunter2', headers: { 'content-type': 'application/x-www-form-urlencoded', 'X-Kind': 'form' } });
    await until(async () => (await states('shop')).delivered === 4 && (await states('shop')).exhausted === 1, 'batch A settled');
    await new Promise((r) => setTimeout(r, 5));
    const boundary = new Date(Date.now()).toISOString();
    await new Promise((r) => setTimeout(r, 5));
    await human('bucket pause', ['bucket', 'pause', 'shop']);
    await post('/orders/3', {
      body: '{"type":"order.created","n":3,"needle":true}',
      headers: { 'content-type': 'application/json', 'x-kind': 'order' },
    });
    await post('/refunds/1', { method: 'DELETE' });
    await post('/orders/4', { body: '{"type":"order.created","n":4}', headers: { 'content-type': 'application/json', 'x-kind': 'order' } });

    // Listing with every filter, and pagination.
    await human('requests list', ['requests', 'list', 'shop']);
    await run('requests list --json', ['requests', 'list', 'shop', '--json'], { json: true });
    await run('--state held', ['requests', 'list', 'shop', '--state', 'held', '--json'], { json: true });
    await run('--state delivered,exhausted', ['requests', 'list', 'shop', '--state', 'delivered,exhausted', '--json'], { json: true });
    await run('--status 5xx', ['requests', 'list', 'shop', '--status', '5xx', '--json'], { json: true });
    await run('--status 200', ['requests', 'list', 'shop', '--status', '200', '--json'], { json: true });
    await run('--method', ['requests', 'list', 'shop', '--method', 'PUT,DELETE', '--json'], { json: true });
    await run('--path', ['requests', 'list', 'shop', '--path', '/orders/**', '--json'], { json: true });
    await run('--path one segment', ['requests', 'list', 'shop', '--path', '/orders/?', '--json'], { json: true });
    await run('--header', ['requests', 'list', 'shop', '--header', 'X-KIND=order', '--json'], { json: true });
    await run('--header form', ['requests', 'list', 'shop', '--header', 'x-kind=form', '--json'], { json: true });
    await run('--search binary body', ['requests', 'list', 'shop', '--search', 'needle', '--json'], { json: true });
    await run('--search none', ['requests', 'list', 'shop', '--search', 'no such text', '--json'], { json: true });
    await run('--since', ['requests', 'list', 'shop', '--since', boundary, '--json'], { json: true });
    await run('--until', ['requests', 'list', 'shop', '--until', boundary, '--json'], { json: true });
    await run('--since 1h --state held', ['requests', 'list', 'shop', '--since', '1h', '--state', 'held', '--json'], { json: true });
    const page1 = await run('--limit 3', ['requests', 'list', 'shop', '--limit', '3', '--json'], { json: true });
    const cursor = JSON.parse(page1.stdout).next_cursor as string;
    assert.ok(cursor, 'a next cursor after 3 of 8');
    await run('--cursor', ['requests', 'list', 'shop', '--limit', '3', '--cursor', cursor, '--json'], { json: true });
    await human('--limit 3 human', ['requests', 'list', 'shop', '--limit', '3']);

    // One request: human, JSON, and its exact bytes through a pipe (the real binary).
    await human('requests show', ['requests', 'show', binaryId]);
    await run('requests show --json', ['requests', 'show', binaryId, '--json'], { json: true });
    const raw = await runCli([...g, 'requests', 'show', binaryId, '--raw']);
    assert.equal(raw.code, 0, raw.stderr);
    const rawFile = join(dir.dir, 'raw.bin');
    writeFileSync(rawFile, raw.stdout);

    // Export in every format, and an import round trip into the other bucket.
    await run('export ndjson', ['requests', 'export', 'shop']);
    await run('export ndjson filtered', ['requests', 'export', 'shop', '--state', 'held', '--search', 'needle']);
    await run('export har', ['requests', 'export', 'shop', '--format', 'har'], { json: true });
    await run('export curl', ['requests', 'export', 'shop', '--format', 'curl', '--base-url', 'http://consumer.invalid/in']);
    const file = join(dir.dir, 'shop.ndjson');
    await run('export --out --json', ['requests', 'export', 'shop', '--out', file, '--json'], { json: true });
    await run('import --json', ['requests', 'import', 'other', file, '--json'], { json: true });
    await run('list imported', ['requests', 'list', 'other', '--json'], { json: true });
    await run('export imported', ['requests', 'export', 'other']);
    await human('import human', ['requests', 'import', 'other', file]);

    // Replay: a dry run, then the exhausted one for real, delivered by serve's worker.
    await human('bucket resume', ['bucket', 'resume', 'shop']);
    await until(async () => (await states('shop')).delivered === 7, 'batch B delivered');
    await run('replay --dry-run', ['replay', 'shop', '--state', 'exhausted', '--dry-run', '--json'], { json: true });
    await human('replay --dry-run human', ['replay', 'shop', '--status', '5xx', '--dry-run']);
    consumer.fallback = { status: 200, body: 'fixed' };
    await run('replay --wait --json', ['replay', 'shop', '--state', 'exhausted', '--yes', '--wait', '--timeout', '30s', '--json'], {
      json: true,
    });
    await run('states after replay', ['bucket', 'show', 'shop', '--json'], { json: true });
    const again = await runInProcess([...g, 'replay', 'shop', '--path', '/refunds/*']);
    assert.equal(again.code, 0, again.stderr);
    const replayId = again.stdout.trim();
    await run('replays wait', ['replays', 'wait', replayId, '--timeout', '30s', '--json'], { json: true });
    await human('replays list', ['replays', 'list']);
    await run('replays list --json', ['replays', 'list', '--json'], { json: true });
    await run('replays list --bucket', ['replays', 'list', '--bucket', 'shop', '--json'], { json: true });
    await run('show after replay', ['requests', 'show', failId, '--json'], { json: true });
    await human('show after replay human', ['requests', 'show', failId]);

    // Stats and health.
    await run('stats --json', ['stats', 'shop', '--json'], { json: true });
    await human('stats', ['stats', 'shop']);
    await run('health --json', ['health', 'shop', '--fail-on', 'exhausted > 0 || failed > 0', '--json'], { json: true });
    await human('health tripped', ['health', 'shop', '--fail-on', 'delivered > 3'], 3);

    // Tail: the real binary, bounded by --count; it says on stderr when its cursor is taken.
    const child = spawn(process.execPath, [BIN, ...g, 'requests', 'tail', 'shop', '--json', '--count', '2'], {
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let tailOut = '';
    child.stdout.on('data', (d) => (tailOut += d));
    const exited = new Promise<number>((r) => child.on('exit', (code) => r(code ?? -1)));
    await new Promise<void>((r) => child.stderr.on('data', (d: Buffer) => /following shop/.test(d.toString()) && r()));
    await post('/tail', { body: '{"tail":true}', headers: { 'content-type': 'application/json' } });
    assert.equal(await exited, 0);
    // The request's state is whatever the worker had done by the poll that found it.
    const tailEvents = tailOut
      .trim()
      .split('\n')
      .map((l) => maskTimings({ ...JSON.parse(l), ...(l.includes('"event":"request"') ? { state: '<state>' } : {}) }));
    steps.push({ name: 'tail --json --count 2', code: 0, out: norm(tailEvents.map((e) => JSON.stringify(e)).join('\n')), err: '' });

    // Prune: a dry run, then for real (every delivered request).
    await new Promise((r) => setTimeout(r, 5));
    await run('prune --dry-run', ['prune', '--bucket', 'shop', '--older-than', '1ms', '--dry-run', '--json'], { json: true });
    const pruned = await run('prune', ['prune', '--bucket', 'shop', '--older-than', '1ms', '--json'], { json: true });
    // reclaimed_bytes is the file's shrink on SQLite and 0 on PostgreSQL (README "Running on
    // PostgreSQL"), so it is left out of the comparison and checked by the caller.
    const reclaimed = JSON.parse(pruned.stdout).reclaimed_bytes as number;
    await human('prune human', ['prune', '--state', 'none', '--older-than', '1ms']);
    await run('list after prune', ['requests', 'list', 'shop', '--json'], { json: true });

    // The worker: on SQLite refused while serve's worker holds the single-worker lease; on
    // PostgreSQL workers share claims, so a second one runs a pass beside it (not compared: the
    // two differ on purpose). Then one pass of its own once serve has stopped.
    const beside = await runInProcess([...g, 'worker', '--once', '--log-level', 'silent']);
    assert.equal(beside.code, db.startsWith('postgres') ? 0 : 1, beside.stderr);
    await server.close(2000);
    await run('worker --once --json', ['worker', '--once', '--json', '--log-level', 'silent'], { json: true });

    // Delete: --force with imported requests; then both buckets gone.
    await run('bucket delete --force', ['bucket', 'delete', 'other', '--force', '--json'], { json: true });
    await human('bucket delete shop', ['bucket', 'delete', 'shop', '--force']);
    await run('bucket list empty', ['bucket', 'list', '--json'], { json: true });
    await human('show deleted bucket', ['bucket', 'show', 'shop'], 4);
    return { steps, rawBody: readFileSync(rawFile), posted: binary, reclaimed };
  } finally {
    await server?.close(2000);
    dir.remove();
  }
}

describe('the CLI on PostgreSQL says what it says on SQLite', { skip: pgServer === undefined ? PG_SKIP_REASON : false }, () => {
  let consumer: Consumer;
  let pgDb: TestDatabase;
  let sqliteRun: Scenario;
  let pgRun: Scenario;

  before(async () => {
    await sweepStaleTestDatabases(pgServer!);
    pgDb = await createTestDatabase(pgServer!);
  });
  after(async () => {
    await consumer?.close();
    await pgDb?.drop();
  });

  // The consumer fails requests whose path says "fail" until the scenario fixes it.
  const script = (): Script => (req, res) => {
    res.writeHead(req.url!.includes('fail') ? 500 : 200);
    res.end('ok');
  };

  it('runs the sequence on SQLite', async () => {
    consumer = await startConsumer(script());
    const t = tempDir('hookbucket-clipg-db-');
    try {
      sqliteRun = await runScenario(t.db, consumer);
    } finally {
      t.remove();
    }
    assert.deepEqual(sqliteRun.rawBody, sqliteRun.posted, '--raw writes the exact bytes');
  });

  it('runs the same sequence on PostgreSQL, with the same output at every step', async () => {
    consumer.fallback = script();
    pgRun = await runScenario(pgDb.url, consumer);
    assert.deepEqual(pgRun.rawBody, pgRun.posted, '--raw writes the exact bytes');
    assert.equal(pgRun.reclaimed, 0, 'autovacuum reuses the space; nothing goes back to the disk');
    assert.deepEqual(
      pgRun.steps.map((s) => s.name),
      sqliteRun.steps.map((s) => s.name),
    );
    for (let i = 0; i < sqliteRun.steps.length; i++) {
      const a = sqliteRun.steps[i]!;
      const b = pgRun.steps[i]!;
      assert.equal(b.code, a.code, `${a.name}: exit code`);
      assert.equal(b.out, a.out, `${a.name}: stdout`);
      assert.equal(b.err, a.err, `${a.name}: stderr`);
    }
  });
});

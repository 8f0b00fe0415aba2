import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { startServer, type RunningServer } from '../../src/main.js';
import { RetentionLoop } from '../../src/retention/retention-loop.js';
import { silentLogger } from '../../src/shared/logger.js';
import type { Bucket, PruneOptions, PruneResult } from '../../src/store/store.js';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';

const DAY = 86_400_000;
const T = Date.UTC(2026, 10, 15, 12); // the server's (manual) now

function byPath(req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(req.url!.endsWith('/nf') ? 404 : 200).end();
}

describe('per-bucket --retain, applied by the server', () => {
  let b: DrainBench;
  let consumer: Consumer;
  let server: RunningServer;
  const id: Record<string, string> = {};
  const exists = (rid: string) => b.raw.prepare('select count(*) from requests where id = ?').pluck().get(rid) === 1;

  before(async () => {
    b = await drainBench();
    consumer = await startConsumer(byPath);
    const created = await runCli([
      '--db',
      b.db,
      'bucket',
      'create',
      'r',
      '--destination',
      `${consumer.url}/in`,
      '--retain',
      '30d',
      '--json',
    ]);
    assert.equal(created.code, 0, created.stderr);
    assert.equal(created.json().retain_ms, 30 * DAY);
    assert.deepEqual(created.json().retain_states, ['delivered']);
    await b.store.createBucket({ name: 'keep', destination: `${consumer.url}/in` });
    const w = b.worker();
    const one = (bucket: string, path = '/ok') => b.ingest(bucket, { path })[0]!;
    b.clock.set(T - 40 * DAY);
    id.old = one('r');
    id.failed = one('r', '/nf');
    id.to = one('r');
    id.keep = one('keep');
    await w.runOnce();
    // A live replay to another destination keeps its request.
    b.raw
      .prepare(
        `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, trigger, created_at, updated_at, latest)
         values ('to-staging', ?, 'r', 'http://staging.invalid/in', 2, 'retrying', 1, ?, 'replay', ?, ?, 0)`,
      )
      .run(id.to, T + DAY, T, T);
    b.clock.set(T - DAY);
    id.recent = one('r');
    await w.runOnce();

    const config = loadConfig(
      {},
      {},
      { db: b.db, port: 0, host: '127.0.0.1', minFreeDisk: '0', logLevel: 'silent', worker: false, adminPort: 0 },
    );
    b.clock.set(T - 15 * DAY);
    server = await startServer(config, { clock: b.clock, logger: silentLogger });
  });
  after(async () => {
    await server.close(1000);
    await b.close();
    await consumer.close();
  });

  it('measures age on the injected clock', async () => {
    // 15 days earlier, the old requests were 25 days old: nothing to do yet.
    const pass = await server.retention.runOnce();
    assert.deepEqual(Object.keys(pass.buckets), ['r'], 'only buckets with --retain');
    assert.equal(pass.buckets.r!.requests, 0);
    assert.ok(exists(id.old!));
  });

  it('prunes old delivered requests of the bucket with --retain, on the prune rules', async () => {
    b.clock.set(T);
    const pass = await server.retention.runOnce();
    assert.deepEqual(pass.errors, {});
    assert.equal(pass.buckets.r!.requests, 1);
    assert.equal(pass.buckets.r!.keptLive, 1);
    assert.ok(!exists(id.old!), 'old and delivered');
    assert.equal(b.raw.prepare('select count(*) from attempts where request_id = ?').pluck().get(id.old!), 0);
    assert.ok(exists(id.failed!), 'failed is kept unless --retain-state names it');
    assert.ok(exists(id.to!), 'a live --to delivery keeps it');
    assert.ok(exists(id.recent!), 'not old enough');
    assert.ok(exists(id.keep!), 'a bucket without --retain is never touched');
  });

  it('--retain-state adds terminal states; --no-retain turns it off; bucket show states it', async () => {
    const upd = await runCli(['--db', b.db, 'bucket', 'update', 'r', '--retain-state', 'delivered,failed']);
    assert.equal(upd.code, 0, upd.stderr);
    const shown = await runCli(['--db', b.db, 'bucket', 'show', 'r']);
    assert.match(
      shown.text,
      /^retention {9}serve prunes delivered, failed requests older than 30d every 10m \(never one with a live delivery\)$/m,
    );
    assert.equal((await server.retention.runOnce()).buckets.r!.requests, 1);
    assert.ok(!exists(id.failed!));

    const off = await runCli(['--db', b.db, 'bucket', 'update', 'r', '--no-retain', '--json']);
    assert.equal(off.code, 0, off.stderr);
    assert.equal(off.json().retain_ms, null);
    assert.deepEqual(off.json().retain_states, ['delivered']);
    b.clock.set(T + 365 * DAY);
    assert.deepEqual((await server.retention.runOnce()).buckets, {});
    assert.ok(exists(id.recent!));
    assert.match((await runCli(['--db', b.db, 'bucket', 'show', 'r'])).text, /^retention {9}off: requests are kept until pruned/m);
  });

  it('refuses bad --retain options', async () => {
    const cases: Array<[string[], RegExp]> = [
      [['bucket', 'create', 'x', '--retain', 'forever'], /--retain/],
      [['bucket', 'create', 'x', '--retain-state', 'none'], /--retain-state needs --retain <duration>/],
      [['bucket', 'create', 'x', '--retain', '7d', '--retain-state', 'pending'], /pending requests are never pruned/],
      [['bucket', 'update', 'r', '--no-retain', '--retain-state', 'failed'], /--no-retain turns retention off/],
    ];
    for (const [args, re] of cases) {
      const r = await runCli(['--db', b.db, ...args]);
      assert.equal(r.code, 2, args.join(' '));
      assert.match(r.stderr, re);
    }
  });
});

describe('prune batches', () => {
  let b: DrainBench;
  let consumer: Consumer;
  before(async () => {
    b = await drainBench();
    consumer = await startConsumer();
  });
  after(async () => {
    await b.close();
    await consumer.close();
  });

  it('bounds each delete transaction by 8 MiB of bodies (and 500 requests)', async () => {
    await b.store.createBucket({ name: 'big', destination: consumer.url });
    b.clock.set(T - 40 * DAY);
    for (let i = 0; i < 40; i++) b.ingest('big', { body: Buffer.alloc(512 * 1024, 1) });
    b.clock.set(T - 39 * DAY);
    for (let i = 0; i < 1200; i++) b.ingest('big', { body: 'x' });
    const w = b.worker();
    await b.store.updateBucket('big', { drain: { concurrency: 1000 } });
    while ((await w.runOnce()).started > 0);
    const batches: number[] = [];
    let last = 0;
    const r = await b.store.prune(
      { receivedBeforeMs: T, states: ['delivered'], dryRun: false },
      {
        onProgress: (p) => {
          if (p.phase !== 'delete') return;
          batches.push(p.requests - last);
          last = p.requests;
        },
      },
    );
    assert.equal(r.requests, 1240);
    // 16 × 512 KiB = 8 MiB; then 500-request batches of the small ones.
    assert.deepEqual(batches, [16, 16, 8 + 492, 500, 208]);
  });
});

describe('RetentionLoop', () => {
  const bucket = (name: string, retainMs: number | null): Bucket =>
    ({ name, retainMs, retainStates: ['delivered'], deletingAt: null }) as unknown as Bucket;
  const purgeDeleting = async () => ({ finished: [], requests: 0, bytes: 0 });
  const empty: PruneResult = { requests: 0, bytes: 0, deliveries: 0, attempts: 0, keptLive: 0, buckets: {}, reclaimedBytes: 0 };

  it('one bucket failing does not stop the others; the cutoff comes from the clock', async () => {
    const calls: PruneOptions[] = [];
    const loop = new RetentionLoop({
      store: {
        purgeDeleting,
        listBuckets: async () => [bucket('a', 1000), bucket('b', null), bucket('c', 5000)],
        prune: async (o) => {
          calls.push(o);
          if (o.bucket === 'a') throw new Error('database is locked');
          return { ...empty, requests: 3 };
        },
      },
      clock: { now: () => 100_000 },
      logger: silentLogger,
    });
    const pass = await loop.runOnce();
    assert.deepEqual(pass.errors, { a: 'database is locked' });
    assert.deepEqual(Object.keys(pass.buckets), ['c']);
    assert.deepEqual(
      calls.map((c) => [c.bucket, c.receivedBeforeMs, c.dryRun]),
      [
        ['a', 99_000, false],
        ['c', 95_000, false],
      ],
    );
    await loop.stop();
  });

  it('stop() ends a pass at its next bucket and joins it', async () => {
    let release!: () => void;
    const gate = new Promise<void>((r) => (release = r));
    let entered!: () => void;
    const inPrune = new Promise<void>((r) => (entered = r));
    const seen: string[] = [];
    const loop = new RetentionLoop({
      store: {
        purgeDeleting,
        listBuckets: async () => [bucket('a', 1), bucket('b', 1)],
        prune: async (o, hooks) => {
          seen.push(o.bucket!);
          entered();
          await gate;
          assert.equal(hooks?.signal?.aborted, true, 'the pass sees the stop');
          return empty;
        },
      },
      clock: { now: () => 0 },
      logger: silentLogger,
    });
    const pass = loop.runOnce();
    const again = loop.runOnce();
    await inPrune;
    const stopped = loop.stop();
    release();
    await stopped;
    assert.equal(await pass, await again, 'a running pass is joined, not doubled');
    assert.deepEqual(seen, ['a']);
  });
});

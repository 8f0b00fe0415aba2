import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseDrainDialectOptions, summarizeDrainDialects, type DrainDialectRun } from '../../bench/drain-dialects.js';
import { parseDialectOptions, roundOrder } from '../../bench/ingest-dialects.js';
import { benchPgServer, procCpuUs } from '../../bench/pg-bench.js';

describe('dialect benchmarks: pure parts', () => {
  it('alternates which dialect runs first from round to round', () => {
    assert.deepEqual(roundOrder(1), ['sqlite', 'postgres']);
    assert.deepEqual(roundOrder(2), ['postgres', 'sqlite']);
    assert.deepEqual(roundOrder(3), ['sqlite', 'postgres']);
  });

  it('parses options with defaults and refuses bad ones', () => {
    assert.deepEqual(parseDialectOptions([], {}), { durationS: 10, warmupS: 3, rounds: 3, connections: [32, 256], json: false });
    assert.deepEqual(parseDialectOptions(['--connections', '64', '--rounds', '5'], { BENCH_DURATION: '4' }).connections, [64]);
    assert.equal(parseDialectOptions([], { BENCH_DURATION: '4' }).durationS, 4);
    assert.throws(() => parseDialectOptions(['--rounds', '0'], {}), /--rounds/);
    assert.throws(() => parseDialectOptions(['--connections', '32,x'], {}), /--connections/);
    assert.deepEqual(parseDrainDialectOptions([]), { requests: 5000, rounds: 3, json: false });
    assert.throws(() => parseDrainDialectOptions(['--requests', '10']), /--requests/);
  });

  it('takes the server from HOOKBUCKET_TEST_PG, else the local default', () => {
    assert.equal(benchPgServer({ HOOKBUCKET_TEST_PG: 'postgres://u@h:1/d' }), 'postgres://u@h:1/d');
    assert.equal(benchPgServer({}), 'postgres://postgres@127.0.0.1:5432/test');
  });

  it('takes medians per dialect', () => {
    const run = (dialect: 'sqlite' | 'postgres', deliveriesPerS: number, cpu: number): DrainDialectRun => ({
      round: 1,
      dialect,
      requests: 100,
      deliveriesPerS,
      spanMs: 1,
      workerCpuUsPerDelivery: cpu,
      pgCpuUsPerDelivery: dialect === 'postgres' ? cpu / 2 : 0,
      pgAuxCpuUsPerDelivery: 0,
      pg: { readable: true, databaseUs: {}, databaseTotalUs: 0, backends: 0, auxUs: {}, auxTotalUs: 0, commits: 0 },
      passesPerDelivery: 0,
      load1: 0,
    });
    const s = summarizeDrainDialects([
      run('sqlite', 100, 10),
      run('sqlite', 300, 30),
      run('sqlite', 200, 20),
      run('postgres', 50, 40),
      run('postgres', 70, 60),
    ]);
    assert.deepEqual(
      s.map((x) => [x.dialect, x.deliveriesPerS, x.workerCpuUsPerDelivery, x.pgCpuUsPerDelivery]),
      [
        ['sqlite', 200, 20, 0],
        ['postgres', 60, 50, 25],
      ],
    );
  });

  it('reads a process CPU from /proc, growing with work, and undefined for a pid that is gone', async (t) => {
    const before = await procCpuUs(process.pid);
    if (before === undefined) return t.skip('no /proc on this system');
    const until = Date.now() + 50; // 50 ms of busy work: five clock ticks
    while (Date.now() < until);
    const after = await procCpuUs(process.pid);
    assert.ok(after !== undefined && after > before, `${after} > ${before}`);
    assert.equal(await procCpuUs(2 ** 22 + 1), undefined); // above Linux's pid_max limit (2^22)
  });
});

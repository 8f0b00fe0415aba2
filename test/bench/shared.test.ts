import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { drainFigures, drainProblems } from '../../bench/drain-dialects.js';
import { checkStoredLoads, loadProblems, type LoadSummary } from '../../bench/ingest.js';
import type { PgCpu } from '../../bench/pg-bench.js';
import { intOption, machineLines, numberOption, parseFlags, problemLines, ratio } from '../../bench/report.js';

const pg: PgCpu = { readable: true, databaseUs: {}, databaseTotalUs: 4_000, backends: 2, auxUs: {}, auxTotalUs: 400, commits: 9 };

const loadOf = (ok2xx: number, non2xx: number, errors: number, cutOff: number): LoadSummary => ({
  server: 'receiver',
  connections: 8,
  durationS: 1,
  reqPerSec: ok2xx,
  p50Ms: 1,
  p99Ms: 2,
  maxMs: 3,
  ok2xx,
  non2xx,
  errors,
  cutOff,
});

describe('what the benchmarks share: pure parts', () => {
  it('parses flags and number options, with the option named in every refusal', () => {
    // parseArgs' values have no prototype: spread into a plain object to compare.
    assert.deepEqual(
      { ...parseFlags(['--rounds', '2', '--json'], { rounds: { type: 'string' }, json: { type: 'boolean', default: false } }) },
      { rounds: '2', json: true },
    );
    assert.throws(() => parseFlags(['--nope'], { rounds: { type: 'string' } }), /nope/);
    assert.equal(intOption('--rounds', undefined, 3, 1, 20), 3);
    assert.equal(intOption('--rounds', '', 3, 1, 20), 3);
    assert.equal(intOption('--rounds', '20', 3, 1, 20), 20);
    assert.throws(() => intOption('--rounds', '1.5', 3, 1, 20), { message: '--rounds must be an integer from 1 to 20, got "1.5"' });
    assert.equal(numberOption('--rate', '2.5', 100, 1, 1000, false), 2.5);
    assert.throws(() => numberOption('--rounds', '2.5', 3, 1, 20, true), { message: '--rounds must be a number from 1 to 20, got "2.5"' });
    assert.throws(() => numberOption('--rate', '0', 100, 1, 1000, false), /--rate/);
  });

  it('formats ratios, the machine and load lines and the problem list', () => {
    assert.deepEqual([ratio(3, 2), ratio(1, 0), ratio(NaN, 2), ratio(1, NaN)], ['1.50', '-', '-', '-']);
    const machine = { cpuModel: 'CPU', cpuCount: 2, node: 'v20', platform: 'linux', totalMemGiB: 4 };
    assert.deepEqual(machineLines(machine, { before: [1, 0.5, 0.25], after: [2, 1, 0] }), [
      'machine   2 x CPU, 4 GiB RAM, linux, node v20',
      'load      1/5/15-min load average: 1.00 0.50 0.25 before, 2.00 1.00 0.00 after; 1-min at the end of each run in the table',
    ]);
    assert.deepEqual(problemLines([]), []);
    assert.deepEqual(problemLines(['a', 'b'], 'HEAD'), ['', 'HEAD', '  - a', '  - b']);
  });

  it('checks a drain: every delivery delivered, every request once at the consumer', () => {
    const ok = { requests: 3, states: { delivered: 3 } };
    assert.deepEqual(drainProblems('r1', 3, ok, { at: [1, 2, 3], seq: [], distinctIds: 3 }), []);
    assert.deepEqual(
      drainProblems('r1', 3, { requests: 3, states: { delivered: 2, retrying: 1 } }, { at: [1, 2, 3, 3], seq: [], distinctIds: 3 }),
      [
        'r1: 2 of 3 deliveries delivered in the db (states {"delivered":2,"retrying":1})',
        'r1: the consumer got 4 requests (3 distinct) of 3',
      ],
    );
    assert.deepEqual(drainFigures([1_300, 1_000, 1_200, 1_100], 4, 8_000, pg), {
      deliveriesPerS: 10,
      spanMs: 300,
      workerCpuUsPerDelivery: 2_000,
      pgCpuUsPerDelivery: 1_000,
      pgAuxCpuUsPerDelivery: 100,
      pg,
    });
  });

  it('checks a load: non-2xx and errors of the warm-up and measured run, stored against acked', () => {
    assert.deepEqual(loadProblems('r1', loadOf(5, 1, 0, 0), loadOf(9, 0, 2, 0)), [
      'r1 warm-up: 1 non-2xx responses',
      'r1 measured: 2 connection errors/timeouts',
    ]);
    assert.deepEqual(loadProblems('r1', undefined, loadOf(9, 0, 0, 0)), []);
    assert.equal(checkStoredLoads(14, [loadOf(5, 0, 0, 0), loadOf(9, 0, 0, 0)]).verdict, 'equal');
    assert.deepEqual(checkStoredLoads(11, [undefined, loadOf(9, 0, 0, 3)]), { stored: 11, acked: 9, cutOff: 3, verdict: 'cut-off' });
    assert.equal(checkStoredLoads(8, [undefined, loadOf(9, 0, 0, 3)]).verdict, 'mismatch');
  });
});

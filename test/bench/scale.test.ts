import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { LoadSummary } from '../../bench/ingest.js';
import { parseScaleDrainOptions } from '../../bench/scale-drain.js';
import { combine, parseScaleIngestOptions, receiverOrder } from '../../bench/scale-ingest.js';
import { median, percentile, rotation } from '../../bench/scale-lib.js';
import { parseWakeOptions, percentiles, workerOrder } from '../../bench/wake-latency.js';

describe('scale-out benchmarks: pure parts', () => {
  it('rotates the worker counts so each runs first, in the middle and last once in three rounds', () => {
    assert.deepEqual(
      [1, 2, 3, 4].map((r) => rotation([1, 2, 3], r)),
      [
        [1, 2, 3],
        [2, 3, 1],
        [3, 1, 2],
        [1, 2, 3],
      ],
    );
    assert.deepEqual(
      [receiverOrder(1), receiverOrder(2)],
      [
        [1, 2],
        [2, 1],
      ],
    );
    assert.deepEqual(
      [workerOrder(1), workerOrder(2)],
      [
        [3, 1],
        [1, 3],
      ],
    );
  });

  it('parses options with defaults and refuses bad ones', () => {
    assert.deepEqual(parseScaleDrainOptions([]), { requests: 5000, rounds: 3, concurrency: 10, json: false });
    assert.equal(parseScaleDrainOptions(['--concurrency', '30']).concurrency, 30);
    assert.throws(() => parseScaleDrainOptions(['--concurrency', '0']), /--concurrency/);
    assert.deepEqual(parseScaleIngestOptions([]), { durationS: 10, warmupS: 3, rounds: 3, connections: 64, json: false });
    assert.throws(() => parseScaleIngestOptions(['--connections', '1']), /--connections/);
    assert.deepEqual(parseWakeOptions([]), { rate: 100, durationS: 20, rounds: 3, json: false });
    assert.throws(() => parseWakeOptions(['--rate', '0']), /--rate/);
  });

  it('takes nearest-rank percentiles and medians', () => {
    const v = Array.from({ length: 100 }, (_, i) => 100 - i); // 100..1, unsorted
    assert.deepEqual(percentiles(v), { p50: 50, p90: 90, p99: 99, max: 100 });
    assert.equal(percentile([], 0.5), NaN);
    assert.equal(median([3, NaN, 1, 2]), 2);
    assert.equal(median([4, 1, 2, 3]), 2.5);
  });

  it('combines loads run at once: summed rates and counts, the worse latencies', () => {
    const part = (reqPerSec: number, p99Ms: number): LoadSummary => ({
      server: 'receiver',
      connections: 32,
      durationS: 10,
      reqPerSec,
      p50Ms: p99Ms / 4,
      p99Ms,
      maxMs: p99Ms * 2,
      ok2xx: reqPerSec * 10,
      non2xx: 1,
      errors: 0,
      cutOff: 2,
    });
    const c = combine([part(1000, 40), part(1200, 60)]);
    assert.deepEqual([c.connections, c.reqPerSec, c.p50Ms, c.p99Ms, c.ok2xx, c.non2xx, c.cutOff], [64, 2200, 15, 60, 22000, 2, 4]);
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { computeStats, fieldValue, isStatsField, percentile } from '../../src/stats/stats.js';
import type { StatsSample } from '../../src/store/store.js';

const NOW = Date.UTC(2026, 11, 2, 12);

function sample(over: Partial<StatsSample> = {}): StatsSample {
  return {
    bucket: 'b',
    paused: false,
    requests: 0,
    latest: {},
    superseded: 0,
    oldestWaitingAt: null,
    receivedInWindow: 0,
    settled: { delivered: 0, failed: 0, exhausted: 0 },
    attempts: [],
    rejected: {},
    deferred: {},
    ...over,
  };
}

describe('percentile (nearest rank over a histogram)', () => {
  const cases: Array<[string, Array<[number, number]>, number, number | null]> = [
    ['no samples', [], 50, null],
    ['zero counts only', [[5, 0]], 99, null],
    ['one sample is every percentile', [[42, 1]], 50, 42],
    ['one sample, p99', [[42, 1]], 99, 42],
    [
      '1..4: p50 is the 2nd',
      [
        [1, 1],
        [2, 1],
        [3, 1],
        [4, 1],
      ],
      50,
      2,
    ],
    [
      '1..4: p99 is the 4th',
      [
        [1, 1],
        [2, 1],
        [3, 1],
        [4, 1],
      ],
      99,
      4,
    ],
    [
      'unsorted input',
      [
        [30, 1],
        [10, 1],
        [20, 1],
      ],
      50,
      20,
    ],
    [
      'counts: 99 fast and 1 slow, p99 is fast',
      [
        [10, 99],
        [5000, 1],
      ],
      99,
      10,
    ],
    [
      'counts: 98 fast and 2 slow, p99 is slow',
      [
        [10, 98],
        [5000, 2],
      ],
      99,
      5000,
    ],
    [
      'p100 is the maximum',
      [
        [1, 3],
        [9, 1],
      ],
      100,
      9,
    ],
    ['1..100: p50 is 50', Array.from({ length: 100 }, (_, i) => [i + 1, 1] as [number, number]), 50, 50],
    ['1..100: p99 is 99', Array.from({ length: 100 }, (_, i) => [i + 1, 1] as [number, number]), 99, 99],
  ];
  for (const [name, hist, p, want] of cases) {
    it(name, () => assert.equal(percentile(hist, p), want));
  }
  it('refuses a percentile outside (0, 100]', () => {
    assert.throws(() => percentile([[1, 1]], 0), RangeError);
    assert.throws(() => percentile([[1, 1]], 101), RangeError);
  });
});

describe('computeStats', () => {
  it('counts requests by their latest state; the rest have none', () => {
    const f = computeStats(
      [sample({ requests: 10, latest: { pending: 2, retrying: 1, delivering: 1, delivered: 3, failed: 1, exhausted: 1 } })],
      NOW,
    );
    assert.deepEqual(
      [f.received, f.pending, f.retrying, f.delivering, f.held, f.delivered, f.failed, f.exhausted, f.none],
      [10, 2, 1, 1, 0, 3, 1, 1, 1],
    );
  });

  it('counts pending and retrying in a paused bucket as held, not again as pending or retrying', () => {
    const f = computeStats([sample({ paused: true, requests: 4, latest: { pending: 2, retrying: 1, delivering: 1 } })], NOW);
    assert.deepEqual([f.pending, f.retrying, f.held, f.delivering], [0, 0, 3, 1]);
  });

  it('gives null rates, percentiles and age when there is nothing to compute them from', () => {
    const f = computeStats([sample({ requests: 3 })], NOW);
    assert.equal(f.success_rate, null);
    assert.equal(f.attempt_success_rate, null);
    assert.equal(f.latency_p50_ms, null);
    assert.equal(f.latency_p99_ms, null);
    assert.equal(f.oldest_pending_age_s, null);
    assert.equal(f.none, 3);
  });

  it('success_rate is delivered over everything that settled in the window', () => {
    const f = computeStats([sample({ settled: { delivered: 3, failed: 1, exhausted: 1 } })], NOW);
    assert.equal(f.settled, 5);
    assert.equal(f.success_rate, 0.6);
  });

  it('attempts: success rate over all, latency over those with a duration (a lease that expired has none)', () => {
    const f = computeStats(
      [
        sample({
          attempts: [
            { durationMs: 10, delivered: true, count: 3 },
            { durationMs: 200, delivered: false, count: 1 },
            { durationMs: null, delivered: false, count: 4 },
          ],
        }),
      ],
      NOW,
    );
    assert.equal(f.attempts, 8);
    assert.equal(f.attempt_success_rate, 3 / 8);
    assert.equal(f.latency_p50_ms, 10);
    assert.equal(f.latency_p99_ms, 200);
  });

  it('oldest_pending_age_s: whole seconds since the oldest waiting request, across buckets', () => {
    const f = computeStats([sample({ oldestWaitingAt: NOW - 61_500 }), sample({ bucket: 'c', oldestWaitingAt: NOW - 5_000 })], NOW);
    assert.equal(f.oldest_pending_age_s, 61);
  });

  it('adds buckets together, merging latency histograms and refusals (and refusals that named no bucket)', () => {
    const a = sample({
      requests: 2,
      latest: { delivered: 2 },
      attempts: [{ durationMs: 5, delivered: true, count: 2 }],
      rejected: { body_too_large: 2 },
    });
    const b = sample({
      bucket: 'c',
      requests: 1,
      superseded: 4,
      attempts: [{ durationMs: 900, delivered: false, count: 2 }],
      rejected: { body_too_large: 1, overloaded: 1 },
    });
    const f = computeStats([a, b], NOW, { unknown_bucket: 7 });
    assert.equal(f.received, 3);
    assert.equal(f.none, 1);
    assert.equal(f.superseded, 4);
    assert.equal(f.latency_p50_ms, 5);
    assert.equal(f.latency_p99_ms, 900);
    assert.deepEqual(f.rejected, { body_too_large: 3, overloaded: 1, unknown_bucket: 7 });
    assert.equal(f.rejected_total, 11);
  });
});

describe('stats fields for expressions', () => {
  const f = computeStats([sample({ requests: 1, rejected: { body_too_large: 2 } })], NOW);
  const cases: Array<[string, boolean, number | null | undefined]> = [
    ['received', true, 1],
    ['success_rate', true, null],
    ['rejected_total', true, 2],
    ['rejected.body_too_large', true, 2],
    ['rejected.overloaded', true, 0],
    ['rejected', false, undefined],
    ['rejected.', false, undefined],
    ['bytes', false, undefined],
    ['Received', false, undefined],
  ];
  for (const [name, known, value] of cases) {
    it(`${name}: ${known ? `= ${value}` : 'unknown'}`, () => {
      assert.equal(isStatsField(name), known);
      if (known) assert.equal(fieldValue(f, name), value);
    });
  }
});

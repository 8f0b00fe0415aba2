import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  allowedRetries,
  describeRetryBudget,
  DEFAULT_RETRY_BUDGET,
  emptyRetryBudget,
  mayRetry,
  recordAttempt,
  retryAllowance,
  type RetryBudgetState,
} from '../../src/policy/retry-budget.js';

const T0 = Date.UTC(2026, 0, 1);

describe('allowedRetries = fraction × first attempts in the window + floor × 60', () => {
  const cases: Array<[number, number, number, number]> = [
    [0.1, 1, 600, 120],
    [0.1, 1, 0, 60],
    [0.1, 1, 7, 60], // 60.7: whole retries only
    [0.1, 1, 10, 61],
    [0.1, 0, 5, 0],
    [0, 1, 100_000, 60],
    [0.5, 2, 100, 170],
    [0.1, 0.5, 30, 33],
  ];
  for (const [fraction, floorPerSecond, firsts, want] of cases) {
    it(`${fraction} × ${firsts} + ${floorPerSecond}/s × 60 → ${want}`, () =>
      assert.equal(allowedRetries({ fraction, floorPerSecond }, firsts), want));
  }
});

/** Records `perSecond` first attempts in each second from `fromSec` for `seconds` seconds. */
function firsts(s: RetryBudgetState, fromSec: number, seconds: number, perSecond: number): RetryBudgetState {
  for (let sec = fromSec; sec < fromSec + seconds; sec++) s = recordAttempt(s, T0 + sec * 1000, 'first', perSecond);
  return s;
}

/** Takes retries at `atMs` while the budget allows; returns how many went and the new state. */
function retryWhileAllowed(s: RetryBudgetState, atMs: number): [number, RetryBudgetState] {
  let n = 0;
  while (mayRetry(DEFAULT_RETRY_BUDGET, s, atMs)) {
    s = recordAttempt(s, atMs, 'retry');
    n++;
  }
  return [n, s];
}

describe('the retry budget over a sliding 60 s window', () => {
  it('600 first attempts a minute allow 120 retries, then defer', () => {
    const s = firsts(emptyRetryBudget(), 0, 60, 10);
    const [n, after] = retryWhileAllowed(s, T0 + 59_500);
    assert.equal(n, 120);
    assert.equal(mayRetry(DEFAULT_RETRY_BUDGET, after, T0 + 59_999), false);
    assert.deepEqual(retryAllowance(DEFAULT_RETRY_BUDGET, after, T0 + 59_999), {
      firstAttempts: 600,
      retries: 120,
      allowed: 120,
      remaining: 0,
    });
  });

  it('a quiet bucket can still retry at the floor: 60 a minute', () => {
    const [n] = retryWhileAllowed(emptyRetryBudget(), T0);
    assert.equal(n, 60);
  });

  it('retries leave the window after 60 s and free the budget again', () => {
    const [n1, s1] = retryWhileAllowed(emptyRetryBudget(), T0);
    assert.equal(n1, 60);
    assert.equal(mayRetry(DEFAULT_RETRY_BUDGET, s1, T0 + 59_999), false, 'still in the window at 59.999 s');
    const [n2] = retryWhileAllowed(s1, T0 + 60_000);
    assert.equal(n2, 60, 'gone at 60 s');
  });

  it('first attempts older than the window stop counting', () => {
    const s = firsts(emptyRetryBudget(), 0, 60, 10);
    assert.equal(retryAllowance(DEFAULT_RETRY_BUDGET, s, T0 + 59_000).allowed, 120);
    assert.equal(retryAllowance(DEFAULT_RETRY_BUDGET, s, T0 + 89_000).allowed, 90, 'half the firsts left the window');
    assert.equal(retryAllowance(DEFAULT_RETRY_BUDGET, s, T0 + 3_600_000).allowed, 60);
  });

  it("a replay's first attempts count as first attempts", () => {
    // The worker records a replay's first attempt as 'first': a replay of 1000 requests lets
    // 100 of their retries through on top of the floor.
    const s = recordAttempt(emptyRetryBudget(), T0, 'first', 1000);
    assert.equal(retryAllowance(DEFAULT_RETRY_BUDGET, s, T0 + 1000).allowed, 160);
  });

  it('memory stays bounded: one slot per second of the window, whatever the traffic', () => {
    let s = emptyRetryBudget();
    for (let sec = 0; sec < 3600; sec++) s = recordAttempt(s, T0 + sec * 1000, sec % 2 ? 'first' : 'retry', 50);
    assert.equal(s.seconds.length, 60);
    assert.equal(s.firsts.length, 60);
    assert.equal(s.retries.length, 60);
    assert.deepEqual(retryAllowance(DEFAULT_RETRY_BUDGET, s, T0 + 3_599_000), {
      firstAttempts: 1500,
      retries: 1500,
      allowed: 210,
      remaining: 0,
    });
  });

  it('recording returns a new state and leaves the old one alone', () => {
    const a = emptyRetryBudget();
    const b = recordAttempt(a, T0, 'retry');
    assert.equal(retryAllowance(DEFAULT_RETRY_BUDGET, a, T0).retries, 0);
    assert.equal(retryAllowance(DEFAULT_RETRY_BUDGET, b, T0).retries, 1);
  });
});

describe('describeRetryBudget: the budget in one sentence, from the settings', () => {
  const cases: Array<[number, number, string]> = [
    [
      0.1,
      1,
      'Retries may number at most 10% of the first attempts over 60s, plus 60 (1/s, however quiet the bucket); beyond that they wait (deferred: retry_budget), never dropped.',
    ],
    [
      0.2,
      0.5,
      'Retries may number at most 20% of the first attempts over 60s, plus 30 (0.5/s, however quiet the bucket); beyond that they wait (deferred: retry_budget), never dropped.',
    ],
    [
      0,
      2,
      'Retries may number at most 120 per 60s (2/s), whatever the traffic; beyond that they wait (deferred: retry_budget), never dropped.',
    ],
    [
      1.5,
      0,
      'Retries may number at most 150% of the first attempts over 60s, none in a window without first attempts; beyond that they wait (deferred: retry_budget), never dropped.',
    ],
    [0, 0, 'Retries never go: the budget allows none (--retry-budget 0 and --retry-floor 0); they wait until it is raised.'],
  ];
  for (const [fraction, floorPerSecond, want] of cases) {
    it(`${fraction}, ${floorPerSecond}/s`, () => assert.equal(describeRetryBudget({ fraction, floorPerSecond }), want));
  }
});

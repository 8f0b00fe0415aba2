import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { ERROR_CLASSES, parseRetryOn, type Outcome, type RetryOn } from '../../src/policy/classify.js';
import { decideAttempt, type AttemptDecision, type AttemptFacts } from '../../src/policy/outcome.js';
import { admit, block, newPacer, type Admission, type PacerConfig, type PacerState } from '../../src/policy/pacer.js';
import {
  allowedRetries,
  DEFAULT_RETRY_BUDGET,
  nextRetryAllowedAt,
  retryAllowance,
  type RetryBudgetConfig,
} from '../../src/policy/retry-budget.js';
import { DEFAULT_SCHEDULE, type Schedule } from '../../src/policy/schedule.js';
import { takeToken } from '../../src/policy/token-bucket.js';

// A whole second, so that HTTP-dates (whole seconds) land exactly.
const NOW = Date.UTC(2026, 0, 1, 12);
const MINUTE = 60_000;

/** No jitter, so every gap is the paper gap: 1 s, 2 s, 4 s, 8 s … capped at 10 minutes. */
const SCHEDULE: Schedule = { baseMs: 1000, multiplier: 2, capMs: 10 * MINUTE, maxAttempts: 5, jitter: 'none' };
const GIVE_UP: Schedule = { baseMs: 1000, multiplier: 2, capMs: 10 * MINUTE, giveUpMs: 10_000, jitter: 'none' };

const status = (s: number): Outcome => ({ kind: 'response', status: s });

function facts(outcome: Outcome, more: Partial<AttemptFacts> = {}): AttemptFacts {
  return { outcome, attempt: 1, elapsedActiveMs: 0, nowMs: NOW, random: 0.5, ...more };
}

describe('decideAttempt: the classification table', () => {
  const retry = (reason: string): AttemptDecision => ({ state: 'retrying', reason, atMs: NOW + 1000, why: 'schedule' });
  const cases: Array<[string, Outcome, AttemptDecision]> = [
    ['200', status(200), { state: 'delivered', reason: 'status_200' }],
    ['201', status(201), { state: 'delivered', reason: 'status_201' }],
    ['204', status(204), { state: 'delivered', reason: 'status_204' }],
    ['299', status(299), { state: 'delivered', reason: 'status_299' }],
    ...ERROR_CLASSES.map((errorClass): [string, Outcome, AttemptDecision] => [
      errorClass,
      { kind: 'error', errorClass },
      retry(`error_${errorClass}`),
    ]),
    ...[408, 425, 429, 500, 502, 503, 504, 599].map((s): [string, Outcome, AttemptDecision] => [
      String(s),
      status(s),
      retry(`status_${s}`),
    ]),
    ...[300, 301, 302, 303, 304, 307, 308].map((s): [string, Outcome, AttemptDecision] => [
      String(s),
      status(s),
      { state: 'failed', reason: 'redirect_not_followed' },
    ]),
    ...[400, 401, 403, 404, 409, 410, 413, 422, 499].map((s): [string, Outcome, AttemptDecision] => [
      String(s),
      status(s),
      { state: 'failed', reason: `status_${s}` },
    ]),
    ['unsendable', { kind: 'error', errorClass: 'unsendable' }, { state: 'failed', reason: 'error_unsendable' }],
  ];
  for (const [name, outcome, want] of cases) {
    it(`${name} → ${want.state}${'reason' in want ? ` (${want.reason})` : ''}`, () =>
      assert.deepEqual(decideAttempt(SCHEDULE, null, facts(outcome)), want));
  }
});

describe('decideAttempt: a custom retried set replaces the default', () => {
  const only503 = parseRetryOn('503')!;
  const with4xx = parseRetryOn('5xx,4xx,timeout')!;
  const with3xx = parseRetryOn('3xx')!;
  const cases: Array<[string, RetryOn, Outcome, AttemptDecision['state'], string]> = [
    ['503 only: 503 retried', only503, status(503), 'retrying', 'status_503'],
    ['503 only: 500 failed', only503, status(500), 'failed', 'status_500'],
    ['503 only: 429 failed', only503, status(429), 'failed', 'status_429'],
    ['503 only: refused failed', only503, { kind: 'error', errorClass: 'refused' }, 'failed', 'error_refused'],
    ['503 only: 200 still delivered', only503, status(200), 'delivered', 'status_200'],
    ['4xx added: 404 retried', with4xx, status(404), 'retrying', 'status_404'],
    ['4xx added: timeout retried', with4xx, { kind: 'error', errorClass: 'timeout' }, 'retrying', 'error_timeout'],
    ['4xx added: tls failed', with4xx, { kind: 'error', errorClass: 'tls' }, 'failed', 'error_tls'],
    ['3xx retried when asked', with3xx, status(302), 'retrying', 'status_302'],
  ];
  for (const [name, retryOn, outcome, state, reason] of cases) {
    it(name, () => {
      const d = decideAttempt(SCHEDULE, retryOn, facts(outcome));
      assert.deepEqual([d.state, d.reason], [state, reason]);
    });
  }
});

describe('decideAttempt: exhaustion', () => {
  const cases: Array<[string, Schedule, Outcome, Partial<AttemptFacts>, AttemptDecision]> = [
    [
      'attempt 4 of 5 is retried after 8 s',
      SCHEDULE,
      status(500),
      { attempt: 4 },
      { state: 'retrying', reason: 'status_500', atMs: NOW + 8000, why: 'schedule' },
    ],
    [
      'attempt 5 of 5 is exhausted',
      SCHEDULE,
      status(500),
      { attempt: 5 },
      { state: 'exhausted', reason: 'status_500', why: 'max_attempts' },
    ],
    [
      'past max attempts is exhausted',
      SCHEDULE,
      { kind: 'error', errorClass: 'reset' },
      { attempt: 9 },
      { state: 'exhausted', reason: 'error_reset', why: 'max_attempts' },
    ],
    ['a 2xx on the last attempt is delivered', SCHEDULE, status(200), { attempt: 5 }, { state: 'delivered', reason: 'status_200' }],
    [
      'a 404 on the last attempt is failed, not exhausted',
      SCHEDULE,
      status(404),
      { attempt: 5 },
      { state: 'failed', reason: 'status_404' },
    ],
    // Attempt 3's gap is 4 s: 6 s + 4 s lands on the 10 s give-up exactly, 1 ms more is past it.
    [
      'give-up: a retry landing on the deadline goes',
      GIVE_UP,
      status(503),
      { attempt: 3, elapsedActiveMs: 6000 },
      { state: 'retrying', reason: 'status_503', atMs: NOW + 4000, why: 'schedule' },
    ],
    [
      'give-up: a retry past the deadline is exhausted',
      GIVE_UP,
      status(503),
      { attempt: 3, elapsedActiveMs: 6001 },
      { state: 'exhausted', reason: 'status_503', why: 'give_up_after' },
    ],
    [
      'give-up: no attempt limit',
      { ...GIVE_UP, giveUpMs: 3_600_000 },
      status(503),
      { attempt: 500, elapsedActiveMs: 0 },
      { state: 'retrying', reason: 'status_503', atMs: NOW + 10 * MINUTE, why: 'schedule' },
    ],
  ];
  for (const [name, schedule, outcome, more, want] of cases) {
    it(name, () => assert.deepEqual(decideAttempt(schedule, null, facts(outcome, more)), want));
  }
});

describe('decideAttempt: Retry-After is a floor, on 429 and 503 only', () => {
  const httpDate = (ms: number) => new Date(ms).toUTCString();
  const cases: Array<[string, Schedule, number, string | undefined, Partial<AttemptFacts>, AttemptDecision]> = [
    [
      '429, delta-seconds above the gap',
      SCHEDULE,
      429,
      '120',
      {},
      { state: 'retrying', reason: 'status_429', atMs: NOW + 120_000, why: 'retry_after', bucketBlockedUntilMs: NOW + 120_000 },
    ],
    [
      '503, IMF-fixdate 90 s ahead',
      SCHEDULE,
      503,
      httpDate(NOW + 90_000),
      {},
      { state: 'retrying', reason: 'status_503', atMs: NOW + 90_000, why: 'retry_after', bucketBlockedUntilMs: NOW + 90_000 },
    ],
    [
      '429, Retry-After below the gap: the schedule wins, the bucket is still blocked for the Retry-After',
      SCHEDULE,
      429,
      '1',
      { attempt: 3 },
      { state: 'retrying', reason: 'status_429', atMs: NOW + 4000, why: 'schedule', bucketBlockedUntilMs: NOW + 1000 },
    ],
    [
      '500 with Retry-After: ignored',
      SCHEDULE,
      500,
      '120',
      {},
      { state: 'retrying', reason: 'status_500', atMs: NOW + 1000, why: 'schedule' },
    ],
    [
      '502 with an HTTP-date: ignored',
      SCHEDULE,
      502,
      httpDate(NOW + 90_000),
      {},
      { state: 'retrying', reason: 'status_502', atMs: NOW + 1000, why: 'schedule' },
    ],
    [
      '429 without Retry-After',
      SCHEDULE,
      429,
      undefined,
      {},
      { state: 'retrying', reason: 'status_429', atMs: NOW + 1000, why: 'schedule' },
    ],
    [
      '429, Retry-After: 0 blocks nothing',
      SCHEDULE,
      429,
      '0',
      {},
      { state: 'retrying', reason: 'status_429', atMs: NOW + 1000, why: 'schedule' },
    ],
    [
      '503, a date in the past blocks nothing',
      SCHEDULE,
      503,
      httpDate(NOW - 60_000),
      {},
      { state: 'retrying', reason: 'status_503', atMs: NOW + 1000, why: 'schedule' },
    ],
    [
      '503, an unparsable Retry-After is ignored',
      SCHEDULE,
      503,
      'soon',
      {},
      { state: 'retrying', reason: 'status_503', atMs: NOW + 1000, why: 'schedule' },
    ],
    [
      '503, a year of delta-seconds is clamped to the 10 min cap',
      SCHEDULE,
      503,
      '31536000',
      {},
      { state: 'retrying', reason: 'status_503', atMs: NOW + 10 * MINUTE, why: 'retry_after', bucketBlockedUntilMs: NOW + 10 * MINUTE },
    ],
    [
      '429, an HTTP-date a day ahead is clamped to the cap',
      SCHEDULE,
      429,
      httpDate(NOW + 86_400_000),
      {},
      { state: 'retrying', reason: 'status_429', atMs: NOW + 10 * MINUTE, why: 'retry_after', bucketBlockedUntilMs: NOW + 10 * MINUTE },
    ],
    [
      'an uncapped schedule clamps to the default cap (3 h)',
      { ...SCHEDULE, capMs: Infinity },
      429,
      '31536000',
      {},
      {
        state: 'retrying',
        reason: 'status_429',
        atMs: NOW + DEFAULT_SCHEDULE.capMs,
        why: 'retry_after',
        bucketBlockedUntilMs: NOW + DEFAULT_SCHEDULE.capMs,
      },
    ],
    [
      '429 on the last attempt is exhausted whatever Retry-After says',
      SCHEDULE,
      429,
      '5',
      { attempt: 5 },
      { state: 'exhausted', reason: 'status_429', why: 'max_attempts' },
    ],
  ];
  for (const [name, schedule, s, retryAfter, more, want] of cases) {
    it(name, () => assert.deepEqual(decideAttempt(schedule, null, facts(status(s), { retryAfter, ...more })), want));
  }
});

describe('pacer.admit', () => {
  const unpaced: PacerConfig = { rate: null, budget: DEFAULT_RETRY_BUDGET };
  const twoPerSecond: PacerConfig = { rate: { rate: { count: 2, perMs: 1000 }, burst: 1 }, budget: DEFAULT_RETRY_BUDGET };

  /** Admits while allowed; returns how many went and the first refusal. */
  function admitWhile(
    c: PacerConfig,
    s: PacerState,
    kind: 'first' | 'retry',
    nowMs: number,
    max = 10_000,
  ): [number, PacerState, Admission] {
    for (let n = 0; n < max; n++) {
      const a = admit(c, s, kind, nowMs);
      if (!a.go) return [n, s, a];
      s = a.state;
    }
    throw new Error(`still admitting after ${max}`);
  }

  function assertUnchanged(a: Admission, s: PacerState): void {
    assert.equal(a.go, false);
    assert.equal(a.state, s, 'the very same state object');
    assert.deepEqual(a.state, structuredClone(s));
  }

  it('a bucket-wide Retry-After block holds firsts and retries until it ends', () => {
    const s = block(newPacer(), NOW + 5000);
    for (const kind of ['first', 'retry'] as const) {
      const a = admit(twoPerSecond, s, kind, NOW);
      assert.deepEqual([a.go, !a.go && a.reason, !a.go && a.untilMs], [false, 'retry_after', NOW + 5000], kind);
      assertUnchanged(a, s);
    }
    assert.equal(admit(twoPerSecond, s, 'first', NOW + 4999).go, false);
    assert.equal(admit(twoPerSecond, s, 'first', NOW + 5000).go, true);
  });

  it('block never shortens a block', () => {
    const s = block(newPacer(), NOW + 5000);
    assert.equal(block(s, NOW + 1000), s);
    assert.equal(block(s, NOW + 9000).blockedUntilMs, NOW + 9000);
  });

  it('the retry budget defers retries only, until nextRetryAllowedAt', () => {
    // No first attempts: the floor alone allows 1/s × 60 = 60 retries in the window.
    const [n, s, denied] = admitWhile(unpaced, newPacer(), 'retry', NOW);
    assert.equal(n, 60);
    assert.equal(denied.go, false);
    assert.equal(!denied.go && denied.reason, 'retry_budget');
    assert.equal(!denied.go && denied.untilMs, nextRetryAllowedAt(unpaced.budget, s.budget, NOW));
    assert.equal(!denied.go && denied.untilMs, NOW + MINUTE, 'the 60 retries leave the window together');
    assertUnchanged(denied, s);

    const first = admit(unpaced, s, 'first', NOW);
    assert.equal(first.go, true, 'a first attempt is never held by the budget');
    assert.equal(admit(unpaced, s, 'retry', NOW + MINUTE - 1).go, false);
    assert.equal(admit(unpaced, s, 'retry', NOW + MINUTE).go, true);
  });

  it('the rate defers with the time of the next token', () => {
    const s0 = newPacer();
    const a1 = admit(twoPerSecond, s0, 'first', NOW);
    assert.equal(a1.go, true);
    const s1 = a1.state;
    for (const kind of ['first', 'retry'] as const) {
      const a2 = admit(twoPerSecond, s1, kind, NOW);
      assert.equal(!a2.go && a2.reason, 'rate', kind);
      assert.equal(!a2.go && a2.untilMs, takeToken(twoPerSecond.rate!, s1.tokens, NOW).nextAvailableAtMs);
      assert.equal(!a2.go && a2.untilMs, NOW + 500, '2/s: a token every 500 ms');
      assertUnchanged(a2, s1);
    }
    assert.equal(admit(twoPerSecond, s1, 'first', NOW + 499).go, false);
    assert.equal(admit(twoPerSecond, s1, 'first', NOW + 500).go, true);
  });

  it('a retry held by the rate is not counted against the budget', () => {
    const s1 = admit(twoPerSecond, newPacer(), 'retry', NOW).state;
    const before = retryAllowance(twoPerSecond.budget, s1.budget, NOW);
    const denied = admit(twoPerSecond, s1, 'retry', NOW);
    assert.equal(!denied.go && denied.reason, 'rate');
    assert.deepEqual(retryAllowance(twoPerSecond.budget, denied.state.budget, NOW), before);
    assert.equal(before.retries, 1);
  });

  it('checks in order: Retry-After, then the budget, then the rate', () => {
    const [, overBudget] = admitWhile(unpaced, newPacer(), 'retry', NOW);
    const noTokens = admit(twoPerSecond, overBudget, 'first', NOW).state;
    assert.equal(admit(twoPerSecond, noTokens, 'retry', NOW).go, false);
    const cases: Array<[PacerState, 'first' | 'retry', string]> = [
      [block(noTokens, NOW + 9000), 'retry', 'retry_after'],
      [noTokens, 'retry', 'retry_budget'],
      [noTokens, 'first', 'rate'],
    ];
    for (const [s, kind, reason] of cases) {
      const a = admit(twoPerSecond, s, kind, NOW);
      assert.equal(!a.go && a.reason, reason, `${kind} → ${reason}`);
    }
  });

  describe('allowed retries = fraction × first attempts + floor × 60, counted through admit over a minute', () => {
    // budget, first attempts a second, retries the minute allows (worked out by hand)
    const cases: Array<[RetryBudgetConfig, number, number]> = [
      [{ fraction: 0.1, floorPerSecond: 1 }, 10, 120], // 0.1 × 600 + 60
      [{ fraction: 0.5, floorPerSecond: 0.5 }, 20, 630], // 0.5 × 1200 + 30
      [{ fraction: 0.1, floorPerSecond: 0 }, 10, 60], // 0.1 × 600
      [{ fraction: 0, floorPerSecond: 2 }, 50, 120], // 120 whatever the traffic
      [{ fraction: 0.25, floorPerSecond: 0.1 }, 3, 51], // 0.25 × 180 + 6
    ];
    for (const [budget, firstsPerSecond, total] of cases) {
      it(`fraction ${budget.fraction}, floor ${budget.floorPerSecond}/s, ${firstsPerSecond} firsts/s → ${total} retries in the minute`, () => {
        assert.equal(allowedRetries(budget, firstsPerSecond * 60), total);
        const c: PacerConfig = { rate: null, budget };
        let s = newPacer();
        let retries = 0;
        for (let sec = 0; sec < 60; sec++) {
          const at = NOW + sec * 1000;
          for (let i = 0; i < firstsPerSecond; i++) {
            const a = admit(c, s, 'first', at);
            assert.equal(a.go, true);
            s = a.state;
          }
          const [n, after, denied] = admitWhile(c, s, 'retry', at);
          retries += n;
          s = after;
          assert.equal(!denied.go && denied.reason, 'retry_budget');
          // At every second the running total is the formula over the first attempts so far.
          assert.equal(retries, allowedRetries(budget, firstsPerSecond * (sec + 1)), `after second ${sec}`);
        }
        assert.equal(retries, total);
      });
    }
  });
});

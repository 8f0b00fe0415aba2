import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatDuration } from '../../src/config/units.js';
import {
  DEFAULT_SCHEDULE,
  expectedGiveUp,
  jitterGap,
  nextAttempt,
  paperGapMs,
  paperSchedule,
  parseRetryAfter,
  scheduleProblem,
  scheduleWarnings,
  type Schedule,
} from '../../src/policy/schedule.js';

const S = 1000;
const M = 60 * S;
const H = 60 * M;
/** The largest double below 1: what Math.random() can return at most. */
const ALMOST_ONE = 1 - Number.EPSILON / 2;

describe('paper schedule: defaults (30s base, ×3, 3h cap, 14 attempts)', () => {
  const paper = paperSchedule(DEFAULT_SCHEDULE);
  const expected: Array<[number, string | null, string]> = [
    [1, null, '0ms'],
    [2, '30s', '30s'],
    [3, '1m30s', '2m'],
    [4, '4m30s', '6m30s'],
    [5, '13m30s', '20m'],
    [6, '40m30s', '1h00m30s'],
    [7, '2h01m30s', '3h02m'],
    [8, '3h', '6h02m'],
    [9, '3h', '9h02m'],
    [10, '3h', '12h02m'],
    [11, '3h', '15h02m'],
    [12, '3h', '18h02m'],
    [13, '3h', '21h02m'],
    [14, '3h', '24h02m'],
  ];
  it('has 14 attempts', () => assert.equal(paper.rows.length, 14));
  for (const [attempt, gap, elapsed] of expected) {
    it(`attempt ${attempt}: gap ${gap ?? '-'}, elapsed ${elapsed}`, () => {
      const row = paper.rows[attempt - 1]!;
      assert.equal(row.attempt, attempt);
      assert.equal(row.gapMs === null ? null : formatDuration(row.gapMs), gap);
      assert.equal(formatDuration(row.elapsedMs), elapsed);
    });
  }
  it('attempt 7 at 3h02m and attempt 14 at 24h02m exactly (10,920 s and 86,520 s)', () => {
    assert.equal(paper.rows[6]!.elapsedMs, 10_920 * S);
    assert.equal(paper.rows[13]!.elapsedMs, 86_520 * S);
    assert.equal(paper.giveUpMs, 86_520 * S);
  });
});

describe('paper schedule: a multiplier of 1 gives fixed intervals', () => {
  const s: Schedule = { baseMs: 5 * M, multiplier: 1, capMs: 3 * H, maxAttempts: 6, jitter: 'none' };
  const paper = paperSchedule(s);
  it('every gap is the base', () =>
    assert.deepEqual(
      paper.rows.map((r) => r.gapMs),
      [null, 5 * M, 5 * M, 5 * M, 5 * M, 5 * M],
    ));
  it('elapsed grows linearly', () =>
    assert.deepEqual(
      paper.rows.map((r) => r.elapsedMs),
      [0, 5, 10, 15, 20, 25].map((m) => m * M),
    ));
});

describe('paperGapMs: min(cap, base × multiplier^(k-1))', () => {
  const cases: Array<[Partial<Schedule>, number, number]> = [
    [{}, 1, 30 * S],
    [{}, 6, 7290 * S],
    [{}, 7, 3 * H],
    [{}, 500, 3 * H],
    [{ multiplier: 1.5, baseMs: 1000 }, 3, 2250],
    [{ capMs: Infinity }, 8, 30 * S * 3 ** 7],
  ];
  for (const [over, k, gap] of cases) {
    it(`${JSON.stringify(over)} k=${k} → ${gap}`, () => assert.equal(paperGapMs({ ...DEFAULT_SCHEDULE, ...over }, k), gap));
  }
});

describe('jitterGap bounds, with random at 0 and just below 1', () => {
  const cases: Array<[number, 'full' | 'upper' | 'none', number, number]> = [
    [30_000, 'full', 0, 0],
    [30_000, 'full', ALMOST_ONE, 29_999],
    [30_000, 'full', 0.5, 15_000],
    [30_000, 'upper', 0, 15_000],
    [30_000, 'upper', ALMOST_ONE, 29_999],
    [30_000, 'upper', 0.5, 22_500],
    [30_001, 'upper', 0, 15_001], // never below gap/2 = 15000.5
    [30_000, 'none', 0, 30_000],
    [30_000, 'none', ALMOST_ONE, 30_000],
    [1, 'full', ALMOST_ONE, 0],
    [1, 'upper', 0, 1],
  ];
  for (const [gap, jitter, r, want] of cases) it(`${jitter} ${gap} r=${r} → ${want}`, () => assert.equal(jitterGap(gap, jitter, r), want));

  it('full stays in [0, gap) and upper in [gap/2, gap) over many draws', () => {
    for (let i = 0; i < 1000; i++) {
      const r = i / 1000;
      const gap = 1 + i * 37;
      const full = jitterGap(gap, 'full', r);
      const upper = jitterGap(gap, 'upper', r);
      assert.ok(full >= 0 && full < gap, `full ${full} of ${gap}`);
      assert.ok((upper >= gap / 2 && upper < gap) || gap === 1, `upper ${upper} of ${gap}`);
    }
  });
});

describe('nextAttempt', () => {
  const now = Date.UTC(2026, 0, 1);
  const none: Schedule = { ...DEFAULT_SCHEDULE, jitter: 'none' };
  const byDuration: Schedule = { baseMs: 30 * S, multiplier: 3, capMs: 3 * H, giveUpMs: 24 * H, jitter: 'none' };
  const cases: Array<[string, Schedule, Parameters<typeof nextAttempt>[1], ReturnType<typeof nextAttempt>]> = [
    [
      'first failure: 30s',
      none,
      { attempt: 1, elapsedActiveMs: 0, nowMs: now, random: 0 },
      { kind: 'retry', atMs: now + 30 * S, gapMs: 30 * S, why: 'schedule' },
    ],
    [
      'upper jitter, random 0: half the gap',
      DEFAULT_SCHEDULE,
      { attempt: 2, elapsedActiveMs: 30 * S, nowMs: now, random: 0 },
      { kind: 'retry', atMs: now + 45 * S, gapMs: 45 * S, why: 'schedule' },
    ],
    [
      'upper jitter, random 0.999…: just under the gap',
      DEFAULT_SCHEDULE,
      { attempt: 2, elapsedActiveMs: 30 * S, nowMs: now, random: ALMOST_ONE },
      { kind: 'retry', atMs: now + 90 * S - 1, gapMs: 90 * S - 1, why: 'schedule' },
    ],
    [
      'attempt 13 failed: one more, 3h later',
      none,
      { attempt: 13, elapsedActiveMs: 21 * H, nowMs: now, random: 0 },
      { kind: 'retry', atMs: now + 3 * H, gapMs: 3 * H, why: 'schedule' },
    ],
    [
      'attempt 14 failed: give up',
      none,
      { attempt: 14, elapsedActiveMs: 24 * H, nowMs: now, random: 0 },
      { kind: 'give_up', why: 'max_attempts' },
    ],
    [
      'by duration: next falls at exactly 24h: retry',
      byDuration,
      { attempt: 8, elapsedActiveMs: 21 * H, nowMs: now, random: 0 },
      { kind: 'retry', atMs: now + 3 * H, gapMs: 3 * H, why: 'schedule' },
    ],
    [
      'by duration: next falls past 24h: give up',
      byDuration,
      { attempt: 8, elapsedActiveMs: 21 * H + 1, nowMs: now, random: 0 },
      { kind: 'give_up', why: 'give_up_after' },
    ],
    [
      'by duration: paused time is not elapsed, so it keeps going',
      byDuration,
      { attempt: 30, elapsedActiveMs: 1 * H, nowMs: now + 100 * H, random: 0 },
      { kind: 'retry', atMs: now + 103 * H, gapMs: 3 * H, why: 'schedule' },
    ],
    [
      'Retry-After above the gap is a floor',
      none,
      { attempt: 1, elapsedActiveMs: 0, nowMs: now, random: 0, retryAfterMs: 120 * S },
      { kind: 'retry', atMs: now + 120 * S, gapMs: 120 * S, why: 'retry_after' },
    ],
    [
      'Retry-After below the gap changes nothing',
      none,
      { attempt: 3, elapsedActiveMs: 0, nowMs: now, random: 0, retryAfterMs: 10 * S },
      { kind: 'retry', atMs: now + 270 * S, gapMs: 270 * S, why: 'schedule' },
    ],
    [
      'Retry-After lifts a jittered gap',
      DEFAULT_SCHEDULE,
      { attempt: 1, elapsedActiveMs: 0, nowMs: now, random: 0, retryAfterMs: 29 * S },
      { kind: 'retry', atMs: now + 29 * S, gapMs: 29 * S, why: 'retry_after' },
    ],
    [
      'a hostile Retry-After (a year) is clamped to the 3h cap',
      none,
      { attempt: 1, elapsedActiveMs: 0, nowMs: now, random: 0, retryAfterMs: 365 * 24 * H },
      { kind: 'retry', atMs: now + 3 * H, gapMs: 3 * H, why: 'retry_after' },
    ],
    [
      'uncapped: Retry-After is clamped to the default cap',
      { ...none, capMs: Infinity },
      { attempt: 1, elapsedActiveMs: 0, nowMs: now, random: 0, retryAfterMs: 365 * 24 * H },
      { kind: 'retry', atMs: now + 3 * H, gapMs: 3 * H, why: 'retry_after' },
    ],
    [
      'a Retry-After past the give-up deadline gives up',
      byDuration,
      { attempt: 1, elapsedActiveMs: 23 * H, nowMs: now, random: 0, retryAfterMs: 2 * H },
      { kind: 'give_up', why: 'give_up_after' },
    ],
  ];
  for (const [name, s, f, want] of cases) it(name, () => assert.deepEqual(nextAttempt(s, f), want));
});

describe('parseRetryAfter: delta-seconds and the three HTTP-date forms', () => {
  const now = Date.UTC(2026, 0, 1, 12, 0, 0);
  const cases: Array<[string | undefined, number | undefined]> = [
    ['120', 120_000],
    [' 0 ', 0],
    ['31536000', 31_536_000_000],
    ['Thu, 01 Jan 2026 12:02:00 GMT', 120_000], // IMF-fixdate
    ['Thursday, 01-Jan-26 12:00:30 GMT', 30_000], // rfc850, two-digit year
    ['Thu Jan  1 12:01:00 2026', 60_000], // asctime
    ['Wed, 31 Dec 2025 12:00:00 GMT', 0], // in the past
    ['thu, 01 jan 2026 12:00:05 gmt', 5_000], // case-insensitive
    ['-1', undefined],
    ['1.5', undefined],
    ['soon', undefined],
    ['', undefined],
    [undefined, undefined],
    ['Sat, 31 Feb 2026 12:00:00 GMT', undefined], // no such day
    ['Thu, 01 Jan 2026 25:00:00 GMT', undefined],
    ['2026-01-01T12:05:00Z', undefined], // ISO is not an HTTP-date
  ];
  for (const [v, ms] of cases) it(`${JSON.stringify(v)} → ${ms}`, () => assert.equal(parseRetryAfter(v, now), ms));

  it('an rfc850 year more than 50 years ahead is in the past century', () => {
    // In 2026, "80" is 1980, not 2080.
    assert.equal(parseRetryAfter('Tuesday, 01-Jan-80 00:00:00 GMT', now), 0);
  });
});

describe('expectedGiveUp', () => {
  it('defaults: on paper 24h02m; upper about three quarters; full about half', () => {
    assert.deepEqual(expectedGiveUp(DEFAULT_SCHEDULE, 'none'), { ms: 86_520 * S, attempts: 14, method: 'exact' });
    assert.deepEqual(expectedGiveUp(DEFAULT_SCHEDULE, 'upper'), { ms: 64_890 * S, attempts: 14, method: 'exact' });
    assert.deepEqual(expectedGiveUp(DEFAULT_SCHEDULE, 'full'), { ms: 43_260 * S, attempts: 14, method: 'exact' });
    assert.equal(formatDuration(expectedGiveUp(DEFAULT_SCHEDULE).ms), '18h01m30s');
  });

  it('by duration: jitter fits more attempts before the deadline (seeded, so the same every run)', () => {
    const s: Schedule = { ...DEFAULT_SCHEDULE, maxAttempts: undefined, giveUpMs: 24 * H };
    const paper = paperSchedule(s);
    assert.equal(paper.giveUpMs, 21 * H + 2 * M, 'attempt 14 at 24h02m would be past 24h');
    const e = expectedGiveUp(s, 'upper');
    assert.equal(e.method, 'estimate');
    assert.ok(e.ms > paper.giveUpMs && e.ms <= 24 * H, formatDuration(e.ms));
    assert.ok(e.attempts > 14, String(e.attempts));
    assert.deepEqual(expectedGiveUp(s, 'upper'), e);
  });
});

describe('scheduleProblem and scheduleWarnings', () => {
  const cases: Array<[string, Partial<Schedule>, RegExp | undefined]> = [
    ['defaults', {}, undefined],
    ['base 0', { baseMs: 0 }, /base/],
    ['multiplier below 1', { multiplier: 0.5 }, /multiplier/],
    ['cap below base', { capMs: 10 * S }, /cap/],
    ['0 attempts', { maxAttempts: 0 }, /attempts/],
    ['2000 attempts', { maxAttempts: 2000 }, /attempts/],
    ['a million attempts by duration', { maxAttempts: undefined, giveUpMs: 30 * 24 * H, baseMs: 1000, multiplier: 1 }, /more than 10000/],
    ['uncapped ×3 for 1000 attempts overflows', { capMs: Infinity, maxAttempts: 1000 }, /cap/],
  ];
  for (const [name, over, want] of cases) {
    it(name, () => {
      const p = scheduleProblem({ ...DEFAULT_SCHEDULE, ...over } as Schedule);
      if (want === undefined) assert.equal(p, undefined);
      else assert.match(p ?? '', want);
    });
  }

  it('warns when uncapped, and when giving up past 7 days', () => {
    const uncapped: Schedule = { ...DEFAULT_SCHEDULE, capMs: Infinity, maxAttempts: 8 };
    assert.match(scheduleWarnings(uncapped, paperSchedule(uncapped)).join('\n'), /uncapped/);
    const long: Schedule = { ...DEFAULT_SCHEDULE, maxAttempts: 70 }; // 24h02m + 56 × 3h = 192h02m
    assert.match(scheduleWarnings(long, paperSchedule(long)).join('\n'), /past 7 days/);
    assert.deepEqual(scheduleWarnings(DEFAULT_SCHEDULE, paperSchedule(DEFAULT_SCHEDULE)), []);
    const fixedNoCap: Schedule = { ...DEFAULT_SCHEDULE, multiplier: 1, capMs: Infinity };
    assert.deepEqual(scheduleWarnings(fixedNoCap, paperSchedule(fixedNoCap)), [], 'fixed intervals need no cap');
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { DEFAULT_RETRY_BUDGET } from '../../src/policy/retry-budget.js';
import { DEFAULT_SCHEDULE } from '../../src/policy/schedule.js';
import {
  DEFAULT_POLICY,
  DEFAULT_SIMULATION,
  fixedPolicy,
  simulate,
  simulationProblem,
  type SimulationInput,
} from '../../src/drain/simulate.js';
import { parseRate } from '../../src/policy/token-bucket.js';

const M = 60_000;

describe('simulate: fixed 30 s retries (600/m, 10m outage, 30/s consumer, 5s timeout, 120m)', () => {
  const r = simulate({ ...DEFAULT_SIMULATION, policy: fixedPolicy('fixed:30s', 30_000) });
  const minute = (m: number) => r.minutes[m - 1]!;

  it('minute 10 holds the storm: 11,400–11,700 attempts, 19× normal traffic', () => {
    // The model counts the minute's own arrivals and their retries 30 s later, so it lands on the
    // issue's "mean over the minute" figure: 5400 backlogged × 2 + 600 first + 300 retries = 11,700.
    assert.equal(minute(10).attempts, 11_700);
    assert.ok(minute(10).attempts >= 11_400 && minute(10).attempts <= 11_700);
    assert.equal(minute(10).arrivals, 600);
  });

  it('attempts in minute m are about 600 + 2 × backlog during the outage', () => {
    for (let m = 1; m <= 10; m++) assert.equal(minute(m).attempts, 600 + 2 * 600 * (m - 1) + 300, `minute ${m}`);
  });

  it('the backlog is 6000 at the fix and never drains: congestion collapse', () => {
    assert.equal(r.backlogAtFix, 6000);
    assert.equal(r.drainMinute, null);
    assert.equal(r.drainedAtMs, null);
    // A few attempts get through in the first second after the fix, then the consumer's queue
    // outgrows the 5 s timeout and every answer comes too late.
    assert.ok(minute(11).successes > 0 && minute(11).successes < 300, String(minute(11).successes));
    for (let m = 12; m <= 120; m++) assert.equal(minute(m).successes, 0, `minute ${m}`);
    assert.ok(minute(120).backlog > minute(11).backlog + 60_000, 'the backlog keeps growing with arrivals');
    assert.ok(minute(120).consumerWaitMs > 10 * 3_600_000, 'the consumer is hours behind');
    assert.ok(minute(120).attempts > 100_000, 'load grows with the backlog');
  });
});

describe('simulate: the default policy (30s ×3, 3h cap, upper jitter, budget 0.1 + 1/s)', () => {
  const r = simulate(DEFAULT_SIMULATION);

  it('attempts stay at about 720 a minute (1.1 × 600 + 60) through the outage and the drain', () => {
    // The model gives 719: the budget window is the 60 whole seconds ending with the current one,
    // and a deferred retry is checked at the start of a second, before that second's arrivals are
    // counted, so it sees 590 first attempts and allows 0.1 × 590 + 60 = 119 retries a minute.
    for (const row of r.minutes.slice(0, 60)) {
      assert.ok(row.attempts >= 700 && row.attempts <= 730, `minute ${row.minute}: ${row.attempts}`);
    }
    assert.equal(r.minutes[9]!.attempts, 719);
    assert.equal(r.peakAttempts.attempts, 719);
  });

  it('the backlog of about 6000 drains about 50 minutes after the fix, around minute 60', () => {
    assert.equal(r.backlogAtFix, 6000);
    // 6000 / 119 retries a minute = 50.4 minutes: the last backlogged delivery goes at 60m26s, in
    // minute 61. The 120 a minute would end at exactly 60m00s, on the minute boundary.
    assert.equal(r.drainMinute, 61);
    const afterFix = r.drainedAtMs! - DEFAULT_SIMULATION.outageMs;
    assert.ok(afterFix >= 50 * M && afterFix <= 51 * M, String(afterFix));
    assert.equal(r.minutes[59]!.backlog, 50);
  });

  it('after the drain only first attempts remain, and nothing is lost', () => {
    for (const row of r.minutes.slice(61)) assert.deepEqual([row.attempts, row.retries, row.backlog], [600, 0, 0]);
    assert.equal(r.totals.successes, r.totals.arrivals);
    assert.equal(r.totals.exhausted, 0);
  });

  it('is reproducible: the same seed gives the same run', () => {
    assert.deepEqual(simulate(DEFAULT_SIMULATION).minutes, r.minutes);
  });
});

describe('simulate: other inputs run on the same modules', () => {
  const base: SimulationInput = { ...DEFAULT_SIMULATION, durationMs: 30 * M };

  it('a different seed changes the jitter', () => {
    // No budget, so the jittered schedule alone decides when retries go.
    const noBudget = { ...DEFAULT_POLICY, budget: undefined };
    const a = simulate({ ...base, policy: noBudget, seed: 1 });
    const b = simulate({ ...base, policy: noBudget, seed: 2 });
    assert.notDeepEqual(a.minutes, b.minutes);
    assert.equal(a.totals.arrivals, b.totals.arrivals);
  });

  it('--rate bounds every attempt, first attempts included', () => {
    const r = simulate({ ...base, policy: { ...DEFAULT_POLICY, rate: { rate: parseRate('11/s')!, burst: 1 } } });
    for (const row of r.minutes) assert.ok(row.attempts <= 660, `minute ${row.minute}: ${row.attempts}`);
    assert.ok(r.minutes[20]!.attempts >= 655, 'and keeps the consumer at the rate while a backlog remains');
  });

  it('a short schedule gives up: exhausted deliveries leave the backlog', () => {
    // A floor high enough that the budget never defers, so every delivery settles within the run.
    const policy = { ...DEFAULT_POLICY, schedule: { ...DEFAULT_SCHEDULE, maxAttempts: 2 }, budget: { fraction: 0.1, floorPerSecond: 100 } };
    const r = simulate({ ...base, policy });
    assert.ok(r.totals.exhausted > 0);
    assert.equal(r.totals.successes + r.totals.exhausted, r.totals.arrivals);
    assert.equal(r.drainMinute, 11);
  });

  it('no outage, no backlog', () => {
    const r = simulate({ ...base, outageMs: 0 });
    assert.equal(r.totals.failures, 0);
    assert.equal(r.drainMinute, 1);
    assert.ok(r.minutes.every((m) => m.backlog === 0 && m.attempts === 600));
  });

  it('uses the budget it is given', () => {
    const generous = { ...DEFAULT_POLICY, budget: { ...DEFAULT_RETRY_BUDGET, floorPerSecond: 10 } };
    const r = simulate({ ...base, policy: generous });
    assert.ok(r.minutes[9]!.retries > 600, String(r.minutes[9]!.retries));
  });

  const problems: Array<[string, Partial<SimulationInput>, RegExp]> = [
    ['too short', { durationMs: 10_000 }, /duration/],
    ['too long', { durationMs: 8 * 86_400_000 }, /duration/],
    ['an outage as long as the run', { outageMs: 30 * M }, /outage/],
    ['too many deliveries', { arrival: parseRate('1000/s')!, durationMs: 86_400_000 }, /deliveries/],
    ['a schedule that cannot work', { policy: { ...DEFAULT_POLICY, schedule: { ...DEFAULT_SCHEDULE, capMs: 1 } } }, /cap/],
  ];
  for (const [name, over, want] of problems) it(`refuses ${name}`, () => assert.match(simulationProblem({ ...base, ...over }) ?? '', want));
});

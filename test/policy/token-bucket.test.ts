import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  availableTokens,
  formatRate,
  FULL_BUCKET,
  parseRate,
  takeToken,
  type TokenBucketConfig,
  type TokenBucketState,
} from '../../src/policy/token-bucket.js';

describe('parseRate', () => {
  const cases: Array<[string, { count: number; perMs: number } | undefined]> = [
    ['200/s', { count: 200, perMs: 1000 }],
    ['600/m', { count: 600, perMs: 60_000 }],
    ['30/h', { count: 30, perMs: 3_600_000 }],
    ['0.5/s', { count: 0.5, perMs: 1000 }],
    [' 10 / S ', { count: 10, perMs: 1000 }],
    ['0/s', undefined],
    ['200', undefined],
    ['200/d', undefined],
    ['-1/s', undefined],
    ['/s', undefined],
    ['', undefined],
  ];
  for (const [text, want] of cases) it(`${JSON.stringify(text)}`, () => assert.deepEqual(parseRate(text), want));

  it('formats back', () => {
    for (const t of ['200/s', '600/m', '30/h']) assert.equal(formatRate(parseRate(t)!), t);
  });
});

/** Takes a token whenever one is available, from `from` until before `to`; returns the times taken. */
function drain(c: TokenBucketConfig, from: number, to: number, state: TokenBucketState = FULL_BUCKET): number[] {
  const taken: number[] = [];
  let s = state;
  let t = from;
  while (t < to) {
    const r = takeToken(c, s, t);
    if (r.taken) {
      taken.push(t);
      s = r.state;
    }
    assert.ok(r.nextAvailableAtMs >= t, 'next token is never in the past');
    t = Math.max(r.nextAvailableAtMs, r.taken ? t : t + 1e-3);
  }
  return taken;
}

describe('takeToken: rate', () => {
  const cases: Array<[string, number, number, number]> = [
    ['200/s', 1, 30_000, 6000],
    ['600/m', 1, 60_000, 600],
    ['30/h', 1, 3_600_000, 30],
    ['7/s', 1, 10_000, 70], // a fractional interval (142.857… ms) still yields exactly the rate
  ];
  for (const [rate, burst, ms, want] of cases) {
    it(`${rate} burst ${burst} over ${ms} ms → ${want}`, () => {
      assert.equal(drain({ rate: parseRate(rate)!, burst }, 0, ms).length, want);
    });
  }

  it('200/s with burst 1 spaces tokens 5 ms apart', () => {
    const times = drain({ rate: parseRate('200/s')!, burst: 1 }, 1_000_000, 1_000_050);
    assert.deepEqual(
      times,
      [0, 5, 10, 15, 20, 25, 30, 35, 40, 45].map((d) => 1_000_000 + d),
    );
  });

  it('denies with the time the next token comes', () => {
    const c = { rate: parseRate('1/s')!, burst: 1 };
    const a = takeToken(c, FULL_BUCKET, 10_000);
    assert.deepEqual([a.taken, a.nextAvailableAtMs], [true, 11_000]);
    const b = takeToken(c, a.state, 10_400);
    assert.deepEqual([b.taken, b.nextAvailableAtMs, b.state], [false, 11_000, a.state]);
    assert.equal(takeToken(c, a.state, 11_000).taken, true);
  });
});

describe('takeToken: burst', () => {
  const c: TokenBucketConfig = { rate: parseRate('1/s')!, burst: 5 };

  it('a full bucket gives burst tokens back to back, then one per interval', () => {
    const times = drain(c, 0, 3000);
    assert.deepEqual(times, [0, 0, 0, 0, 0, 1000, 2000]);
  });

  it('idle time refills to burst, never more', () => {
    let s = FULL_BUCKET;
    for (let i = 0; i < 5; i++) s = takeToken(c, s, 0).state;
    assert.equal(availableTokens(c, s, 0), 0);
    assert.equal(availableTokens(c, s, 2500), 2.5);
    assert.equal(availableTokens(c, s, 60_000), 5);
    const after = drain(c, 60_000, 60_001, s);
    assert.equal(after.length, 5);
  });

  it('no one-second window holds more than rate + burst', () => {
    const cfg = { rate: parseRate('200/s')!, burst: 10 };
    const times = drain(cfg, 0, 10_000);
    for (let w = 0; w < 9000; w += 100) {
      const inWindow = times.filter((t) => t >= w && t < w + 1000).length;
      assert.ok(inWindow <= 210, `${inWindow} in [${w}, ${w + 1000})`);
    }
  });
});

describe('takeToken: a caller that wakes late', () => {
  // A worker's timer fires a little after each token is due (here 0.3 to 1.2 ms late, a fixed
  // pattern): the rate must still hold, and no window may exceed rate + burst.
  const lateness = [0.3, 1.2, 0.7, 0.1, 0.9, 0.5];
  for (const burst of [1, 5]) {
    it(`keeps 200/s with burst ${burst} (and never more than rate + burst in a second)`, () => {
      const c = { rate: parseRate('200/s')!, burst };
      let s = FULL_BUCKET;
      let now = 0;
      const times: number[] = [];
      for (let i = 0; now < 10_000 && i < 100_000; i++) {
        const take = takeToken(c, s, now);
        if (take.taken) {
          times.push(now);
          s = take.state;
          continue;
        }
        now = take.nextAvailableAtMs + lateness[i % lateness.length]!;
      }
      const inFirst10s = times.filter((t) => t < 10_000).length;
      // 2,000 tokens in 10 s at 200/s, plus the burst at the start.
      assert.ok(inFirst10s >= 1995 && inFirst10s <= 2000 + burst, `${inFirst10s} in 10 s`);
      for (let w = 0; w < 9000; w += 50) {
        const n = times.filter((t) => t >= w && t < w + 1000).length;
        assert.ok(n <= 200 + burst, `${n} in [${w}, ${w + 1000})`);
      }
    });
  }

  it('restarts the schedule after an idle gap of a whole interval (no credit beyond the burst)', () => {
    const c = { rate: parseRate('10/s')!, burst: 1 };
    const a = takeToken(c, FULL_BUCKET, 0);
    // Idle for 10 s: one token is there, not a hundred.
    const b = takeToken(c, a.state, 10_000);
    assert.equal(b.taken, true);
    assert.equal(takeToken(c, b.state, 10_000).taken, false);
    assert.equal(takeToken(c, b.state, 10_099).taken, false);
    assert.equal(takeToken(c, b.state, 10_100).taken, true);
  });
});

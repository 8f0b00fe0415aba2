import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { afterLeaseExpiry, createClaimDecider, pacerConfigOf, type ClaimPolicy } from '../../src/policy/admission.js';
import { block, newPacer } from '../../src/policy/pacer.js';
import { DEFAULT_SCHEDULE } from '../../src/policy/schedule.js';
import { DEFAULT_DRAIN } from '../../src/store/bucket-defaults.js';
import { NO_PROVIDER } from '../../src/store/provider-row.js';
import type { Bucket, ClaimCandidate } from '../../src/store/store.js';

const T0 = Date.UTC(2026, 0, 1);
const bucket = (drain: Partial<Bucket['drain']> = {}): Bucket => ({
  name: 'b',
  provider: NO_PROVIDER,
  destination: 'http://127.0.0.1:1/x',
  maxBody: 1024,
  ackStatus: 200,
  ackBody: null,
  ackContentType: null,
  paused: false,
  createdAt: T0,
  updatedAt: T0,
  drain: { ...DEFAULT_DRAIN, ...drain },
  pausedAt: null,
  pausedTotalMs: 0,
  deletingAt: null,
  retainMs: null,
  retainStates: ['delivered'],
});
const cand = (i: number, o: Partial<ClaimCandidate> = {}): ClaimCandidate => ({
  deliveryId: `d${i}`,
  requestId: `r${i}`,
  attempts: 0,
  state: 'pending',
  trigger: 'initial',
  replayId: null,
  nextAttemptAt: T0,
  ...o,
});
const policy = (b: Bucket, o: Partial<ClaimPolicy> = {}): ClaimPolicy => ({
  nowMs: T0,
  config: pacerConfigOf(b),
  pacer: newPacer(),
  replayRates: new Map(),
  replayPacers: new Map(),
  ...o,
});
const walk = (p: ClaimPolicy, cs: ClaimCandidate[]) => {
  const d = createClaimDecider(p);
  const kinds: string[] = [];
  for (const c of cs) {
    const k = d.decide(c);
    kinds.push(k.kind === 'defer' ? `defer:${k.reason}` : k.kind);
    if (k.kind === 'stop') break;
  }
  return { kinds, verdict: d.verdict() };
};

describe('createClaimDecider: which due deliveries a claim takes', () => {
  it('no rate cap: every first attempt is claimed, nothing deferred, no wake time', () => {
    const { kinds, verdict } = walk(policy(bucket()), [cand(1), cand(2), cand(3)]);
    assert.deepEqual(kinds, ['claim', 'claim', 'claim']);
    assert.deepEqual(verdict.deferred, {});
    assert.equal(verdict.wakeAt, Infinity);
    assert.equal(
      verdict.pacer.budget.firsts.reduce((a, b) => a + b, 0),
      3,
    );
  });

  it('rate 1/s burst 2: two go, the third is deferred (head of the line), the walk stops at the fourth', () => {
    const b = bucket({ rate: { count: 1, perMs: 1000 }, burst: 2 });
    const { kinds, verdict } = walk(policy(b), [cand(1), cand(2), cand(3), cand(4)]);
    assert.deepEqual(kinds, ['claim', 'claim', 'defer:rate', 'stop']);
    assert.deepEqual(verdict.deferred, { rate: 1 });
    assert.equal(verdict.wakeAt, T0 + 1000);
  });

  it('a bucket-wide Retry-After block defers the head, stops at the next, wakes at the block end', () => {
    const { kinds, verdict } = walk(policy(bucket(), { pacer: block(newPacer(), T0 + 5000) }), [cand(1), cand(2)]);
    assert.deepEqual(kinds, ['defer:retry_after', 'stop']);
    assert.equal(verdict.wakeAt, T0 + 5000);
  });

  it('a retry over the budget is deferred once and skipped after; first attempts behind it still go', () => {
    const b = bucket({ retryBudget: { fraction: 0, floorPerSecond: 0 } });
    const { kinds, verdict } = walk(policy(b), [
      cand(1, { attempts: 1, state: 'retrying' }),
      cand(2, { attempts: 2, state: 'retrying' }),
      cand(3),
    ]);
    assert.deepEqual(kinds, ['defer:retry_budget', 'skip', 'claim']);
    assert.deepEqual(verdict.deferred, { retry_budget: 1 });
  });

  it("a replay's own rate holds its deliveries without spending the bucket's tokens", () => {
    const b = bucket({ rate: { count: 10, perMs: 1000 }, burst: 1 });
    const rates = new Map([['rp1', { count: 1, perMs: 60_000 }]]);
    const p = policy(b, { replayRates: rates });
    const r = (i: number) => cand(i, { trigger: 'replay', replayId: 'rp1' });
    const { kinds, verdict } = walk(p, [r(1), r(2), r(3), cand(4)]);
    // The first replay delivery takes the replay's token and the bucket's one token; the next is
    // held by the replay rate (deferred once, then skipped); the plain one then meets the bucket's rate.
    assert.deepEqual(kinds, ['claim', 'defer:replay_rate', 'skip', 'defer:rate']);
    assert.deepEqual(verdict.deferred, { replay_rate: 1, rate: 1 });
    assert.ok(verdict.replayTokens.has('rp1'));
    assert.equal(verdict.wakeAt, T0 + 100);
  });

  it('a replay token bucket the worker kept is honoured (no fresh burst)', () => {
    const rates = new Map([['rp1', { count: 1, perMs: 60_000 }]]);
    const first = walk(policy(bucket(), { replayRates: rates }), [cand(1, { trigger: 'replay', replayId: 'rp1' })]);
    const again = walk(policy(bucket(), { nowMs: T0 + 1000, replayRates: rates, replayPacers: first.verdict.replayTokens }), [
      cand(2, { trigger: 'replay', replayId: 'rp1' }),
    ]);
    assert.deepEqual(again.kinds, ['defer:replay_rate']);
    assert.equal(again.verdict.wakeAt, T0 + 60_000);
  });
});

describe('afterLeaseExpiry', () => {
  const cases: Array<[string, Bucket | undefined, number, string]> = [
    ['attempts left', bucket(), 1, 'retry'],
    ['the last attempt of 14', bucket(), DEFAULT_SCHEDULE.maxAttempts!, 'exhausted'],
    ['past the last attempt', bucket({ schedule: { ...DEFAULT_SCHEDULE, maxAttempts: 2 } }), 3, 'exhausted'],
    [
      'a --give-up schedule never exhausts on count',
      bucket({ schedule: { baseMs: 1000, multiplier: 2, capMs: 60_000, jitter: 'none', giveUpMs: 1000 } }),
      99,
      'retry',
    ],
    ['a deleted bucket', undefined, 99, 'retry'],
  ];
  for (const [name, b, attempts, want] of cases) {
    it(`${name} → ${want}`, () => {
      const e = afterLeaseExpiry(b, attempts, T0);
      assert.equal(e.kind, want);
      if (e.kind === 'retry') assert.equal(e.atMs, T0);
    });
  }
});

describe('createClaimDecider: claiming ahead of free slots', () => {
  it('past aheadFrom, deliveries paced by their replay rate are skipped (and counted); plain ones are still claimed', () => {
    const rates = new Map([
      ['rp1', { count: 100, perMs: 1000 }],
      ['rp2', { count: 100, perMs: 1000 }],
    ]);
    const r = (i: number, replay: string) => cand(i, { trigger: 'replay', replayId: replay });
    const { kinds, verdict } = walk(policy(bucket(), { replayRates: rates, aheadFrom: 1 }), [
      r(1, 'rp1'),
      r(2, 'rp2'),
      cand(3),
      r(4, 'rp2'),
    ]);
    // rp2 has its token; only the slot is missing.
    assert.deepEqual(kinds, ['claim', 'skip', 'claim', 'skip']);
    assert.equal(verdict.skippedAhead, 2);
    assert.deepEqual(verdict.deferred, {});
  });

  it('without aheadFrom, every paced delivery with a token is claimed', () => {
    const rates = new Map(['rp1', 'rp2', 'rp3'].map((id) => [id, { count: 100, perMs: 1000 }]));
    const { kinds, verdict } = walk(
      policy(bucket(), { replayRates: rates }),
      ['rp1', 'rp2', 'rp3'].map((id, i) => cand(i, { trigger: 'replay', replayId: id })),
    );
    assert.deepEqual(kinds, ['claim', 'claim', 'claim']);
    assert.equal(verdict.skippedAhead, 0);
  });
});

describe('createClaimDecider: rate tokens taken within a horizon', () => {
  const rated = bucket({ rate: { count: 100, perMs: 1000 }, burst: 1 }); // a token every 10 ms
  const atTimes = (p: ClaimPolicy, cs: ClaimCandidate[]) => {
    const d = createClaimDecider(p);
    const out: Array<number | string> = [];
    for (const c of cs) {
      const k = d.decide(c);
      out.push(k.kind === 'claim' ? k.atMs - T0 : k.kind === 'defer' ? `defer:${k.reason}` : k.kind);
      if (k.kind === 'stop') break;
    }
    return { out, verdict: d.verdict() };
  };
  const cases: Array<[name: string, horizonMs: number | undefined, want: Array<number | string>, wakeAfterT0: number]> = [
    ['no horizon: one token now, then the head waits for the next (10 ms)', undefined, [0, 'defer:rate', 'stop'], 10],
    ['horizon 0 is the same', 0, [0, 'defer:rate', 'stop'], 10],
    [
      'horizon 30: tokens at 0, 10, 20 and 30 ms, each its own time; the next (40) is back at 40 − 30',
      30,
      [0, 10, 20, 30, 'defer:rate', 'stop'],
      10,
    ],
    ['horizon 25: the 30 ms token is past it', 25, [0, 10, 20, 'defer:rate', 'stop'], 5],
  ];
  for (const [name, horizonMs, want, wake] of cases) {
    it(name, () => {
      const { out, verdict } = atTimes(
        policy(rated, horizonMs === undefined ? {} : { horizonMs }),
        [1, 2, 3, 4, 5, 6, 7].map((i) => cand(i)),
      );
      assert.deepEqual(out, want);
      assert.equal(verdict.wakeAt - T0, wake);
      assert.deepEqual(verdict.deferred, { rate: 1 });
    });
  }

  it('the token times follow a pacer left mid-interval, rounded up to whole ms (1000/3 ms apart)', () => {
    const third = bucket({ rate: { count: 3, perMs: 1000 }, burst: 1 });
    const pacer = { ...newPacer(), tokens: { fullAtMs: T0 + 100 } };
    const { out } = atTimes(policy(third, { pacer, horizonMs: 800 }), [cand(1), cand(2), cand(3), cand(4)]);
    assert.deepEqual(out, [100, 434, 767, 'defer:rate']);
  });

  it("a delivery paced by its replay's own rate goes at the bucket token's time, its replay token taken for that time", () => {
    const pacer = { ...newPacer(), tokens: { fullAtMs: T0 + 5 } };
    const r = (i: number, id: string) => cand(i, { replayId: id, trigger: 'replay' });
    const fast = new Map([['rp', { count: 100, perMs: 1000 }]]);
    // The bucket's tokens at 5, 15, 25; the replay's at 100/s fit each of them.
    assert.deepEqual(atTimes(policy(rated, { pacer, horizonMs: 30, replayRates: fast }), [r(1, 'rp'), r(2, 'rp'), cand(3), cand(4)]).out, [
      5,
      15,
      25,
      'defer:rate',
    ]);
    // At 1/s the replay's second token is a second after its first: held by its own rate (the
    // bucket's 15 ms token stays for the plain delivery behind), back a horizon before it.
    const slow = new Map([['rp', { count: 1, perMs: 1000 }]]);
    const { out, verdict } = atTimes(policy(rated, { pacer, horizonMs: 30, replayRates: slow }), [r(1, 'rp'), r(2, 'rp'), cand(3)]);
    assert.deepEqual(out, [5, 'defer:replay_rate', 15]);
    assert.equal(verdict.wakeAt - T0, 1005 - 30);
  });

  it('the retry budget and a Retry-After block are still decided now, and the budget counts the attempt now', () => {
    const blocked = block(newPacer(), T0 + 20);
    assert.deepEqual(atTimes(policy(rated, { pacer: blocked, horizonMs: 50 }), [cand(1)]).out, ['defer:retry_after']);
    const d = createClaimDecider(policy(rated, { horizonMs: 50, nowMs: T0 + 990 }));
    assert.equal(d.decide(cand(1)).kind, 'claim');
    const second = d.decide(cand(2, { attempts: 1, state: 'retrying' }));
    assert.deepEqual(second, { kind: 'claim', atMs: T0 + 1000 });
    // Both counted in the second of T0 + 990 (the claim's), not the second the token falls in.
    const budget = d.verdict().pacer.budget;
    const i = budget.seconds.indexOf(Math.floor((T0 + 990) / 1000));
    assert.deepEqual([budget.firsts[i], budget.retries[i]], [1, 1]);
    assert.equal(budget.seconds.includes(Math.floor((T0 + 1000) / 1000)), false);
  });
});

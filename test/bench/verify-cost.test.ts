import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { describe, it } from 'node:test';
import Stripe from 'stripe';
import {
  type BenchBucket,
  MAX_RATIO,
  medianInterval,
  parseVerifyCostOptions,
  type RoundCpu,
  roundCpu,
  roundOrder,
  schedstatNs,
  stripeSignature,
  summarizeCost,
  type ThreadCpu,
  threadDelta,
} from '../../bench/verify-cost.js';

describe('bench/verify-cost: pure parts', () => {
  it('reads the ns on the CPU from a schedstat line', () => {
    assert.equal(schedstatNs('4581465 62326103 4\n'), 4581465);
    assert.equal(schedstatNs('garbage'), 0);
  });

  it('per-thread deltas: a thread born during the round counts from 0', () => {
    const before: ThreadCpu = new Map([
      ['10', { name: 'node', ns: 1000 }],
      ['11', { name: 'WriterThread', ns: 500 }],
    ]);
    const after: ThreadCpu = new Map([
      ['10', { name: 'node', ns: 4000 }],
      ['11', { name: 'WriterThread', ns: 1500 }],
      ['12', { name: 'libuv-worker', ns: 300 }],
    ]);
    const d = threadDelta(before, after);
    assert.deepEqual(
      [...d.entries()].map(([t, v]) => [t, v.ns]),
      [
        ['10', 3000],
        ['11', 1000],
        ['12', 300],
      ],
    );
    const r = roundCpu('stripe', 4, 100, 10, d, 20);
    assert.deepEqual(r, { bucket: 'stripe', round: 4, requests: 100, mainNs: 30, totalNs: 43, statNs: 200_000 });
  });

  it('cycles through all six orders, so each bucket follows each other one equally often', () => {
    const orders = Array.from({ length: 6 }, (_, i) => roundOrder(i).join(' '));
    assert.equal(new Set(orders).size, 6);
    assert.deepEqual(roundOrder(6), roundOrder(0));
    const follows = new Map<string, number>();
    for (let i = 0; i < 6; i++) {
      const o = roundOrder(i);
      for (let j = 1; j < o.length; j++) follows.set(`${o[j - 1]}>${o[j]}`, (follows.get(`${o[j - 1]}>${o[j]}`) ?? 0) + 1);
    }
    assert.deepEqual([...follows.values()], [2, 2, 2, 2, 2, 2]);
  });

  it('the median interval comes from order statistics of Binomial(n, 1/2)', () => {
    const ints = (n: number) => Array.from({ length: n }, (_, i) => n - i); // n, n−1, …, 1: sorted inside
    // n = 30: P(X ≤ 9) = 0.0214, P(X ≤ 10) = 0.0494, so the 10th smallest and 10th largest (95.7%).
    const m30 = medianInterval(ints(30));
    assert.deepEqual([m30.median, m30.low, m30.high, m30.n], [15.5, 10, 21, 30]);
    assert.ok(Math.abs(m30.coverage - 0.9572) < 1e-4, String(m30.coverage));
    // n = 9: the 2nd and 8th (P(X ≤ 1) = 10/512, coverage 96.1%); the 3rd and 7th would give 82%.
    const m9 = medianInterval(ints(9));
    assert.deepEqual([m9.median, m9.low, m9.high], [5, 2, 8]);
    assert.ok(Math.abs(m9.coverage - (1 - 20 / 512)) < 1e-12);
    // n = 5: even the whole range covers only 1 − 2/32 = 93.75%, and says so.
    const m5 = medianInterval([3, 1, 2, 5, 4]);
    assert.deepEqual([m5.median, m5.low, m5.high, m5.coverage], [3, 1, 5, 0.9375]);
    assert.equal(medianInterval([]).n, 0);
    assert.ok(Number.isNaN(medianInterval([]).median));
  });

  it('pairs buckets within a round, and judges the budget on the whole interval', () => {
    const r = (bucket: BenchBucket, round: number, totalNs: number): RoundCpu => ({
      bucket,
      round,
      requests: 1,
      mainNs: totalNs / 2,
      totalNs,
      statNs: totalNs,
    });
    // Rounds drift from 100 to 290 ns; within each, stripe is 1.02 × plain and control 1.00 ×.
    const rounds: RoundCpu[] = [];
    for (let i = 0; i < 20; i++) {
      const base = 100 + i * 10;
      rounds.push(r('plain', i, base), r('stripe', i, base * 1.02), r('control', i, base));
    }
    const s = summarizeCost(rounds);
    assert.equal(s.paired.stripe.n, 20);
    assert.ok(Math.abs(s.paired.stripe.median - 1.02) < 1e-9);
    assert.ok(Math.abs(s.paired.control.median - 1) < 1e-9);
    assert.equal(s.budget, 'met');
    assert.equal(s.plain.totalNs, 195);
    assert.ok(Math.abs(s.ratio.total - 1.02) < 1e-9);

    // Every round over the budget: missed. Half over, half under: the interval straddles it.
    const over = rounds.map((x) => (x.bucket === 'stripe' ? { ...x, totalNs: (x.totalNs / 1.02) * 1.08 } : x));
    assert.equal(summarizeCost(over).budget, 'missed');
    const mixed = rounds.map((x) => (x.bucket === 'stripe' ? { ...x, totalNs: (x.totalNs / 1.02) * (x.round % 2 ? 1.08 : 1.02) } : x));
    assert.equal(summarizeCost(mixed).budget, 'not settled');
    // A round missing its plain measurement gives no pair.
    assert.equal(summarizeCost(rounds.filter((x) => !(x.round === 3 && x.bucket === 'plain'))).paired.stripe.n, 19);
    assert.ok(MAX_RATIO === 1.05);
  });

  it("signs as Stripe's own library does", () => {
    const body = '{"id":"evt_1"}';
    const mine = stripeSignature(body, 'whsec_x', 1_700_000_000);
    assert.equal(mine, Stripe.webhooks.generateTestHeaderString({ payload: body, secret: 'whsec_x', timestamp: 1_700_000_000 }));
    assert.ok(mine.endsWith(createHmac('sha256', 'whsec_x').update(`1700000000.${body}`).digest('hex')));
  });

  it('options', () => {
    assert.deepEqual(parseVerifyCostOptions([]), { rounds: 100, requests: 2000, destination: null, json: false });
    assert.deepEqual(parseVerifyCostOptions(['--rounds', '3', '--requests', '500', '--json']), {
      rounds: 3,
      requests: 500,
      destination: null,
      json: true,
    });
    assert.equal(parseVerifyCostOptions(['--destination', 'https://consumer.example/hook']).destination, 'https://consumer.example/hook');
    assert.throws(() => parseVerifyCostOptions(['--destination', 'consumer.example']), /--destination/);
    assert.throws(() => parseVerifyCostOptions(['--destination', 'ftp://consumer.example/']), /--destination/);
    assert.throws(() => parseVerifyCostOptions(['--rounds', '0']), /--rounds/);
  });
});

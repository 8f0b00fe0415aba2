import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { describe, it } from 'node:test';
import Stripe from 'stripe';
import {
  MAX_RATIO,
  parseVerifyCostOptions,
  type RoundCpu,
  roundCpu,
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
    const r = roundCpu('stripe', 100, 10, d, 20);
    assert.deepEqual(r, { bucket: 'stripe', requests: 100, mainNs: 30, totalNs: 43, statNs: 200_000 });
  });

  it('the ratio is of medians over rounds, and the budget is on all threads', () => {
    const r = (bucket: RoundCpu['bucket'], totalNs: number, mainNs = totalNs / 2): RoundCpu => ({
      bucket,
      requests: 1,
      mainNs,
      totalNs,
      statNs: totalNs,
    });
    const s = summarizeCost([r('plain', 100), r('stripe', 104), r('plain', 90), r('stripe', 150), r('plain', 110), r('stripe', 103)]);
    assert.equal(s.plain.totalNs, 100);
    assert.equal(s.stripe.totalNs, 104);
    assert.equal(s.ratio.total, 1.04);
    assert.equal(s.withinBudget, true);
    assert.equal(summarizeCost([r('plain', 100), r('stripe', 100 * MAX_RATIO + 1)]).withinBudget, false);
  });

  it("signs as Stripe's own library does", () => {
    const body = '{"id":"evt_1"}';
    const mine = stripeSignature(body, 'whsec_x', 1_700_000_000);
    assert.equal(mine, Stripe.webhooks.generateTestHeaderString({ payload: body, secret: 'whsec_x', timestamp: 1_700_000_000 }));
    assert.ok(mine.endsWith(createHmac('sha256', 'whsec_x').update(`1700000000.${body}`).digest('hex')));
  });

  it('options', () => {
    assert.deepEqual(parseVerifyCostOptions([]), { rounds: 7, requests: 4000, json: false });
    assert.deepEqual(parseVerifyCostOptions(['--rounds', '3', '--requests', '500', '--json']), { rounds: 3, requests: 500, json: true });
    assert.throws(() => parseVerifyCostOptions(['--rounds', '0']), /--rounds/);
  });
});

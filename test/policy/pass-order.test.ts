import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { passOrder } from '../../src/policy/pass-order.js';

describe('passOrder: every due bucket is visited, in turn when there are more than a pass takes', () => {
  const cases: Array<
    [names: string[], after: string | undefined, max: number, order: string[], resumeAfter: string | undefined, why: string]
  > = [
    [[], undefined, 3, [], undefined, 'nothing due'],
    [['c', 'a', 'b', 'a'], undefined, 3, ['a', 'b', 'c'], undefined, 'name order, each once'],
    [['a', 'b', 'c'], 'b', 3, ['c', 'a', 'b'], undefined, 'all fit: every one, starting after the cursor'],
    [['a', 'b', 'c', 'd', 'e'], undefined, 2, ['a', 'b'], 'b', 'more than a pass takes: the first two'],
    [['a', 'b', 'c', 'd', 'e'], 'b', 2, ['c', 'd'], 'd', 'the next pass goes on from there'],
    [['a', 'b', 'c', 'd', 'e'], 'd', 2, ['e', 'a'], 'a', 'and wraps around'],
    [['a', 'c', 'e'], 'b', 2, ['c', 'e'], 'e', 'the cursor need not be due any more'],
    [['a', 'b'], 'z', 1, ['a'], 'a', 'a cursor past the end starts over'],
  ];
  for (const [names, after, max, order, resumeAfter, why] of cases) {
    it(why, () => {
      const r = passOrder(names, after, max);
      assert.deepEqual(r.order, order);
      assert.equal(r.resumeAfter, resumeAfter);
      assert.equal(r.more, resumeAfter !== undefined);
    });
  }

  it('with 1,000 due buckets and 7 a pass, each is visited within ceil(1000 / 7) passes', () => {
    const names = Array.from({ length: 1000 }, (_, i) => `b${String(i).padStart(4, '0')}`);
    const seen = new Set<string>();
    let after: string | undefined;
    for (let pass = 0; pass < Math.ceil(1000 / 7); pass++) {
      const r = passOrder(names, after, 7);
      for (const n of r.order) seen.add(n);
      after = r.resumeAfter;
    }
    assert.equal(seen.size, 1000);
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatAge, parsePruneStates, pruneCutoff } from '../../src/retention/rules.js';

describe('parsePruneStates', () => {
  const ok: Array<[string, string[]]> = [
    ['delivered', ['delivered']],
    ['failed,exhausted', ['failed', 'exhausted']],
    ['none, delivered ,none', ['delivered', 'none']],
    ['EXHAUSTED', ['exhausted']],
  ];
  for (const [text, states] of ok)
    it(`${JSON.stringify(text)} → ${states.join(',')}`, () => assert.deepEqual(parsePruneStates(text), { ok: true, states }));

  const bad: Array<[string, RegExp]> = [
    ['pending', /pending requests are never pruned/],
    ['delivered,retrying', /retrying requests are never pruned/],
    ['delivering', /never pruned/],
    ['held', /held requests are never pruned/],
    ['superseded', /unknown state "superseded"/],
    ['', /name one or more/],
    [',', /name one or more/],
  ];
  for (const [text, re] of bad) {
    it(`${JSON.stringify(text)} is refused`, () => {
      const r = parsePruneStates(text);
      assert.equal(r.ok, false);
      assert.match((r as { message: string }).message, re);
    });
  }
});

describe('pruneCutoff', () => {
  it('is now minus the age', () => assert.equal(pruneCutoff(1_000_000, 250_000), 750_000));
});

describe('formatAge', () => {
  const cases: Array<[number, string]> = [
    [30 * 86_400_000, '30d'],
    [86_400_000, '1d'],
    [36 * 3_600_000, '36h'],
    [90 * 60_000, '1h30m'],
    [12 * 3_600_000, '12h'],
  ];
  for (const [ms, text] of cases) it(`${ms} → ${text}`, () => assert.equal(formatAge(ms), text));
});

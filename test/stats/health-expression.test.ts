import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { evaluate, ExpressionError, fieldsOf, parseExpression } from '../../src/stats/health-expression.js';
import { isStatsField, NUMERIC_FIELDS } from '../../src/stats/stats.js';

const parse = (s: string) => parseExpression(s, { isField: isStatsField, fieldNames: NUMERIC_FIELDS });

const values: Record<string, number | null> = {
  success_rate: 0.95,
  exhausted: 3,
  failed: 0,
  pending: 10,
  attempts: 20,
  attempt_success_rate: null,
  latency_p99_ms: 1200,
  'rejected.body_too_large': 2,
};
const lookup = (f: string) => {
  if (!(f in values)) throw new Error(`test looked up ${f}`);
  return values[f]!;
};
const holds = (s: string) => evaluate(parse(s), lookup).holds;

describe('health expressions: evaluation', () => {
  const cases: Array<[string, boolean]> = [
    ['success_rate < 0.99', true],
    ['success_rate < 0.9', false],
    ['success_rate <= 0.95', true],
    ['success_rate >= 0.95', true],
    ['success_rate > 0.95', false],
    ['exhausted == 3', true],
    ['exhausted != 3', false],
    ['0 < exhausted', true],
    ['exhausted > -1', true],
    ['latency_p99_ms > 1e3', true],
    ['success_rate < .96', true],
    ['success_rate < 0.99 || exhausted > 0', true],
    ['success_rate < 0.9 || exhausted > 0', true],
    ['success_rate < 0.9 || exhausted > 5', false],
    ['success_rate < 0.99 && exhausted > 5', false],
    ['success_rate < 0.99 && exhausted > 0', true],
    // && binds tighter than ||
    ['failed > 0 && pending > 0 || exhausted > 0', true],
    ['failed > 0 && (pending > 0 || exhausted > 0)', false],
    ['!(failed > 0)', true],
    ['!failed > 0', true],
    ['!!(failed > 0)', false],
    ['!(success_rate < 0.99 || exhausted > 0)', false],
    ['((exhausted > 0))', true],
    ['rejected.body_too_large >= 2', true],
    // null: ordering comparisons are false, == null is true only for null
    ['attempt_success_rate < 0.5', false],
    ['attempt_success_rate >= 0.5', false],
    ['!(attempt_success_rate >= 0.5)', true],
    ['attempt_success_rate == null', true],
    ['attempt_success_rate != null', false],
    ['success_rate == null', false],
    ['null != success_rate', true],
    ['  exhausted>0&&pending<=10  ', true],
  ];
  for (const [expr, want] of cases) it(`${expr} → ${want}`, () => assert.equal(holds(expr), want));
});

describe('health expressions: what tripped', () => {
  it('reports every true side of an || with the values it read', () => {
    const r = evaluate(parse('success_rate < 0.99 || exhausted > 0 || failed > 0'), lookup);
    assert.equal(r.holds, true);
    assert.deepEqual(r.reasons, [
      { condition: 'success_rate < 0.99', result: true, values: { success_rate: 0.95 } },
      { condition: 'exhausted > 0', result: true, values: { exhausted: 3 } },
    ]);
  });

  it('reports both sides of a true &&', () => {
    const r = evaluate(parse('exhausted > 0 && pending >= 10'), lookup);
    assert.deepEqual(
      r.reasons.map((x) => x.condition),
      ['exhausted > 0', 'pending >= 10'],
    );
  });

  it('under !, reports the comparison that was false, as false', () => {
    const r = evaluate(parse('!(attempts > 100) && exhausted > 0'), lookup);
    assert.equal(r.holds, true);
    assert.deepEqual(r.reasons, [
      { condition: 'attempts > 100', result: false, values: { attempts: 20 } },
      { condition: 'exhausted > 0', result: true, values: { exhausted: 3 } },
    ]);
  });

  it('when it does not hold, says which comparisons kept it from holding', () => {
    const r = evaluate(parse('failed > 0 || success_rate < 0.5'), lookup);
    assert.equal(r.holds, false);
    assert.deepEqual(
      r.reasons.map((x) => [x.condition, x.result]),
      [
        ['failed > 0', false],
        ['success_rate < 0.5', false],
      ],
    );
  });

  it('lists the fields an expression reads, once each', () => {
    assert.deepEqual(fieldsOf(parse('exhausted > 0 || (failed > 1 && exhausted < 9) || null == success_rate')), [
      'exhausted',
      'failed',
      'success_rate',
    ]);
  });
});

describe('health expressions: errors', () => {
  const cases: Array<[string, RegExp, number]> = [
    ['', /empty expression/, 0],
    ['   ', /empty expression/, 0],
    ['sucess_rate < 0.99', /unknown field "sucess_rate" \(did you mean success_rate\?\)/, 0],
    ['exhausted > 0 || bytes > 1', /unknown field "bytes"/, 17],
    ['rejected > 0', /rejected is counted by reason: use rejected_total or rejected\.<reason>/, 0],
    ['Exhausted > 0', /field names are lower case/, 0],
    ['exhausted = 0', /"=" is not a comparison: use "=="/, 10],
    ['exhausted > 0 & failed > 0', /use "&&"/, 14],
    ['exhausted > 0 | failed > 0', /use "\|\|"/, 14],
    ['exhausted', /expected a comparison .* after "exhausted", found the end \(compare it: exhausted > 0\)/, 9],
    ['exhausted >', /expected a field name or a number, found the end/, 11],
    ['exhausted > > 1', /expected a field name or a number, found ">"/, 12],
    ['(exhausted > 0', /expected "\)" to close the "\(" at column 1, found the end/, 14],
    ['exhausted > 0)', /unexpected a "\)" without its "\("/, 13],
    ['exhausted > 0 failed > 0', /unexpected "failed": expected && or \|\| between conditions/, 14],
    ['1 < 2', /needs a field on at least one side/, 0],
    ['success_rate < null', /null can only be compared with == or !=/, 13],
    ['latency_p99_ms > 5s', /"5s" is not a number/, 17],
    ['exhausted > 0 ; failed > 0', /unexpected character ";"/, 14],
    ['exhausted > 0 &&', /expected a field name or a number, found the end/, 16],
    ['&& exhausted > 0', /expected a field name or a number, found "&&"/, 0],
  ];
  for (const [src, re, pos] of cases) {
    it(`${JSON.stringify(src)}: ${re.source}`, () => {
      assert.throws(
        () => parse(src),
        (e: unknown) => {
          assert.ok(e instanceof ExpressionError);
          assert.match(e.message, re);
          assert.equal(e.position, pos);
          return true;
        },
      );
    });
  }

  it('describes the error with a caret under the position', () => {
    try {
      parse('exhausted > 0 || sucess_rate < 1');
      assert.fail('should throw');
    } catch (e) {
      assert.ok(e instanceof ExpressionError);
      const lines = e.describe().split('\n');
      assert.equal(lines[1], '  exhausted > 0 || sucess_rate < 1');
      assert.equal(lines[2], `  ${' '.repeat(17)}^`);
      assert.match(lines[0]!, /at column 18/);
    }
  });
});

/**
 * `health --fail-on` expressions: a tokenizer and a recursive-descent parser (never eval), and an
 * evaluator that also says which comparisons made the result what it is. Pure.
 *
 * Grammar (loosest binding first):
 *
 *   expression := or
 *   or         := and ( "||" and )*
 *   and        := unary ( "&&" unary )*
 *   unary      := "!" unary | "(" expression ")" | comparison
 *   comparison := operand ( "<" | "<=" | ">" | ">=" | "==" | "!=" ) operand
 *   operand    := number | field | "null"
 *   number     := "-"? digits ( "." digits )? | "-"? "." digits, with an optional exponent e±digits
 *   field      := [a-z_][a-z0-9_]* ( "." [a-z0-9_]+ )?
 *
 * Null (a rate with nothing to divide, a percentile with no samples): `<`, `<=`, `>`, `>=` with a
 * null side are false; `==` is true only when both sides are null, `!=` is its negation. So
 * `success_rate < 0.99` does not trip when nothing settled, and `success_rate == null` asks for it.
 */

export type CompareOp = '<' | '<=' | '>' | '>=' | '==' | '!=';

export type Operand = { kind: 'number'; value: number } | { kind: 'field'; name: string } | { kind: 'null' };

export type Expr =
  | { kind: 'compare'; op: CompareOp; left: Operand; right: Operand /** The comparison as written. */; text: string }
  | { kind: 'not'; expr: Expr }
  | { kind: 'and' | 'or'; left: Expr; right: Expr };

/** A syntax error or an unknown field, at a 0-based character position in the source. */
export class ExpressionError extends Error {
  readonly position: number;
  readonly source: string;
  constructor(message: string, source: string, position: number) {
    super(message);
    this.name = 'ExpressionError';
    this.source = source;
    this.position = position;
  }
  /** The message, the expression and a caret under the position. */
  describe(): string {
    return `${this.message} (at column ${this.position + 1})\n  ${this.source}\n  ${' '.repeat(this.position)}^`;
  }
}

type Token =
  | { type: 'number'; value: number; pos: number; end: number }
  | { type: 'field'; name: string; pos: number; end: number }
  | { type: 'null'; pos: number; end: number }
  | { type: 'op'; op: CompareOp; pos: number; end: number }
  | { type: '&&' | '||' | '!' | '(' | ')'; pos: number; end: number }
  | { type: 'end'; pos: number; end: number };

const NUMBER = /-?(?:\d+(?:\.\d+)?|\.\d+)(?:e[+-]?\d+)?/y;
const FIELD = /[a-z_][a-z0-9_]*(?:\.[a-z0-9_]+)?/y;

export function tokenize(source: string): Token[] {
  const tokens: Token[] = [];
  let i = 0;
  const at = (re: RegExp): string | undefined => {
    re.lastIndex = i;
    return re.exec(source)?.[0];
  };
  while (i < source.length) {
    const c = source[i]!;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') {
      i++;
      continue;
    }
    const two = source.slice(i, i + 2);
    if (two === '&&' || two === '||') {
      tokens.push({ type: two, pos: i, end: i + 2 });
      i += 2;
      continue;
    }
    if (two === '<=' || two === '>=' || two === '==' || two === '!=') {
      tokens.push({ type: 'op', op: two, pos: i, end: i + 2 });
      i += 2;
      continue;
    }
    if (c === '<' || c === '>') {
      tokens.push({ type: 'op', op: c, pos: i, end: i + 1 });
      i++;
      continue;
    }
    if (c === '!' || c === '(' || c === ')') {
      tokens.push({ type: c, pos: i, end: i + 1 });
      i++;
      continue;
    }
    if (c === '=') throw new ExpressionError('"=" is not a comparison: use "=="', source, i);
    if (c === '&') throw new ExpressionError('"&" is not an operator: use "&&"', source, i);
    if (c === '|') throw new ExpressionError('"|" is not an operator: use "||"', source, i);
    const num = at(NUMBER);
    if (num !== undefined) {
      // `5m` or `0.9x`: a number glued to letters is a typo, not a number and a field.
      if (/[a-z_.]/i.test(source[i + num.length] ?? '')) {
        throw new ExpressionError(
          `${JSON.stringify(source.slice(i).match(/^[-\w.]+/)![0])} is not a number (plain numbers only, like 0.99 or 300)`,
          source,
          i,
        );
      }
      tokens.push({ type: 'number', value: Number(num), pos: i, end: i + num.length });
      i += num.length;
      continue;
    }
    const word = at(FIELD);
    if (word !== undefined) {
      if (/[A-Z]/.test(source[i + word.length] ?? '')) throw new ExpressionError('field names are lower case', source, i);
      tokens.push(word === 'null' ? { type: 'null', pos: i, end: i + 4 } : { type: 'field', name: word, pos: i, end: i + word.length });
      i += word.length;
      continue;
    }
    if (/[A-Z]/.test(c)) throw new ExpressionError('field names are lower case', source, i);
    throw new ExpressionError(`unexpected character ${JSON.stringify(c)}`, source, i);
  }
  tokens.push({ type: 'end', pos: source.length, end: source.length });
  return tokens;
}

export interface ParseOptions {
  /** Whether a field name exists; unknown ones are errors at parse time, before any data is read. */
  isField: (name: string) => boolean;
  /** Known field names, for the "did you mean" hint. */
  fieldNames?: readonly string[];
}

export function parseExpression(source: string, options: ParseOptions): Expr {
  const tokens = tokenize(source);
  let k = 0;
  const peek = () => tokens[k]!;
  const next = () => tokens[k++]!;
  const describe = (t: Token): string => (t.type === 'end' ? 'the end' : JSON.stringify(source.slice(t.pos, t.end)));

  if (peek().type === 'end') throw new ExpressionError('empty expression', source, 0);

  const or = (): Expr => {
    let left = and();
    while (peek().type === '||') {
      next();
      left = { kind: 'or', left, right: and() };
    }
    return left;
  };
  const and = (): Expr => {
    let left = unary();
    while (peek().type === '&&') {
      next();
      left = { kind: 'and', left, right: unary() };
    }
    return left;
  };
  const unary = (): Expr => {
    const t = peek();
    if (t.type === '!') {
      next();
      return { kind: 'not', expr: unary() };
    }
    if (t.type === '(') {
      next();
      const inner = or();
      const close = next();
      if (close.type !== ')')
        throw new ExpressionError(`expected ")" to close the "(" at column ${t.pos + 1}, found ${describe(close)}`, source, close.pos);
      return inner;
    }
    return comparison();
  };
  const operand = (): Operand & { pos: number; end: number } => {
    const t = next();
    if (t.type === 'number') return { kind: 'number', value: t.value, pos: t.pos, end: t.end };
    if (t.type === 'null') return { kind: 'null', pos: t.pos, end: t.end };
    if (t.type === 'field') {
      if (!options.isField(t.name)) throw new ExpressionError(unknownField(t.name, options.fieldNames ?? []), source, t.pos);
      return { kind: 'field', name: t.name, pos: t.pos, end: t.end };
    }
    throw new ExpressionError(`expected a field name or a number, found ${describe(t)}`, source, t.pos);
  };
  const comparison = (): Expr => {
    const left = operand();
    const op = next();
    if (op.type !== 'op') {
      const hint = left.kind === 'field' ? ` (compare it: ${left.name} > 0)` : '';
      throw new ExpressionError(
        `expected a comparison (<, <=, >, >=, ==, !=) after ${JSON.stringify(source.slice(left.pos, left.end))}, found ${describe(op)}${hint}`,
        source,
        op.pos,
      );
    }
    const right = operand();
    if (left.kind !== 'field' && right.kind !== 'field') {
      throw new ExpressionError('a comparison needs a field on at least one side', source, left.pos);
    }
    if ((left.kind === 'null' || right.kind === 'null') && op.op !== '==' && op.op !== '!=') {
      throw new ExpressionError(`null can only be compared with == or !=`, source, op.pos);
    }
    const strip = ({ pos: _p, end: _e, ...o }: Operand & { pos: number; end: number }): Operand => o;
    return { kind: 'compare', op: op.op, left: strip(left), right: strip(right), text: source.slice(left.pos, right.end) };
  };

  const expr = or();
  const rest = peek();
  if (rest.type !== 'end') {
    const what = rest.type === ')' ? 'a ")" without its "("' : `${describe(rest)}: expected && or || between conditions`;
    throw new ExpressionError(`unexpected ${what}`, source, rest.pos);
  }
  return expr;
}

function unknownField(name: string, known: readonly string[]): string {
  if (name === 'rejected') return 'rejected is counted by reason: use rejected_total or rejected.<reason>, like rejected.body_too_large';
  if (name === 'deferred' || name.startsWith('deferred.'))
    return 'deferred is counted by reason: use deferred_total or deferred.<reason>, one of rate, retry_budget, retry_after, replay_rate';
  const close = known.filter((f) => editDistance(f, name) <= 2).slice(0, 3);
  const hint = close.length > 0 ? ` (did you mean ${close.join(', ')}?)` : '';
  return `unknown field ${JSON.stringify(name)}${hint}; fields: ${known.join(', ')}, rejected.<reason>, deferred.<reason>`;
}

function editDistance(a: string, b: string): number {
  const d = Array.from({ length: a.length + 1 }, (_, i) => [i, ...new Array<number>(b.length).fill(0)]);
  for (let j = 1; j <= b.length; j++) d[0]![j] = j;
  for (let i = 1; i <= a.length; i++) {
    for (let j = 1; j <= b.length; j++) {
      d[i]![j] = Math.min(d[i - 1]![j]! + 1, d[i]![j - 1]! + 1, d[i - 1]![j - 1]! + (a[i - 1] === b[j - 1] ? 0 : 1));
    }
  }
  return d[a.length]![b.length]!;
}

/** A comparison that decided the result: as written, its own truth value, and the field values it read. */
export interface Reason {
  condition: string;
  result: boolean;
  values: Record<string, number | null>;
}

export interface Evaluation {
  holds: boolean;
  /**
   * The comparisons that make `holds` what it is: when it holds, the ones that were true (or, under
   * a `!`, false) and carried it; when it does not, the ones that kept it from holding.
   */
  reasons: Reason[];
}

export function compare(op: CompareOp, a: number | null, b: number | null): boolean {
  if (op === '==') return a === b;
  if (op === '!=') return a !== b;
  if (a === null || b === null) return false;
  switch (op) {
    case '<':
      return a < b;
    case '<=':
      return a <= b;
    case '>':
      return a > b;
    case '>=':
      return a >= b;
  }
}

/** Evaluates every branch (no short-circuit: it has no side effects, and all true conditions are worth reporting). */
export function evaluate(expr: Expr, lookup: (field: string) => number | null): Evaluation {
  const value = (o: Operand): number | null => (o.kind === 'number' ? o.value : o.kind === 'null' ? null : lookup(o.name));
  const walk = (e: Expr): Evaluation => {
    switch (e.kind) {
      case 'compare': {
        const values: Record<string, number | null> = {};
        for (const o of [e.left, e.right]) if (o.kind === 'field') values[o.name] = lookup(o.name);
        const result = compare(e.op, value(e.left), value(e.right));
        return { holds: result, reasons: [{ condition: e.text, result, values }] };
      }
      case 'not': {
        const inner = walk(e.expr);
        return { holds: !inner.holds, reasons: inner.reasons };
      }
      case 'and':
      case 'or': {
        const l = walk(e.left);
        const r = walk(e.right);
        const holds = e.kind === 'and' ? l.holds && r.holds : l.holds || r.holds;
        // The sides that agree with the result explain it.
        const reasons = [...(l.holds === holds ? l.reasons : []), ...(r.holds === holds ? r.reasons : [])];
        return { holds, reasons };
      }
    }
  };
  return walk(expr);
}

/** The field names an expression reads, in order of first use. */
export function fieldsOf(expr: Expr): string[] {
  const out = new Set<string>();
  const walk = (e: Expr): void => {
    if (e.kind === 'compare') {
      for (const o of [e.left, e.right]) if (o.kind === 'field') out.add(o.name);
    } else if (e.kind === 'not') walk(e.expr);
    else {
      walk(e.left);
      walk(e.right);
    }
  };
  walk(expr);
  return [...out];
}

/**
 * `health`: an expression over the stats fields (and the process figures), evaluated against a
 * stats report. Shared by `hookbucket health` and the admin API's GET /health, so that both accept
 * the same expressions and answer with the same JSON.
 */
import { iso } from '../json/iso.js';
import { AppError } from '../shared/errors.js';
import { evaluate, ExpressionError, fieldsOf, parseExpression, type Expr, type Reason } from './health-expression.js';
import { stuckJson, workerFigures, type StatsReport } from './stats-report.js';
import { fieldValue, isStatsField, NUMERIC_FIELDS } from './stats.js';

/** The process figures (stats' `processes`), usable in an expression beside the stats fields. */
const WORKER_FIELDS = ['workers_alive', 'delivering_dead_worker', 'stuck_buckets'] as const;
const isWorkerField = (n: string): n is (typeof WORKER_FIELDS)[number] => (WORKER_FIELDS as readonly string[]).includes(n);

/** Parses an expression before any read; a syntax error or unknown field is invalid_option, its message led by `label`. */
export function parseFailOn(source: string, label = '--fail-on'): Expr {
  try {
    return parseExpression(source, {
      isField: (n) => isStatsField(n) || isWorkerField(n),
      fieldNames: [...NUMERIC_FIELDS, ...WORKER_FIELDS],
    });
  } catch (e) {
    if (e instanceof ExpressionError) throw new AppError('invalid_option', `${label}: ${e.describe()}`, { cause: e });
    throw e;
  }
}

export interface HealthResult {
  /** The expression holds: unhealthy. */
  holds: boolean;
  /** The expression alone holds (holds may be true for a stuck bucket while this is false). */
  expressionHolds: boolean;
  /** The comparisons that made it hold (empty when healthy). */
  tripped: Reason[];
  /** Each field the expression names, with its value. */
  lookup: (field: string) => number | null;
}

/** The condition health adds to every expression: a stuck bucket (timeout not below the lease) is never healthy. */
export const STUCK_CONDITION = 'stuck_buckets > 0';

/**
 * Evaluates the expression; a bucket in scope that is stuck (report.stuck) makes the result
 * unhealthy whatever the expression says, with `stuck_buckets > 0` among the tripped conditions.
 */
export function checkHealth(report: StatsReport, expr: Expr): HealthResult {
  const workers = { ...workerFigures(report.processes), stuck_buckets: report.stuck.length };
  const lookup = (name: string) => (isWorkerField(name) ? workers[name] : fieldValue(report.fields, name));
  const result = evaluate(expr, lookup);
  const tripped = result.holds ? [...result.reasons] : [];
  if (report.stuck.length > 0) tripped.push({ condition: STUCK_CONDITION, result: true, values: { stuck_buckets: report.stuck.length } });
  return { holds: result.holds || report.stuck.length > 0, expressionHolds: result.holds, tripped, lookup };
}

/** Stable JSON (`health --json`): `{ healthy, expression, bucket, window_ms, since, until, tripped, values }`. */
export function healthJson(report: StatsReport, expr: Expr, source: string, result: HealthResult) {
  return {
    healthy: !result.holds,
    expression: source,
    bucket: report.bucket,
    window_ms: report.windowMs,
    since: iso(report.sinceMs),
    until: iso(report.untilMs),
    tripped: result.tripped,
    stuck: report.stuck.map(stuckJson),
    values: Object.fromEntries(fieldsOf(expr).map((f) => [f, result.lookup(f)])),
  };
}

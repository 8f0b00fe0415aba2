import { Command } from 'commander';
import { ExitCode, ExitWith } from '../../shared/errors.js';
import { fieldsOf, type Reason } from '../../stats/health-expression.js';
import { checkHealth, healthJson, parseFailOn } from '../../stats/health-report.js';
import { configFor, withStore } from '../context.js';
import { positiveDurationMsArg } from '../drain-options.js';
import { print, printJson, type CliIo } from '../io.js';
import { bucketNameArg } from '../parsers.js';
import { DEFAULT_WINDOW_MS, formatNumber, reportOf, scopeText, stuckLines } from './stats.js';

export { parseFailOn };

function reasonText(r: Reason): string {
  const values = Object.entries(r.values)
    .map(([k, v]) => `${k} = ${formatNumber(v)}`)
    .join(', ');
  return `${r.condition}${r.result ? '' : ' is false'}${values ? `    (${values})` : ''}`;
}

export function makeHealthCommand(io: CliIo): Command {
  return new Command('health')
    .description('exit 3 when an expression over the stats fields holds (a guard for deploy pipelines), 0 when it does not')
    .argument('[bucket]', 'one bucket (default: every bucket together)', bucketNameArg)
    .requiredOption('--fail-on <expression>', 'unhealthy when this holds, e.g. "success_rate < 0.99 || exhausted > 0"')
    .option('--window <duration>', 'the window for the rates and latency (default 1h)', positiveDurationMsArg)
    .option('--json', 'print JSON: { healthy, expression, tripped: [{ condition, result, values }], values, ... }')
    .addHelpText(
      'after',
      `
An expression compares stats fields (README "stats"; also rejected.<reason>) with numbers or null,
joined by && and || and negated with !, grouped with parentheses. Comparisons with a null field
(a rate with nothing settled, a latency with no attempts) are false; "success_rate == null" tests
for it. It prints the comparisons that tripped, with their values.

A bucket whose attempt timeout is not shorter than the worker's lease is "stuck" (the worker
skips it; nothing of it is delivered): health is then unhealthy whatever the expression says,
with "stuck_buckets > 0" among the tripped conditions. stuck_buckets may be used in expressions.

Exit codes: 0 healthy, 3 the expression holds or a bucket is stuck, 2 a bad expression, 4 unknown bucket.

Examples:
  $ hookbucket health stripe --fail-on "success_rate < 0.99 || exhausted > 0"
  $ hookbucket health --window 15m --fail-on "oldest_pending_age_s > 600 || latency_p99_ms > 5000"
  $ hookbucket health stripe --fail-on "received_in_window == 0" --window 10m
  $ hookbucket health --fail-on "workers_alive < 2 || delivering_dead_worker > 0"
  $ hookbucket health stripe --fail-on "!(attempt_success_rate >= 0.5) && attempts > 20" --json`,
    )
    .action(async (bucket: string | undefined, opts: { failOn: string; window?: number; json?: boolean }, cmd: Command) => {
      const expr = parseFailOn(opts.failOn);
      const report = await withStore(cmd, io, (store) =>
        reportOf(store, bucket, opts.window ?? DEFAULT_WINDOW_MS, configFor(cmd, io).leaseMs),
      );
      const result = checkHealth(report, expr);
      const { tripped, lookup } = result;
      if (opts.json) {
        printJson(io, healthJson(report, expr, opts.failOn, result));
      } else if (result.holds) {
        print(
          io,
          [
            `unhealthy: ${opts.failOn}${result.expressionHolds ? '' : ' does not hold, but a bucket is stuck'}`,
            `  ${scopeText(report)}`,
            'tripped:',
            ...tripped.map((r) => `  ${reasonText(r)}`),
            ...stuckLines(report.stuck).map((l) => `  ${l}`),
          ].join('\n'),
        );
      } else {
        const values = fieldsOf(expr)
          .map((f) => `${f} = ${formatNumber(lookup(f))}`)
          .join(', ');
        print(io, [`healthy: ${opts.failOn} does not hold`, `  ${scopeText(report)}`, `  ${values}`].join('\n'));
      }
      if (result.holds) throw new ExitWith(ExitCode.checkFailed);
    });
}

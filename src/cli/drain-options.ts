/**
 * The delivery-policy options shared by `schedule`, `simulate` and `bucket create|update`:
 * schedule, jitter, retry budget and rate, plus the bucket-only ones (concurrency, timeout,
 * retried outcomes, forwarding). Each parser throws InvalidArgumentError (exit 2); the arithmetic
 * behind them lives in src/drain.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { formatDuration, parseDuration, parseInteger } from '../config/units.js';
import { DEFAULT_RETRY_ON, formatRetryOn, parseRetryOn, RETRY_ON_WORDS, type RetryOn } from '../policy/classify.js';
import { DEFAULT_RETRY_BUDGET, type RetryBudgetConfig } from '../policy/retry-budget.js';
import { DEFAULT_SCHEDULE, JITTERS, MAX_ATTEMPTS, scheduleProblem, type Jitter, type Schedule } from '../policy/schedule.js';
import { DEFAULT_BURST, parseRate, type Rate, type TokenBucketConfig } from '../policy/token-bucket.js';
import { AppError } from '../shared/errors.js';
import { DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT_MS } from '../store/bucket-defaults.js';
import type { DrainSettings } from '../store/store.js';
import { forwardHeaderArg, integerArg } from './parsers.js';

/** A duration in ms: `30s`, `1m30s`, `500ms`. */
export function durationMsArg(value: string): number {
  const ms = parseDuration(value);
  if (ms === undefined) throw new InvalidArgumentError('a duration like 30s, 1m30s, 3h or 500ms');
  return ms;
}

export function positiveDurationMsArg(value: string): number {
  const ms = durationMsArg(value);
  if (ms < 1) throw new InvalidArgumentError('a duration above zero, like 30s');
  return ms;
}

/** `--cap 3h`, or `none` for an uncapped schedule. */
export function capArg(value: string): number {
  if (/^\s*(none|off)\s*$/i.test(value)) return Infinity;
  return positiveDurationMsArg(value);
}

export function multiplierArg(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 1 || n > 100) throw new InvalidArgumentError('a number from 1 (fixed intervals) to 100');
  return n;
}

export const maxAttemptsArg = integerArg(1, MAX_ATTEMPTS);

/** `200/s`, `600/m`, `30/h`. */
export function rateArg(value: string): Rate {
  const r = parseRate(value);
  if (r === undefined) throw new InvalidArgumentError('a rate like 200/s, 600/m or 30/h');
  return r;
}

export const burstArg = integerArg(1, 100_000);

export function fractionArg(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 10) throw new InvalidArgumentError('retries per first attempt, from 0 to 10, like 0.1');
  return n;
}

/** Retries per second: `1`, `0.5`, or a rate such as `30/m`; 0 turns the floor off. */
export function retryFloorArg(value: string): number {
  const r = parseRate(value);
  if (r !== undefined) return (r.count * 1000) / r.perMs;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 100_000) throw new InvalidArgumentError('retries per second, like 1, or a rate like 30/m');
  return n;
}

export function seedArg(value: string): number {
  const n = parseInteger(value, 0, 2 ** 32 - 1);
  if (n === undefined) throw new InvalidArgumentError('a whole number from 0 to 4294967295');
  return n;
}

export interface ScheduleOpts {
  base?: number;
  multiplier?: number;
  cap?: number;
  maxAttempts?: number;
  giveUp?: number;
  jitter?: Jitter;
}

const d = DEFAULT_SCHEDULE;

export function addScheduleOptions(cmd: Command): Command {
  return cmd
    .option('--base <duration>', `gap before the first retry (default ${formatDuration(d.baseMs)})`, positiveDurationMsArg)
    .option('--multiplier <n>', `each gap is the previous one times this; 1 gives fixed intervals (default ${d.multiplier})`, multiplierArg)
    .option('--cap <duration>', `longest gap, or none (default ${formatDuration(d.capMs)})`, capArg)
    .addOption(
      new Option('--max-attempts <n>', `give up after this many attempts (default ${d.maxAttempts})`).argParser(maxAttemptsArg).conflicts('giveUp'),
    )
    .addOption(
      new Option('--give-up <duration>', 'give up instead when the next attempt would fall this long after the first (paused time not counted)')
        .argParser(durationMsArg)
        .conflicts('maxAttempts'),
    )
    .addOption(new Option('--jitter <kind>', `full: gap × [0, 1); upper: gap × [1/2, 1); none (default ${d.jitter})`).choices(JITTERS));
}

/** The schedule the options describe, on top of the defaults; a schedule that cannot work is a usage error. */
export function scheduleFromOptions(o: ScheduleOpts): Schedule {
  const s = mergeSchedule(DEFAULT_SCHEDULE, o);
  const problem = scheduleProblem(s);
  if (problem !== undefined) throw new AppError('invalid_option', problem);
  return s;
}

/**
 * `base` with the knobs the options give changed and the rest kept; `--max-attempts` and
 * `--give-up` replace each other. Not validated: the caller runs scheduleProblem on the result.
 */
export function mergeSchedule(base: Schedule, o: ScheduleOpts): Schedule {
  const shape = {
    baseMs: o.base ?? base.baseMs,
    multiplier: o.multiplier ?? base.multiplier,
    capMs: o.cap ?? base.capMs,
    jitter: o.jitter ?? base.jitter,
  };
  if (o.giveUp !== undefined) return { ...shape, giveUpMs: o.giveUp };
  if (o.maxAttempts !== undefined) return { ...shape, maxAttempts: o.maxAttempts };
  return base.giveUpMs !== undefined ? { ...shape, giveUpMs: base.giveUpMs } : { ...shape, maxAttempts: base.maxAttempts };
}

export function hasScheduleOptions(o: ScheduleOpts): boolean {
  return [o.base, o.multiplier, o.cap, o.maxAttempts, o.giveUp, o.jitter].some((v) => v !== undefined);
}

/** One line: `base 30s, multiplier 3, cap 3h, give up after 14 attempts, jitter upper`. */
export function describeSchedule(s: Schedule): string {
  const cap = Number.isFinite(s.capMs) ? `cap ${formatDuration(s.capMs)}` : 'no cap';
  const giveUp = s.giveUpMs !== undefined ? `give up after ${formatDuration(s.giveUpMs)}` : `give up after ${s.maxAttempts} attempts`;
  return `base ${formatDuration(s.baseMs)}, multiplier ${s.multiplier}, ${cap}, ${giveUp}, jitter ${s.jitter}`;
}

export interface BudgetRateOpts {
  retryBudget?: number;
  retryFloor?: number;
  rate?: Rate;
  burst?: number;
}

export function addBudgetAndRateOptions(cmd: Command): Command {
  return cmd
    .option('--retry-budget <fraction>', `retries allowed per first attempt over a sliding 60 s window (default ${DEFAULT_RETRY_BUDGET.fraction})`, fractionArg)
    .option('--retry-floor <n>', `retries per second allowed however quiet the bucket (default ${DEFAULT_RETRY_BUDGET.floorPerSecond})`, retryFloorArg)
    .option('--rate <n/unit>', 'bound every attempt to this rate, like 200/s, 600/m or 30/h (default: no rate cap)', rateArg)
    .option('--burst <n>', `attempts allowed back to back under --rate (default ${DEFAULT_BURST})`, burstArg);
}

export function budgetFromOptions(o: BudgetRateOpts): RetryBudgetConfig {
  return {
    fraction: o.retryBudget ?? DEFAULT_RETRY_BUDGET.fraction,
    floorPerSecond: o.retryFloor ?? DEFAULT_RETRY_BUDGET.floorPerSecond,
  };
}

export function rateFromOptions(o: BudgetRateOpts): TokenBucketConfig | undefined {
  if (o.rate === undefined) {
    if (o.burst !== undefined) throw new AppError('invalid_option', '--burst needs --rate');
    return undefined;
  }
  return { rate: o.rate, burst: o.burst ?? DEFAULT_BURST };
}

/* ---- bucket create | update: the per-bucket drain settings ---- */

export const MAX_CONCURRENCY = 1000;
export const MAX_TIMEOUT_MS = 10 * 60_000; // 10m

export const concurrencyArg = integerArg(1, MAX_CONCURRENCY);

export function timeoutArg(value: string): number {
  const ms = parseDuration(value);
  if (ms === undefined || ms < 1 || ms > MAX_TIMEOUT_MS) throw new InvalidArgumentError('a duration above zero and at most 10m, like 10s or 1m30s');
  return ms;
}

/** `--retry-on 5xx,429,network`, or `default` for the default retried set. */
export function retryOnArg(value: string): RetryOn | 'default' {
  if (/^\s*default\s*$/i.test(value)) return 'default';
  const r = parseRetryOn(value);
  if (r === undefined) throw new InvalidArgumentError(`a comma-separated list of ${RETRY_ON_WORDS}; or default`);
  return r;
}

/**
 * What `--forward-header` and `--no-forward-header` ask for, whatever their order on the command
 * line: `clear` drops the bucket's headers; otherwise a header given replaces the bucket's headers
 * of the same name (case-insensitive) and the others stay. Both together: exactly the given list.
 */
export interface ForwardHeaderEdit {
  clear: boolean;
  set: Array<[string, string]>;
}

function collectForwardHeader(value: string, previous: ForwardHeaderEdit | undefined): ForwardHeaderEdit {
  return { clear: previous?.clear ?? false, set: [...(previous?.set ?? []), forwardHeaderArg(value)] };
}

export interface DeliveryOpts extends ScheduleOpts {
  /** false: --no-rate. */
  rate?: Rate | false;
  burst?: number;
  concurrency?: number;
  timeout?: number;
  retryOn?: RetryOn | 'default';
  retryBudget?: number;
  retryFloor?: number;
  forwardPath?: boolean;
  forwardRawPath?: boolean;
  forwardHeader?: ForwardHeaderEdit;
}

/** The drain settings of `bucket create` and (with forUpdate, the --no-* forms) `bucket update`. */
export function addDeliveryOptions(cmd: Command, forUpdate: boolean): Command {
  cmd
    .option('--rate <n/unit>', 'cap every attempt (first tries, retries, replays) at this rate, like 200/s, 600/m or 30/h (default: no rate cap)', rateArg)
    .option('--burst <n>', `attempts allowed back to back under the rate, 1 to 100000 (default ${DEFAULT_BURST})`, burstArg);
  if (forUpdate) cmd.option('--no-rate', `remove the rate cap (burst goes back to ${DEFAULT_BURST})`);
  cmd
    .option('--concurrency <n>', `attempts in flight at once, 1 to ${MAX_CONCURRENCY} (default ${DEFAULT_CONCURRENCY})`, concurrencyArg)
    .option('--timeout <duration>', `time limit of one attempt, connect to last response byte, at most 10m (default ${formatDuration(DEFAULT_TIMEOUT_MS)})`, timeoutArg);
  addScheduleOptions(cmd);
  cmd
    .option(
      '--retry-on <list>',
      `outcomes retried, a comma-separated list of ${RETRY_ON_WORDS}; it replaces the whole default set (${formatRetryOn(DEFAULT_RETRY_ON)}), which the word default brings back`,
      retryOnArg,
    )
    .option(
      '--retry-budget <fraction>',
      `retries allowed per first attempt over a sliding 60 s window, 0 to 10 (default ${DEFAULT_RETRY_BUDGET.fraction})`,
      fractionArg,
    )
    .option(
      '--retry-floor <n>',
      `retries per second allowed however quiet the bucket, or a rate like 30/m; 0 turns it off (default ${DEFAULT_RETRY_BUDGET.floorPerSecond})`,
      retryFloorArg,
    )
    .option('--forward-path', 'append the sub-path a request arrived on (after /b/<name>) to the destination URL (default)')
    .option('--no-forward-path', 'forward every request to the destination URL as it is')
    .option(
      '--forward-raw-path',
      'append the sub-path as stored, dot-segments (../, %2e%2e/) and empty segments included; unsafe behind a proxy or server that normalises paths (default: they are removed, so the path stays under the destination\'s)',
    );
  if (forUpdate) cmd.option('--no-forward-raw-path', 'remove dot-segments and empty segments from the sub-path again (the default)');
  cmd
    .option(
      '--forward-header <header>',
      forUpdate
        ? 'add "Name: value" to every forwarded request, replacing the bucket\'s headers of that name; repeatable'
        : 'add "Name: value" to every forwarded request, after the stored headers; repeatable',
      collectForwardHeader,
    );
  if (forUpdate) {
    // Negated options share the attribute of their positive form, so a plain --no-forward-header
    // would overwrite headers given before it. A preset makes commander call the parser instead,
    // with the value so far: the result does not depend on the order of the two flags.
    cmd.addOption(
      new Option('--no-forward-header', 'remove every forwarded header; with --forward-header, the headers given become the whole list')
        .preset(true)
        .argParser((_: unknown, previous: ForwardHeaderEdit | undefined): ForwardHeaderEdit => ({ clear: true, set: previous?.set ?? [] })),
    );
  }
  return cmd;
}

/**
 * The drain settings the options change, merged onto `current` (DEFAULT_DRAIN for a new bucket):
 * only the settings given appear in the patch. Throws invalid_option (exit 2) for a schedule that
 * cannot work and for a burst without a rate.
 */
export function drainPatchFrom(o: DeliveryOpts, current: DrainSettings): Partial<DrainSettings> {
  const p: Partial<DrainSettings> = {};
  if (o.rate !== undefined) p.rate = o.rate === false ? null : o.rate;
  if (o.burst !== undefined) {
    if ((p.rate === undefined ? current.rate : p.rate) === null) {
      throw new AppError('invalid_option', o.rate === false ? '--burst has no effect with --no-rate' : '--burst needs --rate: the bucket has no rate cap');
    }
    p.burst = o.burst;
  } else if (o.rate === false) {
    p.burst = DEFAULT_BURST;
  }
  if (o.concurrency !== undefined) p.concurrency = o.concurrency;
  if (o.timeout !== undefined) p.timeoutMs = o.timeout;
  if (hasScheduleOptions(o)) {
    const s = mergeSchedule(current.schedule, o);
    const problem = scheduleProblem(s);
    if (problem !== undefined) throw new AppError('invalid_option', `${problem} (the schedule would be: ${describeSchedule(s)})`);
    p.schedule = s;
  }
  if (o.retryOn !== undefined) p.retryOn = o.retryOn === 'default' ? null : o.retryOn;
  if (o.retryBudget !== undefined || o.retryFloor !== undefined) {
    p.retryBudget = {
      fraction: o.retryBudget ?? current.retryBudget.fraction,
      floorPerSecond: o.retryFloor ?? current.retryBudget.floorPerSecond,
    };
  }
  if (o.forwardPath !== undefined) p.forwardPath = o.forwardPath;
  if (o.forwardRawPath !== undefined) p.forwardRawPath = o.forwardRawPath;
  if (o.forwardHeader !== undefined) {
    const { clear, set } = o.forwardHeader;
    const replaced = new Set(set.map(([name]) => name.toLowerCase()));
    const kept = clear ? [] : current.forwardHeaders.filter(([name]) => !replaced.has(name.toLowerCase()));
    p.forwardHeaders = [...kept, ...set];
  }
  return p;
}

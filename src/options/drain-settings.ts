/**
 * The delivery-policy settings shared by `schedule`, `simulate`, `bucket create|update` and the
 * admin API's bucket routes (the commander wiring is src/cli/drain-options.ts):
 * schedule, jitter, retry budget and rate, plus the bucket-only ones (concurrency, timeout,
 * retried outcomes, forwarding). Each parser throws InvalidArgumentError (exit 2); the arithmetic
 * behind them lives in src/drain.
 */
import { InvalidArgumentError } from 'commander';
import { formatDuration, isBareNumber, noUnitMessage, parseDuration, parseInteger } from '../config/units.js';
import { parseRetryOn, RETRY_ON_WORDS, type RetryOn } from '../policy/classify.js';
import { DEFAULT_RETRY_BUDGET, type RetryBudgetConfig } from '../policy/retry-budget.js';
import { DEFAULT_SCHEDULE, MAX_ATTEMPTS, scheduleProblem, type Jitter, type Schedule } from '../policy/schedule.js';
import { DEFAULT_BURST, parseRate, type Rate, type TokenBucketConfig } from '../policy/token-bucket.js';
import { AppError } from '../shared/errors.js';
import type { DrainSettings } from '../store/store.js';
import { integerArg } from './parsers.js';

/** A duration in ms: `30s`, `1m30s`, `500ms`, or `0`; a number without a unit is refused with a hint. */
export function durationMsArg(value: string): number {
  if (isBareNumber(value)) throw new InvalidArgumentError(noUnitMessage(value, 'duration'));
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
  if (value.trim() === '' || !Number.isFinite(n) || n < 1 || n > 100)
    throw new InvalidArgumentError('a number from 1 (fixed intervals) to 100');
  return n;
}

export const maxAttemptsArg = integerArg(1, MAX_ATTEMPTS);

/** `200/s`, `600/m`, `30/h`. */
export function rateArg(value: string): Rate {
  const r = parseRate(value);
  if (r === undefined) {
    if (/^\s*0+(?:\.0+)?\s*\/\s*[smh]\s*$/i.test(value)) throw new InvalidArgumentError('a rate must be greater than 0, like 1/s or 30/m');
    throw new InvalidArgumentError('a rate like 200/s, 600/m or 30/h');
  }
  return r;
}

export const burstArg = integerArg(1, 100_000);

export function fractionArg(value: string): number {
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 10)
    throw new InvalidArgumentError('retries per first attempt, from 0 to 10, like 0.1');
  return n;
}

/** Retries per second: `1`, `0.5`, or a rate such as `30/m`; 0 turns the floor off. */
export function retryFloorArg(value: string): number {
  const r = parseRate(value);
  if (r !== undefined) return (r.count * 1000) / r.perMs;
  const n = Number(value);
  if (value.trim() === '' || !Number.isFinite(n) || n < 0 || n > 100_000)
    throw new InvalidArgumentError('retries per second, like 1, or a rate like 30/m');
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
  if (isBareNumber(value)) throw new InvalidArgumentError(noUnitMessage(value, 'duration'));
  const ms = parseDuration(value);
  if (ms === undefined || ms < 1 || ms > MAX_TIMEOUT_MS)
    throw new InvalidArgumentError('a duration above zero and at most 10m, like 10s or 1m30s');
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
      throw new AppError(
        'invalid_option',
        o.rate === false ? '--burst has no effect with --no-rate' : '--burst needs --rate: the bucket has no rate cap',
      );
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

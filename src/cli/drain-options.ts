/**
 * The delivery-policy options shared by `schedule`, `simulate` and (later) `bucket create|update`:
 * schedule, jitter, retry budget and rate. Each parser throws InvalidArgumentError (exit 2); the
 * arithmetic behind them lives in src/drain.
 */
import { Command, InvalidArgumentError, Option } from 'commander';
import { formatDuration, parseDuration, parseInteger } from '../config/units.js';
import { DEFAULT_RETRY_BUDGET, type RetryBudgetConfig } from '../drain/retry-budget.js';
import { DEFAULT_SCHEDULE, JITTERS, MAX_ATTEMPTS, scheduleProblem, type Jitter, type Schedule } from '../drain/schedule.js';
import { DEFAULT_BURST, parseRate, type Rate, type TokenBucketConfig } from '../drain/token-bucket.js';
import { AppError } from '../shared/errors.js';
import { integerArg } from './parsers.js';

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
  const shape = {
    baseMs: o.base ?? d.baseMs,
    multiplier: o.multiplier ?? d.multiplier,
    capMs: o.cap ?? d.capMs,
    jitter: o.jitter ?? d.jitter,
  };
  const s: Schedule = o.giveUp !== undefined ? { ...shape, giveUpMs: o.giveUp } : { ...shape, maxAttempts: o.maxAttempts ?? d.maxAttempts };
  const problem = scheduleProblem(s);
  if (problem !== undefined) throw new AppError('invalid_option', problem);
  return s;
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

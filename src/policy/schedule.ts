/**
 * The retry schedule: how long until the next attempt, or whether to give up. Pure: time and
 * randomness come in as arguments (the worker passes Date.now() and Math.random(), `simulate` a
 * simulated clock and a seeded PRNG), so every branch is table-testable without sleeping.
 *
 * The gap before retry k (k = 1 is the gap between attempt 1 and attempt 2) is
 *   min(cap, base × multiplier^(k-1))
 * which is Svix's and Convoy's shape: exponential, capped. A multiplier of 1 gives fixed intervals.
 * Jitter then spreads deliveries that failed together, so that they do not come back together.
 */
import { formatDuration } from '../shared/format-duration.js';
import { mulberry32 } from './prng.js';

export type Jitter = 'full' | 'upper' | 'none';
export const JITTERS: readonly Jitter[] = ['full', 'upper', 'none'];

interface ScheduleShape {
  readonly baseMs: number;
  readonly multiplier: number;
  /** Longest gap; `Infinity` for an uncapped schedule. */
  readonly capMs: number;
  readonly jitter: Jitter;
}

export type AttemptsSchedule = ScheduleShape & { readonly maxAttempts: number; readonly giveUpMs?: undefined };
export type DurationSchedule = ScheduleShape & { readonly giveUpMs: number; readonly maxAttempts?: undefined };
/** Give up after `maxAttempts` attempts, or when the next attempt would fall past `giveUpMs` of active time. */
export type Schedule = AttemptsSchedule | DurationSchedule;

export const DEFAULT_SCHEDULE: AttemptsSchedule = Object.freeze({
  baseMs: 30 * 1000, // 30s
  multiplier: 3,
  capMs: 3 * 3_600_000, // 3h
  maxAttempts: 14, // the 14th attempt falls about 24h02m after the first
  jitter: 'upper',
});

/** Bounds that keep a schedule printable and its arithmetic exact. */
export const MAX_ATTEMPTS = 1000;
export const MAX_SCHEDULE_ROWS = 10_000;
/** Past this the schedule command warns: a delivery that long in flight is usually forgotten. */
export const LONG_GIVE_UP_MS = 7 * 86_400_000; // 7d

/** The gap before retry k on paper (k ≥ 1), in whole milliseconds. */
export function paperGapMs(s: ScheduleShape, k: number): number {
  return Math.round(Math.min(s.capMs, s.baseMs * s.multiplier ** (k - 1)));
}

/**
 * Jitter with `random` in [0, 1). `full` draws uniformly from [0, gap) (AWS's "full jitter"),
 * `upper` from [gap/2, gap) (AWS's "equal jitter": never sooner than half the gap), `none` is the gap.
 * Integer results stay inside the half-open ranges: [0, gap-1] and [ceil(gap/2), gap-1].
 */
export function jitterGap(gapMs: number, jitter: Jitter, random: number): number {
  if (jitter === 'none' || gapMs <= 0) return gapMs;
  if (jitter === 'full') return Math.floor(gapMs * random);
  const low = Math.ceil(gapMs / 2);
  return low + Math.floor((gapMs - low) * random);
}

/** The mean of a jittered gap as a fraction of the gap: uniform on [0,1) and on [1/2,1). */
export const JITTER_MEAN: Readonly<Record<Jitter, number>> = { full: 0.5, upper: 0.75, none: 1 };

export interface FailedAttempt {
  /** The number of the attempt that just failed: 1 for the first. */
  attempt: number;
  /** Time since the first attempt, not counting time the bucket was paused (for `giveUpMs`). */
  elapsedActiveMs: number;
  nowMs: number;
  /** A number in [0, 1). */
  random: number;
  /** The response's Retry-After in ms (see parseRetryAfter), honored as a floor on the gap. */
  retryAfterMs?: number | undefined;
}

export type NextAttempt =
  | { kind: 'retry'; atMs: number; gapMs: number; why: 'schedule' | 'retry_after' }
  | { kind: 'give_up'; why: 'max_attempts' | 'give_up_after' };

/**
 * A Retry-After never parks a delivery longer than the cap, so a hostile `Retry-After: 31536000`
 * costs at most one capped gap. An uncapped schedule still bounds it, by the default cap.
 */
export function retryAfterCeilingMs(s: ScheduleShape): number {
  return Number.isFinite(s.capMs) ? s.capMs : DEFAULT_SCHEDULE.capMs;
}

/** When to try again after a failed attempt, or whether the schedule has run out. */
export function nextAttempt(s: Schedule, f: FailedAttempt): NextAttempt {
  if (s.maxAttempts !== undefined && f.attempt >= s.maxAttempts) return { kind: 'give_up', why: 'max_attempts' };
  const jittered = jitterGap(paperGapMs(s, f.attempt), s.jitter, f.random);
  const floor = f.retryAfterMs === undefined ? 0 : Math.min(f.retryAfterMs, retryAfterCeilingMs(s));
  const gapMs = Math.max(jittered, floor);
  if (s.giveUpMs !== undefined && f.elapsedActiveMs + gapMs > s.giveUpMs) return { kind: 'give_up', why: 'give_up_after' };
  return { kind: 'retry', atMs: f.nowMs + gapMs, gapMs, why: floor > jittered ? 'retry_after' : 'schedule' };
}

export interface ScheduleRow {
  attempt: number;
  /** Gap before this attempt; null for the first. */
  gapMs: number | null;
  /** Time since the first attempt. */
  elapsedMs: number;
}

export interface PaperSchedule {
  rows: ScheduleRow[];
  /** When the last attempt falls, i.e. when the delivery becomes exhausted if every attempt fails at once. */
  giveUpMs: number;
}

/** Why a schedule cannot be used, or undefined. Infinite limits are for simulate's naive sender only. */
export function scheduleProblem(s: Schedule): string | undefined {
  if (!Number.isSafeInteger(s.baseMs) || s.baseMs < 1) return 'base must be at least 1ms';
  if (!Number.isFinite(s.multiplier) || s.multiplier < 1) return 'multiplier must be a number of at least 1';
  if (s.capMs < s.baseMs) return 'cap must be at least the base';
  if (s.maxAttempts !== undefined && (!Number.isSafeInteger(s.maxAttempts) || s.maxAttempts < 1 || s.maxAttempts > MAX_ATTEMPTS)) {
    return `max attempts must be a whole number from 1 to ${MAX_ATTEMPTS}`;
  }
  if (s.giveUpMs !== undefined && (!Number.isSafeInteger(s.giveUpMs) || s.giveUpMs < 0)) return 'give-up must be a duration';
  const rows = paperRows(s);
  if (rows === undefined) {
    return `the schedule makes more than ${MAX_SCHEDULE_ROWS} attempts before giving up: raise the base or the multiplier, or give up sooner`;
  }
  if (!Number.isSafeInteger(rows[rows.length - 1]!.elapsedMs)) return 'the gaps grow past any representable time: set a cap';
  return undefined;
}

function paperRows(s: Schedule): ScheduleRow[] | undefined {
  const rows: ScheduleRow[] = [{ attempt: 1, gapMs: null, elapsedMs: 0 }];
  let elapsed = 0;
  for (let k = 1; ; k++) {
    if (s.maxAttempts !== undefined && k >= s.maxAttempts) break;
    const gap = paperGapMs(s, k);
    if (s.giveUpMs !== undefined && elapsed + gap > s.giveUpMs) break;
    if (rows.length >= MAX_SCHEDULE_ROWS) return undefined;
    elapsed += gap;
    rows.push({ attempt: k + 1, gapMs: gap, elapsedMs: elapsed });
  }
  return rows;
}

/** The attempt table with no jitter and every attempt failing at once. Throws on a schedule with a problem. */
export function paperSchedule(s: Schedule): PaperSchedule {
  const problem = scheduleProblem(s);
  if (problem !== undefined) throw new RangeError(problem);
  const rows = paperRows(s)!;
  return { rows, giveUpMs: rows[rows.length - 1]!.elapsedMs };
}

export interface ExpectedGiveUp {
  /** Mean time from the first attempt to giving up, every attempt failing at once. */
  ms: number;
  /** Mean number of attempts made. */
  attempts: number;
  /** `exact` for a fixed number of attempts; `estimate` (seeded Monte Carlo) for a give-up duration. */
  method: 'exact' | 'estimate';
}

/**
 * Runs in the Monte Carlo estimate: 4000 for short schedules (a standard error of about a minute
 * for the defaults with --give-up 24h), fewer for long ones, so that one estimate stays under
 * about 400,000 steps (a few tens of milliseconds).
 */
function estimateRuns(rows: number): number {
  return Math.min(4000, Math.max(200, Math.floor(400_000 / rows)));
}

/**
 * The expected give-up time under a jitter. With a fixed number of attempts each gap keeps its
 * jitter mean: about half the paper time for `full`, three quarters for `upper`. With a give-up
 * duration, shorter jittered gaps fit more attempts before the deadline, so it is estimated by
 * replaying the schedule with a seeded PRNG (deterministic: same answer every run).
 */
export function expectedGiveUp(s: Schedule, jitter: Jitter = s.jitter, seed = 1): ExpectedGiveUp {
  const paper = paperSchedule(s);
  if (s.giveUpMs === undefined || jitter === 'none') {
    const ms = paper.rows.reduce((sum, r) => sum + (r.gapMs ?? 0) * JITTER_MEAN[jitter], 0);
    return { ms: Math.round(ms), attempts: paper.rows.length, method: 'exact' };
  }
  const random = mulberry32(seed);
  const jittered: Schedule = { ...s, jitter };
  const runs = estimateRuns(paper.rows.length);
  let totalMs = 0;
  let totalAttempts = 0;
  for (let run = 0; run < runs; run++) {
    let elapsed = 0;
    let attempt = 1;
    for (;;) {
      const next = nextAttempt(jittered, { attempt, elapsedActiveMs: elapsed, nowMs: elapsed, random: random() });
      if (next.kind === 'give_up' || attempt >= MAX_SCHEDULE_ROWS) break;
      elapsed = next.atMs;
      attempt++;
    }
    totalMs += elapsed;
    totalAttempts += attempt;
  }
  return { ms: Math.round(totalMs / runs), attempts: totalAttempts / runs, method: 'estimate' };
}

export function scheduleWarnings(s: Schedule, paper: PaperSchedule): string[] {
  const warnings: string[] = [];
  if (!Number.isFinite(s.capMs) && s.multiplier > 1) {
    const last = paper.rows[paper.rows.length - 1]!.gapMs ?? 0;
    warnings.push(
      `uncapped: gaps keep growing ×${s.multiplier}, the last is ${formatDuration(last)}; a cap (default 3h) bounds how long a recovered consumer waits for its backlog`,
    );
  }
  if (paper.giveUpMs > LONG_GIVE_UP_MS) {
    warnings.push(
      `gives up ${formatDuration(paper.giveUpMs)} after the first attempt, past 7 days: a delivery that old is usually better replayed by hand`,
    );
  }
  return warnings;
}

const MONTHS = ['jan', 'feb', 'mar', 'apr', 'may', 'jun', 'jul', 'aug', 'sep', 'oct', 'nov', 'dec'];
// RFC 9110 §5.6.7: recipients accept all three HTTP-date forms.
const IMF_FIXDATE = /^[a-z]{3}, (\d{2}) ([a-z]{3}) (\d{4}) (\d{2}):(\d{2}):(\d{2}) gmt$/i; // Sun, 06 Nov 1994 08:49:37 GMT
const RFC850_DATE = /^[a-z]{6,9}, (\d{2})-([a-z]{3})-(\d{2}) (\d{2}):(\d{2}):(\d{2}) gmt$/i; // Sunday, 06-Nov-94 08:49:37 GMT
const ASCTIME_DATE = /^[a-z]{3} ([a-z]{3}) ([ \d]\d) (\d{2}):(\d{2}):(\d{2}) (\d{4})$/i; // Sun Nov  6 08:49:37 1994

function utc(year: number, monthName: string, day: number, h: number, m: number, s: number): number | undefined {
  const month = MONTHS.indexOf(monthName.toLowerCase());
  if (month < 0 || h > 23 || m > 59 || s > 60) return undefined;
  const ms = Date.UTC(year, month, day, h, m, Math.min(s, 59));
  // Date.UTC rolls 31 Feb over into March; a real date survives the round trip.
  return new Date(ms).getUTCDate() === day ? ms : undefined;
}

/**
 * `Retry-After` (RFC 9110 §10.2.3) as a wait in ms from `nowMs`: delta-seconds (`120`) or an
 * HTTP-date. A date in the past is 0. Anything else is undefined, and the schedule decides alone.
 */
export function parseRetryAfter(value: string | undefined, nowMs: number): number | undefined {
  if (value === undefined) return undefined;
  const v = value.trim();
  if (/^\d+$/.test(v)) return Math.min(Number(v) * 1000, Number.MAX_SAFE_INTEGER);
  let at: number | undefined;
  let m: RegExpExecArray | null;
  if ((m = IMF_FIXDATE.exec(v))) at = utc(Number(m[3]), m[2]!, Number(m[1]), Number(m[4]), Number(m[5]), Number(m[6]));
  else if ((m = RFC850_DATE.exec(v))) {
    // A two-digit year more than 50 years ahead is the most recent past year with those digits (RFC 9110).
    const thisYear = new Date(nowMs).getUTCFullYear();
    let year = thisYear - (thisYear % 100) + Number(m[3]);
    if (year > thisYear + 50) year -= 100;
    at = utc(year, m[2]!, Number(m[1]), Number(m[4]), Number(m[5]), Number(m[6]));
  } else if ((m = ASCTIME_DATE.exec(v))) {
    at = utc(Number(m[6]), m[1]!, Number(m[2]!.trim()), Number(m[3]), Number(m[4]), Number(m[5]));
  }
  return at === undefined ? undefined : Math.max(0, at - nowMs);
}

/**
 * The retry budget: an aggregate bound on retries per bucket, so that a deep backlog cannot
 * stampede a consumer that has just recovered (the idea of gRPC's and Finagle's retry budgets).
 * Over a sliding 60 s window:
 *
 *   allowed retries = fraction × (first attempts in the window) + floor × 60
 *
 * With the defaults (0.1 and 1 retry/s) a bucket taking 600 first attempts a minute may retry
 * 120 times a minute, so attempts stay near 1.1× arrivals plus the floor; the floor lets a quiet
 * bucket still retry. A replay's first attempts count as first attempts. A retry over budget is
 * deferred, never dropped.
 *
 * Pure: the state is plain data (one count per second, so memory is bounded whatever the
 * traffic), and every function takes `now`.
 */

export interface RetryBudgetConfig {
  /** Retries allowed per first attempt in the window (`--retry-budget`). */
  readonly fraction: number;
  /** Retries per second allowed regardless of traffic (`--retry-floor`). */
  readonly floorPerSecond: number;
}

export const DEFAULT_RETRY_BUDGET: RetryBudgetConfig = Object.freeze({ fraction: 0.1, floorPerSecond: 1 });

export const BUDGET_WINDOW_SECONDS = 60;

export interface RetryBudgetState {
  /** For each slot (second mod 60): the epoch second it counts, its first attempts and its retries. */
  readonly seconds: readonly number[];
  readonly firsts: readonly number[];
  readonly retries: readonly number[];
}

export function emptyRetryBudget(): RetryBudgetState {
  const zeros = new Array<number>(BUDGET_WINDOW_SECONDS).fill(0);
  return { seconds: new Array<number>(BUDGET_WINDOW_SECONDS).fill(-Infinity), firsts: zeros, retries: zeros };
}

/** The formula, for the README and the tests. */
export function allowedRetries(c: RetryBudgetConfig, firstAttemptsInWindow: number): number {
  // 0.1 × 7 is 0.7000000000000001 in floating point; round away the noise before flooring.
  return Math.floor(Math.round((c.fraction * firstAttemptsInWindow + c.floorPerSecond * BUDGET_WINDOW_SECONDS) * 1e6) / 1e6);
}

export type AttemptKind = 'first' | 'retry';

/** Records `n` attempts made at `nowMs`. */
export function recordAttempt(s: RetryBudgetState, nowMs: number, kind: AttemptKind, n = 1): RetryBudgetState {
  const second = Math.floor(nowMs / 1000);
  const i = ((second % BUDGET_WINDOW_SECONDS) + BUDGET_WINDOW_SECONDS) % BUDGET_WINDOW_SECONDS;
  const seconds = s.seconds.slice();
  const firsts = s.firsts.slice();
  const retries = s.retries.slice();
  if (seconds[i] !== second) {
    // The slot held a second that has left the window (or a later one, on a clock that went back).
    seconds[i] = second;
    firsts[i] = 0;
    retries[i] = 0;
  }
  if (kind === 'first') firsts[i]! += n;
  else retries[i]! += n;
  return { seconds, firsts, retries };
}

export interface RetryAllowance {
  firstAttempts: number;
  retries: number;
  allowed: number;
  /** Retries that may still go in this window; 0 when over budget. */
  remaining: number;
}

/** The window is the 60 whole seconds ending with the second of `nowMs`. */
export function retryAllowance(c: RetryBudgetConfig, s: RetryBudgetState, nowMs: number): RetryAllowance {
  const now = Math.floor(nowMs / 1000);
  let firstAttempts = 0;
  let retries = 0;
  for (let i = 0; i < BUDGET_WINDOW_SECONDS; i++) {
    const sec = s.seconds[i]!;
    if (sec > now - BUDGET_WINDOW_SECONDS && sec <= now) {
      firstAttempts += s.firsts[i]!;
      retries += s.retries[i]!;
    }
  }
  const allowed = allowedRetries(c, firstAttempts);
  return { firstAttempts, retries, allowed, remaining: Math.max(0, allowed - retries) };
}

/** Whether one more retry may go at `nowMs`. */
export function mayRetry(c: RetryBudgetConfig, s: RetryBudgetState, nowMs: number): boolean {
  return retryAllowance(c, s, nowMs).remaining >= 1;
}

/**
 * The earliest time at or after `nowMs` when one more retry fits, if no other attempt is made
 * meanwhile: now when one fits already, else the start of the first second in which enough of
 * the window's retries have aged out. Infinity when none ever would (a zero floor and no first
 * attempts); a new first attempt may make room sooner, and the worker is woken for those anyway.
 */
export function nextRetryAllowedAt(c: RetryBudgetConfig, s: RetryBudgetState, nowMs: number): number {
  if (mayRetry(c, s, nowMs)) return nowMs;
  const now = Math.floor(nowMs / 1000);
  for (let ahead = 1; ahead <= BUDGET_WINDOW_SECONDS; ahead++) {
    const at = (now + ahead) * 1000;
    if (mayRetry(c, s, at)) return at;
  }
  return Infinity;
}

/** The budget in one sentence, from a bucket's settings (`bucket show`). */
export function describeRetryBudget(c: RetryBudgetConfig): string {
  const w = `${BUDGET_WINDOW_SECONDS}s`;
  const floor = Math.round(c.floorPerSecond * BUDGET_WINDOW_SECONDS * 1e6) / 1e6;
  const pct = `${Math.round(c.fraction * 100 * 1e4) / 1e4}%`;
  const wait = 'beyond that they wait (deferred: retry_budget), never dropped.';
  if (c.fraction === 0 && floor === 0)
    return 'Retries never go: the budget allows none (--retry-budget 0 and --retry-floor 0); they wait until it is raised.';
  if (c.fraction === 0) return `Retries may number at most ${floor} per ${w} (${c.floorPerSecond}/s), whatever the traffic; ${wait}`;
  if (floor === 0)
    return `Retries may number at most ${pct} of the first attempts over ${w}, none in a window without first attempts; ${wait}`;
  return `Retries may number at most ${pct} of the first attempts over ${w}, plus ${floor} (${c.floorPerSecond}/s, however quiet the bucket); ${wait}`;
}

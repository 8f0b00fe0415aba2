/**
 * Admission for one bucket: may an attempt start now, or why not and until when. It combines the
 * three aggregate bounds, checked in this order:
 *
 * 1. bucket-wide Retry-After: after a 429 or 503 with Retry-After, no attempt to that destination
 *    starts before the time it named (clamped to the bucket's cap);
 * 2. the retry budget (retries only; first attempts, replays' included, always fit);
 * 3. the rate: a token bucket over every attempt.
 *
 * A "no" is a deferral, not an attempt: nothing is burned, the delivery keeps its place. Pure:
 * the state is plain data and `now` comes in.
 */
import {
  emptyRetryBudget,
  nextRetryAllowedAt,
  mayRetry,
  recordAttempt,
  type RetryBudgetConfig,
  type RetryBudgetState,
} from './retry-budget.js';
import { FULL_BUCKET, takeToken, type TokenBucketConfig, type TokenBucketState } from './token-bucket.js';

export type DeferReason = 'retry_after' | 'retry_budget' | 'rate';

export interface PacerConfig {
  readonly rate: TokenBucketConfig | null;
  readonly budget: RetryBudgetConfig;
}

export interface PacerState {
  readonly tokens: TokenBucketState;
  readonly budget: RetryBudgetState;
  /** No attempt before this time (a bucket-wide Retry-After); 0 when none. */
  readonly blockedUntilMs: number;
}

export function newPacer(): PacerState {
  return { tokens: FULL_BUCKET, budget: emptyRetryBudget(), blockedUntilMs: 0 };
}

export type Admission =
  /** `atMs`: when the attempt goes, `nowMs` or (a token taken ahead, see admit) its token's time. */
  { go: true; state: PacerState; atMs: number } | { go: false; state: PacerState; reason: DeferReason; untilMs: number };

/**
 * Whether an attempt of `kind` may start at `nowMs`; when it may, the state has it recorded.
 *
 * `horizonMs` lets a rate token that comes up within that much of `nowMs` be taken now, for an
 * attempt that must not go before the token's time (`atMs`): the caller schedules it. The tokens
 * taken stay exactly the token bucket's own times, one interval apart, so attempts sent at their
 * `atMs` keep rate + burst in any window; what the horizon buys is that a caller who comes back
 * late (a claim that took longer than an interval) finds the schedule already taken up to then
 * instead of losing the tokens that passed meanwhile. The Retry-After block and the retry budget
 * are still decided at `nowMs`, and the budget counts the attempt in the second of `nowMs`.
 */
export function admit(c: PacerConfig, s: PacerState, kind: 'first' | 'retry', nowMs: number, horizonMs = 0): Admission {
  if (s.blockedUntilMs > nowMs) return { go: false, state: s, reason: 'retry_after', untilMs: s.blockedUntilMs };
  if (kind === 'retry' && !mayRetry(c.budget, s.budget, nowMs)) {
    return { go: false, state: s, reason: 'retry_budget', untilMs: nextRetryAllowedAt(c.budget, s.budget, nowMs) };
  }
  let tokens = s.tokens;
  let atMs = nowMs;
  if (c.rate !== null) {
    let take = takeToken(c.rate, s.tokens, nowMs);
    if (!take.taken && take.nextAvailableAtMs <= nowMs + horizonMs) {
      // Whole ms, as times are stored; up, so that the attempt never goes before its token.
      atMs = Math.ceil(take.nextAvailableAtMs);
      take = takeToken(c.rate, s.tokens, atMs);
    }
    if (!take.taken) return { go: false, state: s, reason: 'rate', untilMs: take.nextAvailableAtMs };
    tokens = take.state;
  }
  return { go: true, state: { ...s, tokens, budget: recordAttempt(s.budget, nowMs, kind) }, atMs };
}

/** A 429 or 503 with Retry-After blocks the whole bucket until `untilMs` (never shortens a block). */
export function block(s: PacerState, untilMs: number): PacerState {
  return untilMs > s.blockedUntilMs ? { ...s, blockedUntilMs: untilMs } : s;
}

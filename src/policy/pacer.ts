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
import { emptyRetryBudget, nextRetryAllowedAt, mayRetry, recordAttempt, type RetryBudgetConfig, type RetryBudgetState } from './retry-budget.js';
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
  | { go: true; state: PacerState }
  | { go: false; state: PacerState; reason: DeferReason; untilMs: number };

/** Whether an attempt of `kind` may start at `nowMs`; when it may, the state has it recorded. */
export function admit(c: PacerConfig, s: PacerState, kind: 'first' | 'retry', nowMs: number): Admission {
  if (s.blockedUntilMs > nowMs) return { go: false, state: s, reason: 'retry_after', untilMs: s.blockedUntilMs };
  if (kind === 'retry' && !mayRetry(c.budget, s.budget, nowMs)) {
    return { go: false, state: s, reason: 'retry_budget', untilMs: nextRetryAllowedAt(c.budget, s.budget, nowMs) };
  }
  let tokens = s.tokens;
  if (c.rate !== null) {
    const take = takeToken(c.rate, s.tokens, nowMs);
    if (!take.taken) return { go: false, state: s, reason: 'rate', untilMs: take.nextAvailableAtMs };
    tokens = take.state;
  }
  return { go: true, state: { ...s, tokens, budget: recordAttempt(s.budget, nowMs, kind) } };
}

/** A 429 or 503 with Retry-After blocks the whole bucket until `untilMs` (never shortens a block). */
export function block(s: PacerState, untilMs: number): PacerState {
  return untilMs > s.blockedUntilMs ? { ...s, blockedUntilMs: untilMs } : s;
}

/**
 * What a finished attempt means for its delivery: delivered, failed for good, retried at a time
 * the schedule (or the consumer's Retry-After) chose, or exhausted. Pure: the worker passes the
 * outcome, the schedule, `now` and a random number in [0, 1).
 */
import { classify, DEFAULT_RETRY_ON, type Outcome, type RetryOn } from './classify.js';
import { nextAttempt, parseRetryAfter, retryAfterCeilingMs, type Schedule } from './schedule.js';

export interface AttemptFacts {
  outcome: Outcome;
  /** The Retry-After header of the response, if any. */
  retryAfter?: string | undefined;
  /** This attempt's number: 1 for the first. */
  attempt: number;
  /** Time since the first attempt, paused time left out. */
  elapsedActiveMs: number;
  nowMs: number;
  random: number;
}

export type AttemptDecision =
  | { state: 'delivered' | 'failed'; reason: string }
  | { state: 'exhausted'; reason: string; why: 'max_attempts' | 'give_up_after' }
  | {
      state: 'retrying';
      reason: string;
      atMs: number;
      why: 'schedule' | 'retry_after';
      /** Set on a 429 or 503 with a usable Retry-After: no attempt to this bucket before then. */
      bucketBlockedUntilMs?: number;
    };

/** Statuses whose Retry-After is honoured (RFC 9110 §10.2.3; RFC 6585 §4). */
export const RETRY_AFTER_STATUSES: ReadonlySet<number> = new Set([429, 503]);

export function decideAttempt(schedule: Schedule, retryOn: RetryOn | null, f: AttemptFacts): AttemptDecision {
  const c = classify(f.outcome, retryOn ?? DEFAULT_RETRY_ON);
  if (c.verdict === 'delivered') return { state: 'delivered', reason: c.reason };
  if (c.verdict === 'failed') return { state: 'failed', reason: c.reason };
  const honoured = f.outcome.kind === 'response' && RETRY_AFTER_STATUSES.has(f.outcome.status);
  const retryAfterMs = honoured ? parseRetryAfter(f.retryAfter, f.nowMs) : undefined;
  const next = nextAttempt(schedule, {
    attempt: f.attempt,
    elapsedActiveMs: f.elapsedActiveMs,
    nowMs: f.nowMs,
    random: f.random,
    retryAfterMs,
  });
  if (next.kind === 'give_up') return { state: 'exhausted', reason: c.reason, why: next.why };
  const decision: AttemptDecision = { state: 'retrying', reason: c.reason, atMs: next.atMs, why: next.why };
  if (retryAfterMs !== undefined && retryAfterMs > 0) {
    decision.bucketBlockedUntilMs = f.nowMs + Math.min(retryAfterMs, retryAfterCeilingMs(schedule));
  }
  return decision;
}

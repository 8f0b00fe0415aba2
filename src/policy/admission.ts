/**
 * Which of a bucket's due deliveries a claim takes, walking them in due order. Pure: the store
 * runs it inside its claim transaction (on whichever thread holds the connection), with the
 * pacer state, the bucket's settings and the replays' own rates passed in as data, and hands the
 * verdict back for the worker to keep.
 *
 * - A replay's own `--rate` is checked first, so a replay held by its own rate spends none of the
 *   bucket's tokens.
 * - Then the bucket's admission (pacer.ts): Retry-After block, retry budget, rate.
 * - A deferral is recorded on the delivery at the head of the line for each reason, once per
 *   walk; the ones behind it keep their place untouched (no write per waiting row). A retry held
 *   by the budget does not hold back the first attempts behind it.
 */
import { admit, newPacer, type DeferReason, type PacerConfig, type PacerState } from './pacer.js';
import type { RetryBudgetConfig } from './retry-budget.js';
import { FULL_BUCKET, takeToken, type Rate, type TokenBucketState } from './token-bucket.js';

/**
 * The bucket settings admission reads: a narrow view of the store's Bucket, so that policy
 * depends on no store module (store/store.ts re-exports the candidate and decision types below).
 */
export interface AdmissionBucket {
  drain: {
    rate: Rate | null;
    burst: number;
    retryBudget: RetryBudgetConfig;
    schedule: { readonly maxAttempts?: number | undefined };
  };
}

/** A due delivery the claim query is about to take, for the worker's rate, budget and Retry-After decision. */
export interface ClaimCandidate {
  deliveryId: string;
  requestId: string;
  /** Attempts made so far (0: this would be the first). */
  attempts: number;
  state: 'pending' | 'retrying';
  trigger: 'initial' | 'replay';
  replayId: string | null;
  nextAttemptAt: number;
}

export type ClaimDecision =
  /** Claim it; the attempt goes at `atMs` (the claim's now, or a rate token's time within the horizon). */
  | { kind: 'claim'; atMs: number }
  /** Held back (rate, budget, bucket-wide Retry-After): not an attempt, counted on the delivery with the reason. */
  | { kind: 'defer'; reason: string }
  /** Leave it for a later pass, untouched. */
  | { kind: 'skip' }
  /** Stop walking this bucket's due deliveries for this pass. */
  | { kind: 'stop' };

/** What happens to a delivery whose worker died mid-attempt (its lease expired). */
export type LeaseExpiry = { kind: 'retry'; atMs: number } | { kind: 'exhausted' };

export interface ClaimPolicy {
  nowMs: number;
  config: PacerConfig;
  pacer: PacerState;
  /** Replays that pace their own deliveries (`replay --rate`), by replay id. */
  replayRates: ReadonlyMap<string, Rate>;
  /** Their token buckets as the worker last kept them, by replay id. */
  replayPacers: ReadonlyMap<string, TokenBucketState>;
  /**
   * Claims past this many wait in the worker for a free slot (claimed ahead). A delivery paced by
   * its replay's own rate is never claimed ahead: it would go out later than its token, bunched.
   * Default: no limit.
   */
  aheadFrom?: number;
  /**
   * A rate token that comes up within this many ms of `nowMs` is taken now, its attempt scheduled
   * for the token's time (pacer.ts admit); a delivery paced by its replay's own rate takes its
   * replay token for that time too. Default 0: only what may go now is claimed.
   */
  horizonMs?: number;
  /**
   * At most this many tokens taken ahead (claims whose attempt goes after `nowMs`); past it a
   * delivery is held by the rate as if its token were beyond the horizon. Default: no limit.
   */
  aheadLimit?: number;
}

export interface ClaimVerdict {
  /** The bucket's pacer after the claims taken (keep it only once the claim committed). */
  pacer: PacerState;
  /** Replay token buckets that moved, by replay id. */
  replayTokens: Map<string, TokenBucketState>;
  /** Deliveries held back, by reason (each reason once per walk). */
  deferred: Partial<Record<DeferReason | 'replay_rate', number>>;
  /**
   * When the next claim may take a held-back delivery (for the rate: its token's time less the
   * horizon); Infinity when none was held back.
   */
  wakeAt: number;
  /** When the bucket's next rate token is due, for a walk the rate held back; Infinity otherwise. */
  rateAt: number;
  /** Deliveries paced by their replay's own rate left for a free slot (past `aheadFrom`). */
  skippedAhead: number;
}

/** The verdict of a claim that walked nothing (the pacer as it was). */
export function emptyVerdict(pacer: PacerState = newPacer()): ClaimVerdict {
  return { pacer, replayTokens: new Map(), deferred: {}, wakeAt: Infinity, rateAt: Infinity, skippedAhead: 0 };
}

export function createClaimDecider(p: ClaimPolicy): { decide: (c: ClaimCandidate) => ClaimDecision; verdict: () => ClaimVerdict } {
  let pacer = p.pacer;
  let wakeAt = Infinity;
  let rateAt = Infinity;
  let takenAhead = 0;
  let claims = 0;
  let skippedAhead = 0;
  const recorded = new Set<string>();
  const deferred: ClaimVerdict['deferred'] = {};
  const replayTokens = new Map<string, TokenBucketState>();
  const decide = (c: ClaimCandidate): ClaimDecision => {
    const replayRate = c.replayId === null ? undefined : p.replayRates.get(c.replayId);
    if (replayRate !== undefined && claims >= (p.aheadFrom ?? Infinity)) {
      skippedAhead++;
      return { kind: 'skip' };
    }
    const horizon = p.horizonMs ?? 0;
    let a = admit(p.config, pacer, c.attempts === 0 ? 'first' : 'retry', p.nowMs, horizon);
    if (a.go && a.atMs > p.nowMs && takenAhead >= (p.aheadLimit ?? Infinity))
      a = { go: false, state: pacer, reason: 'rate', untilMs: a.atMs };
    let replayTake: TokenBucketState | undefined;
    if (replayRate !== undefined) {
      // The replay's token is taken for the time the attempt goes (the bucket token's, within the
      // horizon) and checked first: a replay held by its own rate spends none of the bucket's tokens.
      const take = takeToken(
        { rate: replayRate, burst: 1 },
        replayTokens.get(c.replayId!) ?? p.replayPacers.get(c.replayId!) ?? FULL_BUCKET,
        a.go ? a.atMs : p.nowMs,
      );
      if (!take.taken) {
        const back = Math.max(p.nowMs, take.nextAvailableAtMs - horizon);
        if (back < wakeAt) wakeAt = back;
        const key = `replay_rate:${c.replayId}`;
        if (recorded.has(key)) return { kind: 'skip' };
        recorded.add(key);
        deferred.replay_rate = (deferred.replay_rate ?? 0) + 1;
        return { kind: 'defer', reason: 'replay_rate' };
      }
      replayTake = take.state;
    }
    if (a.go) {
      pacer = a.state;
      claims++;
      if (a.atMs > p.nowMs) takenAhead++;
      if (replayTake !== undefined) replayTokens.set(c.replayId!, replayTake);
      return { kind: 'claim', atMs: a.atMs };
    }
    // A rate token beyond the horizon: come back as it enters the horizon, so that a claim up to
    // a horizon late still finds it (an earlier claim would take more tokens each time, but
    // leave less room for lateness).
    if (a.reason === 'rate' && a.untilMs < rateAt) rateAt = a.untilMs;
    const comeBack = a.reason === 'rate' ? Math.max(p.nowMs, a.untilMs - horizon) : a.untilMs;
    if (comeBack < wakeAt) wakeAt = comeBack;
    const first = !recorded.has(a.reason);
    recorded.add(a.reason);
    if (first) deferred[a.reason] = (deferred[a.reason] ?? 0) + 1;
    if (a.reason === 'retry_budget') return first ? { kind: 'defer', reason: a.reason } : { kind: 'skip' };
    return first ? { kind: 'defer', reason: a.reason } : { kind: 'stop' };
  };
  return { decide, verdict: () => ({ pacer, replayTokens, deferred, wakeAt, rateAt, skippedAhead }) };
}

/** A bucket's admission settings, as the pacer takes them. */
export function pacerConfigOf(b: AdmissionBucket): PacerConfig {
  return { rate: b.drain.rate === null ? null : { rate: b.drain.rate, burst: b.drain.burst }, budget: b.drain.retryBudget };
}

/**
 * What follows an attempt whose worker died (its lease expired): due again at once, unless that
 * was the schedule's last attempt. A bucket deleted since is retried (its rows go with it anyway).
 */
export function afterLeaseExpiry(b: AdmissionBucket | undefined, attempts: number, nowMs: number): LeaseExpiry {
  const max = b?.drain.schedule.maxAttempts;
  if (max !== undefined && attempts >= max) return { kind: 'exhausted' };
  return { kind: 'retry', atMs: nowMs };
}

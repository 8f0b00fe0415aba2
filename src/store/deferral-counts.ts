/**
 * A bucket's deferrals by reason, as the `bucket_pacer` row keeps them (one column per reason) and
 * as `stats` shows them (`deferred.<reason>`). Both dialects' claims add what a walk recorded
 * (ClaimVerdict.deferred: each reason once per walk, on the delivery at the head of the line), the
 * same count the Prometheus counter hookbucket_deferrals_total adds in the worker that claimed.
 */
import type { ClaimVerdict } from '../policy/admission.js';
import type { BucketPacerTable } from './schema.js';

export const DEFERRAL_REASONS = ['rate', 'retry_budget', 'retry_after', 'replay_rate'] as const;
export type DeferralReason = (typeof DEFERRAL_REASONS)[number];

export const DEFERRAL_COLUMNS = {
  rate: 'deferred_rate',
  retry_budget: 'deferred_retry_budget',
  retry_after: 'deferred_retry_after',
  replay_rate: 'deferred_replay_rate',
} as const satisfies Record<DeferralReason, keyof BucketPacerTable>;

/** What a claim adds, in DEFERRAL_REASONS order; null when it deferred nothing. */
export function deferralIncrements(deferred: ClaimVerdict['deferred']): number[] | null {
  const n = DEFERRAL_REASONS.map((r) => deferred[r] ?? 0);
  return n.some((x) => x > 0) ? n : null;
}

/** A row's counts by reason, zeros left out. */
export function deferralsOf(row: Partial<Pick<BucketPacerTable, (typeof DEFERRAL_COLUMNS)[DeferralReason]>>): Record<string, number> {
  const out: Record<string, number> = {};
  for (const r of DEFERRAL_REASONS) {
    const n = Number(row[DEFERRAL_COLUMNS[r]] ?? 0);
    if (n > 0) out[r] = n;
  }
  return out;
}

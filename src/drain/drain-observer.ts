import type { DeferReason } from '../policy/pacer.js';
import type { AttemptOutcome } from '../store/schema.js';

/**
 * What the drain worker reports as it goes, for whoever watches (the Prometheus metrics in
 * src/metrics/, wired in main.ts). The worker calls these only once the store has recorded the
 * fact (an attempt row completed, a deferral written by a claim), so a count never runs ahead of
 * the database. Implementations must not throw and must return at once.
 */
export interface DrainObserver {
  /**
   * An attempt the store has just completed. `durationMs`: connect to last byte read, null for a
   * lease that expired (its worker died; the time it took is unknown). Attempts claimed ahead and
   * given back unsent are not reported: they never went out.
   */
  attemptRecorded(bucket: string, outcome: AttemptOutcome, durationMs: number | null): void;
  /** Deliveries a committed claim held back, by reason (policy/admission.ts counts each reason once per walk). */
  deferred(bucket: string, reason: DeferReason | 'replay_rate', count: number): void;
}

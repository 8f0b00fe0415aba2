/**
 * `hookbucket stats` fields, derived from the store's raw per-bucket figures. Pure: no I/O, the
 * time comes in as an argument. The field names are a public contract: `health --fail-on`
 * expressions and scripts reading `stats --json` use them (README "stats").
 *
 * Two kinds of field:
 * - current totals, as the database holds them now: the request counts by state, `superseded`,
 *   `oldest_pending_age_s` and `rejected` (refusals are counted since the bucket was created);
 * - windowed figures over the last `--window`: `received_in_window`, `settled`, `success_rate`,
 *   `attempts`, `attempt_success_rate` and the latency percentiles.
 */
import type { StatsSample } from '../store/store.js';

export interface StatsFields {
  /** Requests stored (every state). */
  received: number;
  pending: number;
  retrying: number;
  delivering: number;
  /** pending or retrying in a paused bucket (not counted again as pending or retrying). */
  held: number;
  delivered: number;
  failed: number;
  exhausted: number;
  /** Accepted, with no delivery to the bucket destination (a bucket without one, or imported without --deliver). */
  none: number;
  /** Stored but never delivered (issue 15's dispositions): failed verification under --on-invalid quarantine, */
  quarantined: number;
  /** a repeat of an event already seen within the --dedup window, */
  duplicate: number;
  /** a URL handshake answered inline. (`rejected` stays the ingest refusals.) */
  handshake: number;
  /** Superseded deliveries (not requests: a request's own state is never superseded). */
  superseded: number;
  /** Age of the oldest request still waiting (pending, retrying, delivering or held), whole seconds; null when none waits. */
  oldest_pending_age_s: number | null;
  /** Requests stored in the window. */
  received_in_window: number;
  /** Deliveries that settled (delivered, failed, exhausted) in the window. */
  settled: number;
  /** delivered / settled in the window; null when nothing settled. */
  success_rate: number | null;
  /** Attempts started in the window that finished (released ones are not attempts). */
  attempts: number;
  /** Attempts whose outcome was delivered / attempts; null when there were none. */
  attempt_success_rate: number | null;
  /** Nearest-rank percentiles of those attempts' durations; null when none has one. */
  latency_p50_ms: number | null;
  latency_p99_ms: number | null;
  /** Ingest refusals by reason (current totals). */
  rejected: Record<string, number>;
  rejected_total: number;
  /**
   * Deliveries held back by the drain, by reason: rate, retry_budget, retry_after, replay_rate
   * (current totals since the bucket was made, every reason listed). A claim counts each reason
   * once per walk, on the delivery at the head of the line: the count of times the line was held,
   * not of requests held. The same count as hookbucket_deferrals_total{bucket,reason}.
   */
  deferred: Record<string, number>;
  deferred_total: number;
}

/** The reasons `deferred` always lists (store/deferral-counts.ts has the same four). */
export const DEFERRAL_REASONS = ['rate', 'retry_budget', 'retry_after', 'replay_rate'] as const;

/** The numeric fields, in display order; `health` expressions may name any of them (and `rejected.<reason>`). */
export const NUMERIC_FIELDS = [
  'received',
  'pending',
  'retrying',
  'delivering',
  'held',
  'delivered',
  'failed',
  'exhausted',
  'none',
  'quarantined',
  'duplicate',
  'handshake',
  'superseded',
  'oldest_pending_age_s',
  'received_in_window',
  'settled',
  'success_rate',
  'attempts',
  'attempt_success_rate',
  'latency_p50_ms',
  'latency_p99_ms',
  'rejected_total',
  'deferred_total',
] as const satisfies ReadonlyArray<keyof StatsFields>;

export type NumericField = (typeof NUMERIC_FIELDS)[number];

const NUMERIC: ReadonlySet<string> = new Set(NUMERIC_FIELDS);

/** `rejected.body_too_large`: one refusal reason's count (0 for a reason never seen). */
const REJECTED_REASON = /^rejected\.([a-z][a-z0-9_]*)$/;
/** `deferred.retry_budget`: one deferral reason's count. */
const DEFERRED_REASON = /^deferred\.(rate|retry_budget|retry_after|replay_rate)$/;

/** Whether `name` is a field an expression may use. */
export function isStatsField(name: string): boolean {
  return NUMERIC.has(name) || REJECTED_REASON.test(name) || DEFERRED_REASON.test(name);
}

/** A field's value: a number, or null where the README says it can be null. */
export function fieldValue(f: StatsFields, name: string): number | null {
  const m = REJECTED_REASON.exec(name);
  if (m) return f.rejected[m[1]!] ?? 0;
  const d = DEFERRED_REASON.exec(name);
  if (d) return f.deferred[d[1]!] ?? 0;
  if (!NUMERIC.has(name)) throw new Error(`not a stats field: ${name}`);
  return f[name as NumericField];
}

/**
 * The smallest value v such that at least p% of the samples are ≤ v (nearest rank), from a
 * histogram of [value, count] pairs in any order; null when it holds no samples.
 */
export function percentile(histogram: ReadonlyArray<readonly [number, number]>, p: number): number | null {
  if (!(p > 0 && p <= 100)) throw new RangeError(`percentile must be in (0, 100], got ${p}`);
  const sorted = histogram.filter(([, n]) => n > 0).sort((a, b) => a[0] - b[0]);
  const total = sorted.reduce((s, [, n]) => s + n, 0);
  if (total === 0) return null;
  const rank = Math.max(1, Math.ceil((p / 100) * total));
  let seen = 0;
  for (const [v, n] of sorted) {
    seen += n;
    if (seen >= rank) return v;
  }
  return sorted[sorted.length - 1]![0];
}

const ratio = (num: number, den: number): number | null => (den === 0 ? null : num / den);

function addInto(into: Record<string, number>, from: Record<string, number>): void {
  for (const [k, n] of Object.entries(from)) into[k] = (into[k] ?? 0) + n;
}

/**
 * The stats fields over one or more buckets taken together (all buckets: pass every sample, plus
 * the refusals that named no bucket as `extraRejected`).
 */
export function computeStats(samples: readonly StatsSample[], nowMs: number, extraRejected: Record<string, number> = {}): StatsFields {
  const f: StatsFields = {
    received: 0,
    pending: 0,
    retrying: 0,
    delivering: 0,
    held: 0,
    delivered: 0,
    failed: 0,
    exhausted: 0,
    none: 0,
    quarantined: 0,
    duplicate: 0,
    handshake: 0,
    superseded: 0,
    oldest_pending_age_s: null,
    received_in_window: 0,
    settled: 0,
    success_rate: null,
    attempts: 0,
    attempt_success_rate: null,
    latency_p50_ms: null,
    latency_p99_ms: null,
    rejected: {},
    rejected_total: 0,
    deferred: Object.fromEntries(DEFERRAL_REASONS.map((r) => [r, 0])),
    deferred_total: 0,
  };
  let oldest: number | null = null;
  let settledDelivered = 0;
  let attemptsDelivered = 0;
  const latency = new Map<number, number>();
  for (const s of samples) {
    const l = s.latest;
    const waiting = (l.pending ?? 0) + (l.retrying ?? 0);
    f.received += s.requests;
    if (s.paused) f.held += waiting;
    else {
      f.pending += l.pending ?? 0;
      f.retrying += l.retrying ?? 0;
    }
    f.delivering += l.delivering ?? 0;
    f.delivered += l.delivered ?? 0;
    f.failed += l.failed ?? 0;
    f.exhausted += l.exhausted ?? 0;
    const withDelivery = Object.values(l).reduce((a, n) => a + (n ?? 0), 0);
    const d = s.dispositions ?? {};
    f.quarantined += d.quarantined ?? 0;
    f.duplicate += d.duplicate ?? 0;
    f.handshake += d.handshake ?? 0;
    f.none += Math.max(0, s.requests - withDelivery - (d.quarantined ?? 0) - (d.duplicate ?? 0) - (d.handshake ?? 0));
    f.superseded += s.superseded;
    if (s.oldestWaitingAt !== null && (oldest === null || s.oldestWaitingAt < oldest)) oldest = s.oldestWaitingAt;
    f.received_in_window += s.receivedInWindow;
    f.settled += s.settled.delivered + s.settled.failed + s.settled.exhausted;
    settledDelivered += s.settled.delivered;
    for (const a of s.attempts) {
      f.attempts += a.count;
      if (a.delivered) attemptsDelivered += a.count;
      if (a.durationMs !== null) latency.set(a.durationMs, (latency.get(a.durationMs) ?? 0) + a.count);
    }
    addInto(f.rejected, s.rejected);
    addInto(f.deferred, s.deferred);
  }
  f.deferred_total = Object.values(f.deferred).reduce((a, n) => a + n, 0);
  addInto(f.rejected, extraRejected);
  f.rejected_total = Object.values(f.rejected).reduce((a, n) => a + n, 0);
  f.oldest_pending_age_s = oldest === null ? null : Math.max(0, Math.floor((nowMs - oldest) / 1000));
  f.success_rate = ratio(settledDelivered, f.settled);
  f.attempt_success_rate = ratio(attemptsDelivered, f.attempts);
  const hist = [...latency];
  f.latency_p50_ms = percentile(hist, 50);
  f.latency_p99_ms = percentile(hist, 99);
  return f;
}

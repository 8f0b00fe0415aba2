/**
 * A bucket's pacer state (policy/pacer.ts) as the `bucket_pacer` row both dialects keep, and back.
 * The store owns this state: each claim reads the row under its lock, runs the pure admission
 * decider on it, and writes it back only when it moved (most claims of a bucket with no rate move
 * only the retry budget's window).
 *
 * The retry budget is kept as its live seconds only, `[[second, firsts, retries], …]`: at most 60
 * entries, none for a quiet bucket.
 */
import { BUDGET_WINDOW_SECONDS, emptyRetryBudget, type RetryBudgetState } from '../policy/retry-budget.js';
import { newPacer, type PacerState } from '../policy/pacer.js';
import type { BucketPacerTable } from './schema.js';

export type PacerColumns = Pick<BucketPacerTable, 'full_at' | 'budget' | 'blocked_until'>;

/** The row's state, or a fresh pacer when there is no row or it belongs to an older bucket of that name. */
export function pacerFromRow(row: (PacerColumns & { bucket_created_at: number }) | undefined, bucketCreatedAt: number): PacerState {
  if (row === undefined || Number(row.bucket_created_at) !== bucketCreatedAt) return newPacer();
  return { tokens: { fullAtMs: Number(row.full_at) }, budget: budgetFromJson(row.budget), blockedUntilMs: Number(row.blocked_until) };
}

export function pacerToRow(s: PacerState): PacerColumns {
  return { full_at: s.tokens.fullAtMs, budget: budgetToJson(s.budget), blocked_until: s.blockedUntilMs };
}

/** Whether writing `next` over `before` would change the row. */
export function pacerRowChanged(before: PacerColumns, next: PacerColumns): boolean {
  return Number(before.full_at) !== next.full_at || Number(before.blocked_until) !== next.blocked_until || before.budget !== next.budget;
}

function budgetToJson(b: RetryBudgetState): string {
  const live: Array<[number, number, number]> = [];
  for (let i = 0; i < BUDGET_WINDOW_SECONDS; i++) {
    const second = b.seconds[i]!;
    if (Number.isFinite(second) && (b.firsts[i]! > 0 || b.retries[i]! > 0)) live.push([second, b.firsts[i]!, b.retries[i]!]);
  }
  live.sort((x, y) => x[0] - y[0]);
  return JSON.stringify(live);
}

function budgetFromJson(text: string): RetryBudgetState {
  const empty = emptyRetryBudget();
  const seconds = empty.seconds.slice();
  const firsts = empty.firsts.slice();
  const retries = empty.retries.slice();
  let live: unknown;
  try {
    live = JSON.parse(text);
  } catch {
    return empty; // not ours to fail a claim over: an unreadable window counts as empty
  }
  if (!Array.isArray(live)) return empty;
  for (const entry of live) {
    if (!Array.isArray(entry) || entry.length !== 3 || !entry.every((n) => typeof n === 'number' && Number.isFinite(n))) continue;
    const [second, f, r] = entry as [number, number, number];
    const i = ((second % BUDGET_WINDOW_SECONDS) + BUDGET_WINDOW_SECONDS) % BUDGET_WINDOW_SECONDS;
    // Two entries for one slot: the later second wins (the earlier one has left the window).
    if (seconds[i]! > second) continue;
    seconds[i] = second;
    firsts[i] = f;
    retries[i] = r;
  }
  return { seconds, firsts, retries };
}

/** The state moved by `deltaMs` (database time to a worker's clock and back); the budget's seconds are kept as they are. */
export function shiftPacer(s: PacerState, deltaMs: number): PacerState {
  if (deltaMs === 0) return s;
  return {
    ...s,
    tokens: { fullAtMs: s.tokens.fullAtMs === 0 ? 0 : s.tokens.fullAtMs + deltaMs },
    blockedUntilMs: s.blockedUntilMs === 0 ? 0 : s.blockedUntilMs + deltaMs,
  };
}

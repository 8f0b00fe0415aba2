/**
 * Retention rules, shared by `hookbucket prune` and a bucket's `--retain` (applied by the server).
 * Pure.
 *
 * - Only requests in a terminal state go: `delivered` by default; `failed`, `exhausted` and `none`
 *   only when named (they are the evidence an operator may still want to replay).
 * - A request with any live delivery (pending, retrying or delivering, to any destination: a
 *   `replay --to` included) never goes, whatever its own state.
 * - Age is the request's `received_at`.
 */
import { formatDuration } from '../config/units.js';
import type { PrunableState } from '../store/store.js';

export const PRUNABLE_STATES: readonly PrunableState[] = ['delivered', 'failed', 'exhausted', 'none'];
export const DEFAULT_PRUNE_STATES: readonly PrunableState[] = ['delivered'];
/** Delivery states that keep a request (and its whole history) from being pruned. */
export const LIVE_DELIVERY_STATES = ['pending', 'retrying', 'delivering'] as const;

const LIVE_REQUEST_STATES = new Set(['pending', 'retrying', 'delivering', 'held']);

/** `delivered,failed` → the states, deduplicated in canonical order; an error message for anything else. */
export function parsePruneStates(text: string): { ok: true; states: PrunableState[] } | { ok: false; message: string } {
  const words = text
    .split(',')
    .map((w) => w.trim().toLowerCase())
    .filter((w) => w !== '');
  if (words.length === 0) return { ok: false, message: `name one or more of ${PRUNABLE_STATES.join(', ')}` };
  for (const w of words) {
    if (LIVE_REQUEST_STATES.has(w)) {
      return { ok: false, message: `${w} requests are never pruned: only ${PRUNABLE_STATES.join(', ')} can be` };
    }
    if (!(PRUNABLE_STATES as readonly string[]).includes(w)) {
      return { ok: false, message: `unknown state ${JSON.stringify(w)}: use ${PRUNABLE_STATES.join(', ')}` };
    }
  }
  return { ok: true, states: PRUNABLE_STATES.filter((s) => words.includes(s)) };
}

/** The received_at before which requests are old enough: `nowMs - olderThanMs`. */
export function pruneCutoff(nowMs: number, olderThanMs: number): number {
  return nowMs - olderThanMs;
}

const DAY_MS = 86_400_000;

/** Retention ages as people set them: whole days as `30d`, anything else as a duration (`36h`, `90m`). */
export function formatAge(ms: number): string {
  return ms >= DAY_MS && ms % DAY_MS === 0 ? `${ms / DAY_MS}d` : formatDuration(ms);
}

/**
 * Replay policy, pure: what a replay must be told, when it needs a confirmation, and what a
 * finished (or unfinished) replay means as an exit code. The store applies the state machine
 * (src/store/sqlite/sqlite-replay.ts):
 *
 * - each selected request gets a new delivery, generation = the request's highest + 1, with a
 *   fresh attempt history; earlier generations and their attempts are never touched;
 * - to the bucket's destination, an earlier pending or retrying delivery becomes `superseded` at
 *   once, and one in flight finishes its attempt (recorded), then becomes `superseded` whatever
 *   its outcome; until then the worker does not claim the new generation, so a request never has
 *   two attempts in flight to the bucket's destination. If that last attempt succeeded, the new
 *   generation is still sent: the operator asked for a replay;
 * - `--to <url>` supersedes nothing;
 * - replay deliveries obey the bucket's rate, concurrency and pause, their first attempts count
 *   toward the retry budget like any first attempt, and `--rate` paces them further.
 */
import type { ReplayProgress } from '../store/store.js';

/** Above this many requests, a replay needs --yes (or a yes at the TTY prompt). */
export const CONFIRM_ABOVE = 100;

export interface ReplayScope {
  all: boolean;
  ids: readonly string[];
  /** Any list filter or --state/--since/--until given. */
  filtered: boolean;
}

/** Why a replay's scope is not acceptable, or undefined. A bare `replay <bucket>` never means "everything". */
export function scopeProblem(s: ReplayScope): string | undefined {
  if (!s.all && s.ids.length === 0 && !s.filtered) {
    return 'say which requests to replay: --state exhausted,failed (the usual choice after a fix), --id <id>…, --since/--until, a list filter, or --all';
  }
  if (s.all && (s.ids.length > 0 || s.filtered)) return '--all replays every request of the bucket: drop it, or drop the other selectors';
  return undefined;
}

export type Confirmation = 'not_needed' | 'ask' | 'refuse';

/** More than CONFIRM_ABOVE requests need --yes: a TTY is asked, anything else is refused (exit 2). */
export function confirmation(count: number, yes: boolean, interactive: boolean): Confirmation {
  if (yes || count <= CONFIRM_ABOVE) return 'not_needed';
  return interactive ? 'ask' : 'refuse';
}

export function isSettled(p: ReplayProgress): boolean {
  return p.settled >= p.total;
}

/** 0 when every delivery was delivered; 3 when some failed, exhausted or were superseded, or time ran out. */
export function replayExitCode(p: ReplayProgress, timedOut: boolean): 0 | 3 {
  return !timedOut && isSettled(p) && p.delivered === p.total ? 0 : 3;
}

/** Settled per second since `startMs`, and the time left at that pace (null until one has settled). */
export function pace(p: ReplayProgress, startSettled: number, startMs: number, nowMs: number): { perSecond: number; etaMs: number | null } {
  const done = p.settled - startSettled;
  const elapsed = Math.max(1, nowMs - startMs);
  const perSecond = (done * 1000) / elapsed;
  const remaining = p.total - p.settled;
  return { perSecond, etaMs: perSecond > 0 ? Math.round((remaining / perSecond) * 1000) : remaining === 0 ? 0 : null };
}

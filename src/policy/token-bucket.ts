/**
 * The per-bucket rate limit (`--rate 200/s --burst 1`): a token bucket that bounds every attempt,
 * first attempts, retries and replays alike. Pure: the state is plain data and every function
 * takes `now`, so the worker, `simulate` and tests drive it with whatever clock they have.
 *
 * Stored as the time the bucket is full again (the "theoretical arrival time" of GCRA, the cell
 * rate algorithm of ATM networks and of redis-cell), which is one number instead of tokens plus
 * a refill time: tokens(now) = burst − max(0, fullAt − now) / interval.
 */

/** `count` tokens per `perMs`: `200/s` is { count: 200, perMs: 1000 }. */
export interface Rate {
  readonly count: number;
  readonly perMs: number;
}

const RATE_UNIT_MS: Record<string, number> = { s: 1000, m: 60_000, h: 3_600_000 };

/** `200/s`, `600/m`, `30/h`, `0.5/s`; undefined for anything else (a zero rate included). */
export function parseRate(text: string): Rate | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*\/\s*(s|m|h)\s*$/i.exec(text);
  if (!m) return undefined;
  const count = Number(m[1]);
  if (!(count > 0) || !Number.isFinite(count)) return undefined;
  return { count, perMs: RATE_UNIT_MS[m[2]!.toLowerCase()]! };
}

export function formatRate(r: Rate): string {
  const unit = Object.entries(RATE_UNIT_MS).find(([, ms]) => ms === r.perMs)?.[0];
  return unit === undefined ? `${perSecond(r)}/s` : `${r.count}/${unit}`;
}

export function perSecond(r: Rate): number {
  return (r.count * 1000) / r.perMs;
}

/** Milliseconds between tokens: 5 for 200/s, 120000 for 30/h. */
export function intervalMs(r: Rate): number {
  return r.perMs / r.count;
}

export interface TokenBucketConfig {
  readonly rate: Rate;
  /** Tokens the bucket holds when full: how many attempts may go back to back. */
  readonly burst: number;
}

export const DEFAULT_BURST = 1;

export interface TokenBucketState {
  /** When the bucket is full again; at or before `now` it is full. 0 starts it full. */
  readonly fullAtMs: number;
}

export const FULL_BUCKET: TokenBucketState = Object.freeze({ fullAtMs: 0 });

export interface Take {
  state: TokenBucketState;
  taken: boolean;
  /** The earliest time a token is available after this call: now when one is left. */
  nextAvailableAtMs: number;
}

// Sums of fractional intervals (1000/7 ms) drift in the last bits; a token due at `t` must be
// takeable at `t`, so comparisons allow a microsecond.
const EPSILON_MS = 1e-3;

/** Tokens available at `nowMs` (fractional), between 0 and burst. */
export function availableTokens(c: TokenBucketConfig, s: TokenBucketState, nowMs: number): number {
  return Math.max(0, c.burst - Math.max(0, s.fullAtMs - nowMs) / intervalMs(c.rate));
}

/** Takes one token at `nowMs` if there is one. */
export function takeToken(c: TokenBucketConfig, s: TokenBucketState, nowMs: number): Take {
  const interval = intervalMs(c.rate);
  const tolerance = interval * (c.burst - 1);
  // A caller that comes back a little late (a timer fires 0.3 ms after the token was due) keeps the
  // schedule instead of losing its lateness for good: with burst 1 at 200/s that loss alone ran
  // the rate about 15% slow. Only after a gap of a whole interval does the schedule restart at
  // now. Takes still never exceed rate + burst in any window: each one's nominal time lies within
  // one interval of when it is taken, and nominal times stay one interval apart.
  const fullAt = nowMs - s.fullAtMs < interval ? s.fullAtMs : Math.max(s.fullAtMs, nowMs);
  if (fullAt - nowMs > tolerance + EPSILON_MS) {
    return { state: s, taken: false, nextAvailableAtMs: fullAt - tolerance };
  }
  const next = fullAt + interval;
  return { state: { fullAtMs: next }, taken: true, nextAvailableAtMs: Math.max(nowMs, next - tolerance) };
}

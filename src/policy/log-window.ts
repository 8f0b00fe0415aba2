/**
 * When a warning about a bucket goes to the log at once, and when it only adds to a count: an
 * outage must not write a line per failed delivery. Pure: the caller keeps one `LogWindow` per
 * bucket and topic (failures, Retry-After blocks), and passes the time in.
 *
 * - The first event of a quiet bucket is logged at once (`first`), and opens a window of
 *   `windowMs`.
 * - Events inside the window are only counted, by kind (`failed`, `exhausted`, ...).
 * - When the window ends with a count, one `more` line says how many, and a new window opens at
 *   once: a lasting outage writes one line per bucket per window. A window that ends with nothing
 *   counted closes, and the next event is logged at once again.
 *
 * So a bucket writes at most one line per window and topic, plus the first.
 */

export interface LogWindow {
  /** When the window opened. */
  readonly startMs: number;
  /** Events counted (not logged) in it, by kind. */
  readonly counts: Readonly<Record<string, number>>;
}

export type LogLine =
  /** Log this event now, in full. */
  | { type: 'first'; kind: string }
  /** Events counted over [fromMs, toMs), by kind, and their total. */
  | { type: 'more'; fromMs: number; toMs: number; counts: Readonly<Record<string, number>>; total: number };

export interface LogStep {
  /** The window after this step; null: none open (the next event is logged at once). */
  window: LogWindow | null;
  /** What to write, in order. */
  lines: LogLine[];
}

const total = (counts: Readonly<Record<string, number>>): number => Object.values(counts).reduce((a, n) => a + n, 0);

/** The window's end, if `nowMs` is past it: its count as a `more` line (if any), and the window that follows. */
export function tickLogWindow(w: LogWindow | null, nowMs: number, windowMs: number): LogStep {
  if (w === null || nowMs < w.startMs + windowMs) return { window: w, lines: [] };
  const n = total(w.counts);
  if (n === 0) return { window: null, lines: [] };
  return {
    window: { startMs: nowMs, counts: {} },
    lines: [{ type: 'more', fromMs: w.startMs, toMs: nowMs, counts: w.counts, total: n }],
  };
}

/** An event of `kind` at `nowMs`: logged at once when no window is open, else counted. */
export function noteLogEvent(w: LogWindow | null, kind: string, nowMs: number, windowMs: number): LogStep {
  const ticked = tickLogWindow(w, nowMs, windowMs);
  if (ticked.window === null) return { window: { startMs: nowMs, counts: {} }, lines: [...ticked.lines, { type: 'first', kind }] };
  const counts = { ...ticked.window.counts, [kind]: (ticked.window.counts[kind] ?? 0) + 1 };
  return { window: { startMs: ticked.window.startMs, counts }, lines: ticked.lines };
}

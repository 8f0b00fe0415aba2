/**
 * Which buckets a drain pass visits, and in what order. Pure: the due bucket names come in (from
 * one indexed query, src/store/sqlite/bucket-due.ts), the order goes out.
 *
 * Fairness: a pass visits every due bucket once and claims at most its free slots there, so a
 * bucket with a million due deliveries takes `concurrency` of them per pass and never holds back
 * another bucket's first attempt (there is no global `order by next_attempt_at limit n` across
 * buckets, which would serve the oldest backlog first). When more than `max` buckets are due, the
 * pass takes `max` of them in name order starting after where the last one stopped, and the next
 * pass runs at once from there: every due bucket is visited within ceil(due / max) passes.
 */

/** Buckets one pass visits at most: at ~50 µs per empty claim transaction, about 25 ms. */
export const MAX_BUCKETS_PER_PASS = 500;

export interface PassOrder {
  /** Bucket names to visit, in order. */
  order: string[];
  /** Where the next pass starts (after this name); undefined: from the first name. */
  resumeAfter: string | undefined;
  /** Some due buckets were left for the next pass, which should run at once. */
  more: boolean;
}

export function passOrder(names: Iterable<string>, after: string | undefined, max: number = MAX_BUCKETS_PER_PASS): PassOrder {
  const sorted = [...new Set(names)].sort();
  let start = 0;
  if (after !== undefined) {
    start = sorted.findIndex((n) => n > after);
    if (start < 0) start = 0;
  }
  const rotated = start === 0 ? sorted : sorted.slice(start).concat(sorted.slice(0, start));
  if (rotated.length <= max) return { order: rotated, resumeAfter: undefined, more: false };
  const order = rotated.slice(0, Math.max(1, max));
  return { order, resumeAfter: order[order.length - 1], more: true };
}

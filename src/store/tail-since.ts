import { idFloorAt } from '../shared/ids.js';
import type { TailCursor, TailEvent } from './store.js';

/** Requests one `tail` call gives at most (both dialects); a call that gives fewer has caught up. */
export const TAIL_READ_REQUESTS = 1000;

/**
 * What happened in a bucket since `sinceMs` (`requests tail --since`): the requests received and
 * the attempts finished since then, read with `tail` from a catch-up cursor until it has caught up,
 * in time order; and the cursor that follows on from there, so nothing between the two is missed
 * or given twice. Memory grows with the window's events, as a live tail's look-back does.
 */
export async function readSince(
  tail: (bucket: string, cursor: TailCursor) => Promise<{ events: TailEvent[]; cursor: TailCursor }>,
  bucket: string,
  sinceMs: number,
): Promise<{ events: TailEvent[]; cursor: TailCursor }> {
  // Every request id made at or after sinceMs is above the floor.
  let cursor: TailCursor = { requestId: idFloorAt(sinceMs), sinceMs, seen: [], catchUp: true };
  const events: TailEvent[] = [];
  for (;;) {
    const r = await tail(bucket, cursor);
    cursor = r.cursor;
    events.push(...r.events);
    if (r.events.filter((e) => e.kind === 'request').length < TAIL_READ_REQUESTS) break;
  }
  events.sort((x, y) => x.at - y.at);
  return { events, cursor };
}

/** One key per event, the same for a request or an attempt however it was read (dedupe across reads). */
export function tailEventKey(e: { event: string; id?: unknown; delivery_id?: unknown; attempt?: unknown }): string {
  return e.event === 'request' ? `r:${String(e.id)}` : `a:${String(e.delivery_id)}#${String(e.attempt)}`;
}

import { iso } from '../json/iso.js';
import { formatRate } from '../policy/token-bucket.js';
import type { Replay, ReplayProgress } from '../store/store.js';

/** Stable JSON of a replay (README "JSON fields"). */
export function replayJson(r: Replay, p?: ReplayProgress) {
  return {
    id: r.id,
    bucket: r.bucket,
    selection: r.selection,
    destination: r.destination,
    rate: r.rate === null ? null : formatRate(r.rate),
    total: r.total,
    superseded_at_start: r.superseded,
    created_at: iso(r.createdAt),
    ...(p ? { progress: progressJson(p) } : {}),
  };
}

export function progressJson(p: ReplayProgress) {
  return {
    total: p.total,
    delivered: p.delivered,
    failed: p.failed,
    exhausted: p.exhausted,
    superseded: p.superseded,
    pending: p.pending,
    retrying: p.retrying,
    delivering: p.delivering,
    held: p.held,
    remaining: p.total - p.settled,
    paused: p.paused,
  };
}

/**
 * Dialect-neutral pieces of replays: a `replays` row to the contract's Replay, and a replay's
 * progress from its deliveries counted by state. Each dialect's replay file (sqlite/sqlite-replay.ts,
 * postgres/pg-replay.ts) reads the rows; these give them their meaning.
 */
import type { ReplaysTable } from './schema.js';
import type { Replay, ReplayProgress } from './store.js';

/** A replay's deliveries with one state: how many, and the latest settled_at among them. */
export type ReplayStateRow = { state: string; n: number; last: number | null };

export function toReplay(row: ReplaysTable): Replay {
  return {
    id: row.id,
    bucket: row.bucket,
    selection: JSON.parse(row.selection) as Record<string, unknown>,
    destination: row.destination,
    rate: row.rate_count === null || row.rate_per_ms === null ? null : { count: Number(row.rate_count), perMs: Number(row.rate_per_ms) },
    total: Number(row.total),
    superseded: Number(row.superseded),
    createdAt: Number(row.created_at),
  };
}

/** The progress figures; pending and retrying count as `held` while the bucket is paused. */
export function toReplayProgress(rows: readonly ReplayStateRow[], paused: boolean): ReplayProgress {
  const p: ReplayProgress = {
    total: 0,
    pending: 0,
    retrying: 0,
    delivering: 0,
    held: 0,
    delivered: 0,
    failed: 0,
    exhausted: 0,
    superseded: 0,
    settled: 0,
    paused,
    lastSettledAt: null,
  };
  for (const r of rows) {
    const n = Number(r.n);
    p.total += n;
    const state = paused && (r.state === 'pending' || r.state === 'retrying') ? 'held' : r.state;
    const counts = p as unknown as Record<string, number>;
    if (typeof counts[state] === 'number') counts[state] = counts[state]! + n;
    if (r.state === 'delivered' || r.state === 'failed' || r.state === 'exhausted' || r.state === 'superseded') {
      p.settled += n;
      if (r.last !== null) p.lastSettledAt = Math.max(p.lastSettledAt ?? 0, Number(r.last));
    }
  }
  return p;
}

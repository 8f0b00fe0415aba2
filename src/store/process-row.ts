/** A `workers` row as the contract's ProcessRecord (both dialects). */
import type { WorkersTable } from './schema.js';
import type { ProcessRecord } from './store.js';

/** Heartbeats come every third of this; a process that misses three is taken as dead. */
export const PROCESS_TTL_MS = 15_000;

/** Rows of processes gone this long are deleted when another process beats (the table stays small). */
export const PROCESS_KEEP_MS = 7 * 24 * 3_600_000; // 7 days

export function toProcessRecord(r: WorkersTable, nowMs: number, inflight = 0): ProcessRecord {
  const stoppedAt = r.stopped_at === null ? null : Number(r.stopped_at);
  return {
    id: r.id,
    roles: r.roles.split(',').filter((x): x is 'receiver' | 'worker' => x === 'receiver' || x === 'worker'),
    host: r.host,
    pid: Number(r.pid),
    info: r.info,
    leaseMs: r.lease_ms === null ? null : Number(r.lease_ms),
    startedAt: Number(r.started_at),
    heartbeatAt: Number(r.heartbeat_at),
    expiresAt: Number(r.expires_at),
    stoppedAt,
    alive: stoppedAt === null && Number(r.expires_at) > nowMs,
    inflight,
  };
}

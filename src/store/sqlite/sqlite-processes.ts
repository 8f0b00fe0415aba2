/**
 * The process registry on SQLite (the `workers` table): the statements both connections that
 * write it use, the Store's (receivers) and the drain store's (workers). pg-processes.ts is the
 * PostgreSQL twin; process-row.ts reads the rows back.
 */
import type { ProcessBeat } from '../store.js';

export const UPSERT_PROCESS_SQL = `insert into workers (id, roles, host, pid, info, lease_ms, started_at, heartbeat_at, expires_at, stopped_at)
  values (@id, @roles, @host, @pid, @info, @lease_ms, @now, @now, @expires_at, null)
  on conflict (id) do update set roles = excluded.roles, info = excluded.info, lease_ms = excluded.lease_ms,
    heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at, stopped_at = null`;

/** Processes gone for PROCESS_KEEP_MS: their rows go (a `worker --once` from cron adds one per run). */
export const PRUNE_PROCESSES_SQL = 'delete from workers where expires_at < ?';

/**
 * What `processes()` lists: every live process and every one whose attempt still holds a
 * delivery, however many rows there are, then the newest others up to the limit.
 */
export const LIST_PROCESSES_SQL = `select * from workers where (stopped_at is null and expires_at > @now) or id in (select value from json_each(@held))
  union select * from (select * from workers order by started_at desc, id limit @limit)
  order by started_at desc, id`;

export const STOP_PROCESS_SQL = 'update workers set stopped_at = ?, expires_at = min(expires_at, ?) where id = ?';

/** The named parameters of UPSERT_PROCESS_SQL. */
export function processParams(p: ProcessBeat, nowMs: number, ttlMs: number) {
  return {
    id: p.id,
    roles: p.roles.join(','),
    host: p.host,
    pid: p.pid,
    info: p.info,
    lease_ms: p.leaseMs,
    now: nowMs,
    expires_at: nowMs + ttlMs,
  };
}

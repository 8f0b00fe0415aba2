/**
 * The process registry on PostgreSQL (the `workers` table): receivers and workers register and
 * beat, in the database's clock (process-row.ts reads the rows back).
 */
import { sql, type Kysely, type Transaction } from 'kysely';
import type { Database } from '../schema.js';
import type { ProcessBeat } from '../store.js';
import { PROCESS_KEEP_MS } from '../process-row.js';

type Db = Kysely<Database> | Transaction<Database>;

export async function upsertProcess(db: Db, p: ProcessBeat, nowMs: number, ttlMs: number): Promise<void> {
  await sql`insert into workers (id, roles, host, pid, info, lease_ms, started_at, heartbeat_at, expires_at, stopped_at)
      values (${p.id}, ${p.roles.join(',')}, ${p.host}, ${p.pid}, ${p.info}, ${p.leaseMs}, ${nowMs}, ${nowMs}, ${nowMs + ttlMs}, null)
    on conflict (id) do update set roles = excluded.roles, info = excluded.info, lease_ms = excluded.lease_ms,
      heartbeat_at = excluded.heartbeat_at, expires_at = excluded.expires_at, stopped_at = null`.execute(db);
  // Processes gone for a week: their rows go (a `worker --once` from cron adds one per run).
  await sql`delete from workers where expires_at < ${nowMs - PROCESS_KEEP_MS}`.execute(db);
}

export async function markProcessStopped(db: Db, id: string, nowMs: number): Promise<void> {
  await sql`update workers set stopped_at = ${nowMs}, expires_at = least(expires_at, ${nowMs}) where id = ${id}`.execute(db);
}

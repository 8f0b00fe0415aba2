import { sql } from 'kysely';
import { redactDbUrl } from '../../policy/redact.js';
import type { DataEnd } from '../migrate-data/data-end.js';
import { MIGRATION_TABLE } from '../migrate-data/data-end.js';
import { migrationProvider } from '../migrations/postgres/index.js';
import { DB_NOW } from './pg-clock.js';
import { settleWithin } from './pg-close.js';
import { createPgPool, migratePostgres, pgKysely } from './pg-pool.js';

/**
 * A PostgreSQL database as migrate-data's source or target: a small pool (the copy runs one batch
 * at a time), statements allowed minutes (a count over a large table), and the target committed
 * with synchronous_commit on: a run that reports success has its rows on disk.
 */
export async function openPgDataEnd(url: string): Promise<DataEnd> {
  const programVersion = Object.keys(await migrationProvider.getMigrations())
    .sort()
    .at(-1)!;
  const pool = createPgPool({
    url,
    max: 2,
    statementTimeoutMs: 10 * 60_000, // 10 min
    idleInTransactionTimeoutMs: 60_000, // 60 s
    connectTimeoutMs: 10_000, // 10 s
    synchronousCommit: 'on',
    applicationName: 'hookbucket migrate-data',
  });
  const db = pgKysely(pool);
  return {
    dialect: 'postgres',
    location: redactDbUrl(url),
    db,
    programVersion,
    async appliedVersion() {
      const t = await sql<{ r: string | null }>`select to_regclass(${MIGRATION_TABLE})::text as r`.execute(db);
      if (t.rows[0]?.r === null || t.rows[0]?.r === undefined) return null;
      const r = await sql<{ name: string | null }>`select max(name) as name from ${sql.table(MIGRATION_TABLE)}`.execute(db);
      return r.rows[0]?.name ?? null;
    },
    migrate: () => migratePostgres(db),
    async nowMs() {
      const r = await sql<{ now: number }>`select ${DB_NOW} as now`.execute(db);
      return Number(r.rows[0]!.now);
    },
    close: async () => {
      // Kysely's destroy ends the pool.
      await settleWithin(db.destroy());
    },
  };
}

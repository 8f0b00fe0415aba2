import pg from 'pg';
import {
  checkRows,
  MISSING_DELIVERIES,
  ORPHAN_ATTEMPTS,
  ORPHAN_DELIVERIES,
  type InvariantOptions,
  type InvariantReport,
  type InvariantRows,
  type RequestRow,
} from './invariant.js';

/**
 * The suite's invariant on a PostgreSQL database (the same checks as on a SQLite file, from
 * invariant.ts), read through a pg connection of its own, never through the receiver.
 *
 * The database's own check is amcheck's `bt_index_check` over every B-tree index of the four
 * tables the receiver writes (the PostgreSQL counterpart of `PRAGMA integrity_check`'s index
 * checks); where the server has no amcheck, it reports that instead of passing silently.
 */
export async function pgInvariantRows(url: string): Promise<InvariantRows> {
  const c = new pg.Client({ connectionString: url, statement_timeout: 120_000 }); // 120 s: a check never hangs
  await c.connect();
  const one = async (text: string, values: unknown[] = []): Promise<number> =>
    Number((await c.query({ text, values, rowMode: 'array' })).rows[0]?.[0] ?? 0);
  return {
    requestById: async (id) =>
      (await c.query<RequestRow>('select id, bucket, method, path, query, headers, body, size, sha256 from requests where id = $1', [id]))
        .rows[0],
    sha256Of: async (id) => (await c.query<{ sha256: string }>('select sha256 from requests where id = $1', [id])).rows[0]?.sha256,
    bucketNames: async () => (await c.query<{ name: string }>('select name from buckets')).rows.map((r) => r.name),
    requestIds: async (bucket) =>
      (await c.query<{ id: string }>('select id from requests where bucket = $1 order by id', [bucket])).rows.map((r) => r.id),
    orphanDeliveries: () => one(ORPHAN_DELIVERIES),
    orphanAttempts: () => one(ORPHAN_ATTEMPTS),
    missingDeliveries: () => one(MISSING_DELIVERIES),
    integrity: async () => {
      const has = await one(`select count(*) from pg_available_extensions where name = 'amcheck'`);
      if (has === 0) return 'skipped';
      await c.query('create extension if not exists amcheck');
      const { rows } = await c.query<{ index: string }>(
        `select ci.relname as index from pg_index i
           join pg_class ci on ci.oid = i.indexrelid join pg_am am on am.oid = ci.relam
          where am.amname = 'btree' and i.indrelid in ('buckets'::regclass, 'requests'::regclass, 'deliveries'::regclass, 'attempts'::regclass)`,
      );
      const bad: string[] = [];
      for (const r of rows) {
        try {
          await c.query(`select bt_index_check($1::regclass, true)`, [r.index]);
        } catch (e) {
          bad.push(`${r.index}: ${(e as Error).message}`);
        }
      }
      return bad.length === 0 ? 'ok' : bad.join('; ');
    },
    close: () => c.end(),
  };
}

/** The invariant on the PostgreSQL database `o.db` (a postgres:// URL). */
export async function checkPgInvariant(o: InvariantOptions): Promise<InvariantReport> {
  return checkRows(await pgInvariantRows(o.db), o);
}

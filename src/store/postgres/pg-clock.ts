import { sql, type Kysely } from 'kysely';

/**
 * The database server's clock as epoch ms. On PostgreSQL, due times and leases are written and
 * compared on this one clock, whichever host runs the receiver, the worker or the CLI
 * (clock_timestamp(): the time when it is read, not when the transaction began).
 */
export const DB_NOW_TEXT = 'floor(extract(epoch from clock_timestamp()) * 1000)::bigint';
export const DB_NOW = sql<number>`${sql.raw(DB_NOW_TEXT)}`;

/** Reads the database clock once (a transaction's "now"). */
// biome-ignore lint/suspicious/noExplicitAny: needs no table, so it takes any schema
export async function readDbNow(db: Kysely<any>): Promise<number> {
  const r = await sql<{ now: number }>`select ${DB_NOW} as now`.execute(db);
  return Number(r.rows[0]!.now);
}

/**
 * The time a transaction writes due times at: the database clock, or, for tests with a manual
 * clock (`useCallerClock`), the caller's own now, as SQLite does.
 */
// biome-ignore lint/suspicious/noExplicitAny: needs no table, so it takes any schema
export async function dueNow(db: Kysely<any>, callerNow: number, useCallerClock: boolean): Promise<number> {
  return useCallerClock ? callerNow : readDbNow(db);
}

import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import BetterSqlite3 from 'better-sqlite3';
import { createTestDatabase, type TestDatabase } from '../../helpers/pg-database.js';
import { checkInvariant, openForCheck, type InvariantOptions, type InvariantReport } from './invariant.js';
import { checkPgInvariant } from './pg-invariant.js';
import { HookbucketProcess, holdLock } from './serve-process.js';
import type { CaseContext } from './types.js';

/**
 * The database a case runs against, on either dialect: a SQLite file in the case's folder, or
 * (when the runner gives the case a PostgreSQL server, ctx.postgres) a fresh
 * `hookbucket_test_<random>` database dropped at dispose(). Cases pass `db` to `--db`, add
 * `serveFlags` to serve, and read the database through `check` (the invariant) and `scalar`/`all`.
 */
export interface TestStore {
  readonly dialect: 'SQLite' | 'PostgreSQL';
  /** The `--db` value: a file path or a postgres:// URL. */
  readonly db: string;
  /** Flags every `serve` of this store needs (PostgreSQL: `--spool-dir` in the case's folder). */
  readonly serveFlags: readonly string[];
  /** Where serve spools bodies. */
  readonly spoolDir: string;
  check(o: Omit<InvariantOptions, 'db'>): Promise<InvariantReport>;
  /** The first column of the first row, as a number; SQL written with `?` placeholders. */
  scalar(sql: string, ...params: unknown[]): Promise<number>;
  all<T>(sql: string, ...params: unknown[]): Promise<T[]>;
  /** Bytes the database takes (SQLite: pages × page size; PostgreSQL: pg_database_size). */
  sizeBytes(): Promise<number>;
  /**
   * Another program holding the lock a writer needs, for `ms`, resolved once held. SQLite: a
   * process in BEGIN IMMEDIATE. PostgreSQL: a process holding `LOCK TABLE requests IN EXCLUSIVE
   * MODE` (it conflicts with the ROW EXCLUSIVE lock every INSERT takes; reads go on).
   */
  holdWriteLock(ms: number): Promise<HookbucketProcess>;
  /**
   * Takes the write lock from a connection of its own and lets go at once: the ms it waited, or
   * an error past `timeoutMs` (a transaction left open by the receiver holds it). SQLite: BEGIN
   * IMMEDIATE; PostgreSQL: LOCK TABLE requests IN EXCLUSIVE MODE under lock_timeout.
   */
  takeWriteLock(timeoutMs: number): Promise<number>;
  /** Closes this side's connection (and drops a PostgreSQL database). */
  dispose(): Promise<void>;
}

export async function openTestStore(ctx: CaseContext, dir: string, file: string): Promise<TestStore> {
  return ctx.postgres ? pgTestStore(ctx.postgres, dir) : sqliteTestStore(join(dir, file));
}

export function sqliteTestStore(path: string): TestStore {
  let conn: BetterSqlite3.Database | undefined;
  const c = () => (conn ??= openForCheck(path));
  return {
    dialect: 'SQLite',
    db: path,
    serveFlags: [],
    spoolDir: `${path}-spool`,
    check: (o) => checkInvariant({ ...o, db: path }),
    scalar: async (sql, ...params) =>
      Number(
        c()
          .prepare(sql)
          .pluck()
          .get(...params) ?? 0,
      ),
    all: async <T>(sql: string, ...params: unknown[]) =>
      c()
        .prepare(sql)
        .all(...params) as T[],
    sizeBytes: async () => {
      try {
        return (c().pragma('page_count', { simple: true }) as number) * (c().pragma('page_size', { simple: true }) as number);
      } catch {
        return 0;
      }
    },
    holdWriteLock: (ms) => holdLock(path, 'write', ms),
    takeWriteLock: async (timeoutMs) => {
      const other = new BetterSqlite3(path, { timeout: timeoutMs });
      const t0 = performance.now();
      try {
        other.exec('BEGIN IMMEDIATE');
        other.exec('ROLLBACK');
        return performance.now() - t0;
      } finally {
        other.close();
      }
    },
    dispose: async () => {
      conn?.close();
      conn = undefined;
    },
  };
}

/** `?` placeholders as PostgreSQL's `$1, $2, …` (the suite's SQL has no `?` inside literals). */
function numbered(sql: string): string {
  let n = 0;
  return sql.replace(/\?/g, () => `$${++n}`);
}

export async function pgTestStore(server: string, dir: string): Promise<TestStore> {
  const database: TestDatabase = await createTestDatabase(server);
  let client: pg.Client | undefined;
  const c = async () => {
    if (!client) {
      client = new pg.Client({ connectionString: database.url });
      // A reader that dies with the database (a test terminating backends) is opened again.
      client.on('error', () => (client = undefined));
      await client.connect();
    }
    return client;
  };
  const spoolDir = join(dir, 'spool');
  return {
    dialect: 'PostgreSQL',
    db: database.url,
    serveFlags: ['--spool-dir', spoolDir],
    spoolDir,
    check: (o) => checkPgInvariant({ ...o, db: database.url }),
    scalar: async (sql, ...params) =>
      Number((await (await c()).query({ text: numbered(sql), values: params, rowMode: 'array' })).rows[0]?.[0] ?? 0),
    all: async <T>(sql: string, ...params: unknown[]) => (await (await c()).query(numbered(sql), params)).rows as T[],
    sizeBytes: async () =>
      Number((await (await c()).query({ text: 'select pg_database_size(current_database())', rowMode: 'array' })).rows[0]?.[0] ?? 0),
    holdWriteLock: (ms) => holdPgLock(database.url, ms),
    takeWriteLock: async (timeoutMs) => {
      const other = new pg.Client({ connectionString: database.url, lock_timeout: timeoutMs });
      await other.connect();
      const t0 = performance.now();
      try {
        await other.query('begin');
        await other.query('lock table requests in exclusive mode');
        await other.query('rollback');
        return performance.now() - t0;
      } finally {
        await other.end();
      }
    },
    dispose: async () => {
      await client?.end().catch(() => undefined);
      client = undefined;
      await database.drop();
    },
  };
}

export const PG_HOLDER = new URL('./pg-holder.js', import.meta.url).pathname;

async function holdPgLock(url: string, ms: number): Promise<HookbucketProcess> {
  const p = new HookbucketProcess([url, String(ms)], {}, PG_HOLDER);
  const end = performance.now() + 15_000;
  while (!/held/.test(p.stdout)) {
    if (p.exit) throw new Error(`${p.describe()} exited (${p.exit.code ?? p.exit.signal}): ${p.tail(5)}`);
    if (performance.now() > end) {
      await p.kill9();
      throw new Error(`${p.describe()} did not take its lock within 15 s`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  return p;
}

import { randomBytes } from 'node:crypto';
import pg from 'pg';

/**
 * Throwaway PostgreSQL databases for tests. Every test that needs PostgreSQL makes its own
 * `hookbucket_test_<random>` database on the server HOOKBUCKET_TEST_PG names and drops it after,
 * so tests can run side by side and a crashed run leaves nothing that a later sweep cannot remove.
 */

/** The server the PostgreSQL half of the tests runs against; undefined: that half is skipped. */
export function pgTestServer(): string | undefined {
  const url = process.env.HOOKBUCKET_TEST_PG;
  return url === undefined || url === '' ? undefined : url;
}

/** The line a skipped PostgreSQL half prints (once per test file). */
export const PG_SKIP_REASON = 'PostgreSQL half skipped: set HOOKBUCKET_TEST_PG (e.g. postgres://postgres@127.0.0.1:5432/test) to run it';

const PREFIX = 'hookbucket_test_';

/** The same server URL pointing at another database. */
export function withDatabase(serverUrl: string, database: string): string {
  const u = new URL(serverUrl);
  u.pathname = `/${database}`;
  return u.toString();
}

/** Runs `fn` on a connection of its own to `url` (named `applicationName` on the server), closed after. */
export async function withPgClient<T>(url: string, fn: (client: pg.Client) => Promise<T>, applicationName?: string): Promise<T> {
  const client = new pg.Client({ connectionString: url, ...(applicationName === undefined ? {} : { application_name: applicationName }) });
  await client.connect();
  try {
    return await fn(client);
  } finally {
    await client.end();
  }
}

export interface TestDatabase {
  name: string;
  /** The connection URL of the new database. */
  url: string;
  /** Drops it, closing any connection still open to it (WITH (FORCE), PostgreSQL 13+). */
  drop(): Promise<void>;
}

/** A fresh, empty database on the server. */
export async function createTestDatabase(serverUrl: string): Promise<TestDatabase> {
  return createThrowawayDatabase(serverUrl, PREFIX);
}

/**
 * A fresh, empty database named `<prefix><random>`, created and dropped on admin connections named
 * `applicationName` (the benchmarks use their own prefix, which the tests' sweep leaves alone).
 */
export async function createThrowawayDatabase(serverUrl: string, prefix: string, applicationName?: string): Promise<TestDatabase> {
  const name = `${prefix}${randomBytes(6).toString('hex')}`;
  const admin = (sql: string) => withPgClient(serverUrl, (c) => c.query(sql), applicationName);
  await admin(`create database ${name}`);
  let dropped = false;
  return {
    name,
    url: withDatabase(serverUrl, name),
    async drop() {
      if (dropped) return;
      dropped = true;
      await admin(`drop database if exists ${name} with (force)`);
    },
  };
}

/**
 * Drops test databases left by runs that crashed before their drop, older than `minAgeMs`
 * (by their creation time on the server), so that a sweep at the start of one test file never
 * removes a database another file running beside it is using.
 */
export async function sweepStaleTestDatabases(serverUrl: string, minAgeMs = 30 * 60_000 /* 30 min */): Promise<string[]> {
  return withPgClient(serverUrl, async (c) => {
    // pg_stat_file on the database folder gives its creation time; a missing folder (or no
    // permission) counts as old.
    const { rows } = await c.query<{ datname: string; age_ms: number | null }>(
      `select d.datname,
              (extract(epoch from now() - (pg_stat_file('base/' || d.oid || '/PG_VERSION', true)).modification) * 1000)::float8 as age_ms
         from pg_database d where d.datname like $1`,
      [`${PREFIX}%`],
    );
    const stale = rows.filter((r) => r.age_ms === null || r.age_ms >= minAgeMs).map((r) => r.datname);
    for (const name of stale) {
      if (!/^hookbucket_test_[0-9a-z_]+$/.test(name)) continue;
      await c.query(`drop database if exists ${name} with (force)`);
    }
    return stale;
  });
}

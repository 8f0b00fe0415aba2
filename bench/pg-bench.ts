/**
 * PostgreSQL helpers for the dialect benchmarks (bench/ingest-dialects.ts, bench/drain-dialects.ts):
 * a throwaway database, process CPU from /proc, and the CPU of the PostgreSQL server processes that
 * serve the bench's database.
 *
 * The server must run on this machine (loopback), since its processes' CPU is read from /proc; a
 * remote server gives no server CPU figures (reported as such, not as zero).
 */
import { readFile } from 'node:fs/promises';
import pg from 'pg';
import { createThrowawayDatabase, withPgClient, type TestDatabase } from '../test/helpers/pg-database.js';

/** The server: HOOKBUCKET_TEST_PG, as the tests use, else the local one the project's CI runs. */
export function benchPgServer(env: NodeJS.ProcessEnv): string {
  const url = env.HOOKBUCKET_TEST_PG;
  return url === undefined || url === '' ? 'postgres://postgres@127.0.0.1:5432/test' : url;
}

/** Not `hookbucket_test_`: the tests' sweep must never take a database a bench is using. */
const PREFIX = 'hookbucket_bench_';

const ADMIN_NAME = 'hookbucket-bench-admin';

/** `fn` on a client of its own to `url`, named as the bench's admin connection, closed after. */
export const withBenchAdmin = <T>(url: string, fn: (client: pg.Client) => Promise<T>): Promise<T> => withPgClient(url, fn, ADMIN_NAME);

/** A throwaway database (test/helpers/pg-database.ts); drop() is DROP DATABASE … WITH (FORCE). */
export type BenchDatabase = TestDatabase;

export async function createBenchDatabase(serverUrl: string): Promise<BenchDatabase> {
  return createThrowawayDatabase(serverUrl, PREFIX, ADMIN_NAME);
}

/** Server settings that decide what "durable" means there, for the report. */
export async function serverSettings(serverUrl: string): Promise<Record<string, string>> {
  return withBenchAdmin(serverUrl, async (c) => {
    const names = [
      'server_version',
      'fsync',
      'synchronous_commit',
      'wal_sync_method',
      'full_page_writes',
      'shared_buffers',
      'max_wal_size',
      'checkpoint_timeout',
    ];
    const { rows } = await c.query<{ name: string; setting: string; unit: string | null }>(
      'select name, setting, unit from pg_settings where name = any($1)',
      [names],
    );
    return Object.fromEntries(rows.map((r) => [r.name, r.unit ? `${r.setting} ${r.unit}` : r.setting]));
  });
}

/** The settings as the reports print them: `name=value, …`. */
export const settingsText = (settings: Record<string, string>) =>
  Object.entries(settings)
    .map(([k, v]) => `${k}=${v}`)
    .join(', ');

// /proc/<pid>/stat fields 14 and 15 (utime, stime) in clock ticks; 100 per second on Linux (USER_HZ,
// `getconf CLK_TCK`), so each reading has a 10 ms resolution: runs of several seconds keep the
// error under a few per cent.
const US_PER_TICK = 10_000;

/**
 * User + system CPU of a process in µs, all its threads (live and exited) included; undefined once
 * it has gone or on a system without /proc.
 */
export async function procCpuUs(pid: number): Promise<number | undefined> {
  let text: string;
  try {
    text = await readFile(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  // The command name (field 2) is in parentheses and may hold spaces: split after the last ')'.
  const rest = text.slice(text.lastIndexOf(')') + 2).split(' ');
  // rest[0] is field 3 (state), so field n is rest[n - 3].
  const utime = Number(rest[11]);
  const stime = Number(rest[12]);
  return Number.isFinite(utime) && Number.isFinite(stime) ? (utime + stime) * US_PER_TICK : undefined;
}

/** PostgreSQL's server-wide background processes, by pg_stat_activity.backend_type. */
const AUX_TYPES = ['walwriter', 'checkpointer', 'background writer'] as const;

export interface PgCpu {
  /** False when no process could be read in /proc (a remote server): the figures below are then 0 and mean nothing. */
  readable: boolean;
  /**
   * CPU of the processes whose pg_stat_activity.datname is the bench's database: its client
   * backends (the pool's connections, LISTEN included) and any autovacuum worker on it, in µs, by
   * backend_type.
   */
  databaseUs: Record<string, number>;
  databaseTotalUs: number;
  /** Distinct backend pids seen on the database over the window. */
  backends: number;
  /**
   * The WAL writer, checkpointer and background writer, in µs. Server-wide: they work for every
   * database on the server, including other users' on a shared machine, so they are an upper
   * bound of what the bench caused (a window without bench traffic on PostgreSQL shows the rest).
   */
  auxUs: Record<string, number>;
  auxTotalUs: number;
  /**
   * Transactions committed in the bench's database over the window (pg_stat_database.xact_commit;
   * backends report it when idle or at most once a second, so the window's edges blur it by up to
   * a second's worth). 0 without a database.
   */
  commits: number;
}

/** A run's problem when PgCpu.readable is false. */
export const PG_CPU_UNREADABLE = 'no PostgreSQL process readable in /proc (server not on this machine?): no server CPU figures';

const SAMPLE_MS = 200;

/**
 * Samples, every 200 ms, which backends serve `database` (pg_stat_activity, on an admin connection
 * to another database, so the sampler's own backend is not counted) and reads each one's CPU from
 * /proc. A backend's CPU counts from the window's start (or from its own start when it appeared
 * later) to its last reading, so a backend that exits mid-window loses at most its last 200 ms.
 * `database` undefined: only the background processes (a SQLite window, to show the server's
 * background level from other users).
 */
export async function startPgCpuSampler(serverUrl: string, database: string | undefined): Promise<{ stop(): Promise<PgCpu> }> {
  const client = new pg.Client({ connectionString: serverUrl, application_name: 'hookbucket-bench-sampler' });
  await client.connect();
  const first = new Map<number, { type: string; us: number }>();
  const last = new Map<number, number>();
  let readable = false;
  let sampling: Promise<void> = Promise.resolve();
  let initial = true;

  const sample = async () => {
    const { rows } = await client.query<{ pid: number; backend_type: string; datname: string | null }>(
      'select pid, backend_type, datname from pg_stat_activity where datname = $1 or backend_type = any($2)',
      [database ?? null, AUX_TYPES],
    );
    for (const r of rows) {
      const us = await procCpuUs(r.pid);
      if (us === undefined) continue;
      readable = true;
      const kind = r.datname === database && database !== undefined ? r.backend_type : `aux:${r.backend_type}`;
      // A backend first seen after the window opened started inside it: all of its CPU counts.
      if (!first.has(r.pid)) first.set(r.pid, { type: kind, us: initial || kind.startsWith('aux:') ? us : 0 });
      last.set(r.pid, us);
    }
    initial = false;
  };

  const commits = async () => {
    if (database === undefined) return 0;
    // pg_stat_force_next_flush() is PostgreSQL 15+; it only affects this session's own counts, so
    // the snapshot is cleared instead, to read what the other backends have reported by now.
    await client.query('select pg_stat_clear_snapshot()');
    const { rows } = await client.query<{ n: string }>('select xact_commit as n from pg_stat_database where datname = $1', [database]);
    return Number(rows[0]?.n ?? 0);
  };
  const commits0 = await commits();
  await sample();
  const timer = setInterval(() => {
    sampling = sampling.then(sample).catch(() => {});
  }, SAMPLE_MS);

  return {
    async stop() {
      clearInterval(timer);
      await sampling;
      await sample().catch(() => {});
      const commits1 = await commits().catch(() => commits0);
      await client.end();
      const databaseUs: Record<string, number> = {};
      const auxUs: Record<string, number> = {};
      let backends = 0;
      for (const [pid, f] of first) {
        const d = Math.max(0, (last.get(pid) ?? f.us) - f.us);
        if (f.type.startsWith('aux:')) {
          const k = f.type.slice(4);
          auxUs[k] = (auxUs[k] ?? 0) + d;
        } else {
          databaseUs[f.type] = (databaseUs[f.type] ?? 0) + d;
          backends++;
        }
      }
      const sum = (r: Record<string, number>) => Object.values(r).reduce((a, b) => a + b, 0);
      return {
        readable,
        databaseUs,
        databaseTotalUs: sum(databaseUs),
        backends,
        auxUs,
        auxTotalUs: sum(auxUs),
        commits: commits1 - commits0,
      };
    },
  };
}

/**
 * A bucket's stored requests and its latest deliveries by state, read with two plain aggregate
 * queries. Not `bucket show` / Store.bucketCounts: right after a bulk load, before autovacuum has
 * analysed the tables, PostgreSQL plans their per-request state subquery on the partial index
 * (bucket, state, request_id) with only request_id to match, a scan of the index per request:
 * 35 s for 28,572 requests on this machine, 2.6 s after an ANALYZE.
 */
export async function pgBucketTotals(dbUrl: string, bucket: string): Promise<{ requests: number; states: Record<string, number> }> {
  return withBenchAdmin(dbUrl, async (c) => {
    const total = await c.query<{ n: string }>('select count(*) as n from requests where bucket = $1', [bucket]);
    const states = await c.query<{ state: string; n: string }>(
      'select state, count(*) as n from deliveries where bucket = $1 and latest = 1 group by state',
      [bucket],
    );
    return { requests: Number(total.rows[0]?.n ?? 0), states: Object.fromEntries(states.rows.map((r) => [r.state, Number(r.n)])) };
  });
}

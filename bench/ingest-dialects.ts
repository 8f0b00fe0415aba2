/**
 * Ingest on SQLite against ingest on PostgreSQL: the same receiver (`serve`, the real CLI binary,
 * --durability full on both), the same closed-loop load as bench/ingest.ts, in alternating rounds.
 *
 *   npm run bench:ingest-dialects                      # 3 rounds, 10 s per measured run: about 3.5 min
 *   npm run bench:ingest-dialects -- --rounds 5 --duration 20
 *   npm run bench:ingest-dialects -- --json > out.json # report on stderr, JSON on stdout
 *
 * SQLite: a file in a temp folder. PostgreSQL: a fresh database `hookbucket_bench_<random>` on
 * HOOKBUCKET_TEST_PG (default postgres://postgres@127.0.0.1:5432/test), created at the start and
 * dropped at the end; `--durability full` is `synchronous_commit = on` there (the report prints the
 * server's fsync and wal_sync_method). Each dialect keeps its database over the run, as
 * bench/ingest.ts does. Bucket with a destination, so each request also writes its delivery row.
 * serve runs with --no-worker: with its worker on, every stored delivery is also attempted against
 * the unused destination (refused, recorded, rescheduled), and that drain work grew serve's main
 * thread CPU per request run after run on SQLite (125 → 336 µs over three 4 s runs in one try), so
 * the figures would compare two drains as much as two ingests.
 *
 * Round i runs, for each connection count, both dialects one after the other, SQLite first in odd
 * rounds and PostgreSQL first in even ones, so neither always runs on a machine warmed (or loaded)
 * by the other. Only the receiver under test is alive during its run. Medians over the rounds.
 *
 * CPU per request (2xx of the measured run):
 * - serve: /proc/<pid>/stat utime + stime of the serve process (all its threads), across the measured run;
 * - PostgreSQL: the processes pg_stat_activity shows on the bench's database (the pool's client
 *   backends; autovacuum workers on it if any ran), sampled every 200 ms (bench/pg-bench.ts); and,
 *   apart, the server-wide WAL writer, checkpointer and background writer, which also work for
 *   every other database on the server (printed for the SQLite runs too, as the background level).
 *   With synchronous_commit = on the committing backend flushes the WAL itself, so the fsyncs are in
 *   the backends' figure (as system time, what the kernel charges to them).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import {
  checkStoredLoads,
  cli,
  freePort,
  load,
  loadProblems,
  machineInfo,
  makeBody,
  startChild,
  stopChild,
  summarize,
  waitReady,
  type LoadSummary,
  type MachineInfo,
  type Managed,
  type StoredCheck,
} from './ingest.js';
import {
  abortOnSigint,
  fixed,
  machineLines,
  median,
  numberOption,
  optionsOrUsage,
  parseFlags,
  progress,
  ratio,
  runIfMain,
  table,
  thousands,
  type LoadAverages,
} from './report.js';
import {
  benchPgServer,
  createBenchDatabase,
  PG_CPU_UNREADABLE,
  pgBucketTotals,
  procCpuUs,
  serverSettings,
  settingsText,
  startPgCpuSampler,
  type BenchDatabase,
  type PgCpu,
} from './pg-bench.js';

export const DIALECTS = ['sqlite', 'postgres'] as const;
export type BenchDialect = (typeof DIALECTS)[number];

const BODY_BYTES = 2048; // 2 KiB, as bench/ingest.ts
const BUCKET = 'bench';
const DESTINATION = 'http://127.0.0.1:9/unused'; // never called: no drain runs (see bench/ingest.ts)
const DEFAULT_CONNECTIONS = [32, 256];
const DEFAULT_DURATION_S = 10;
const DEFAULT_WARMUP_S = 3;
const DEFAULT_ROUNDS = 3;

export interface DialectBenchOptions {
  durationS: number;
  warmupS: number;
  rounds: number;
  connections: number[];
  json: boolean;
}

export function parseDialectOptions(argv: string[], env: NodeJS.ProcessEnv): DialectBenchOptions {
  const values = parseFlags(argv, {
    duration: { type: 'string' },
    warmup: { type: 'string' },
    rounds: { type: 'string' },
    connections: { type: 'string' },
    json: { type: 'boolean', default: false },
  });
  const connections =
    values.connections === undefined
      ? DEFAULT_CONNECTIONS
      : values.connections.split(',').map((s) => numberOption('--connections', s.trim(), 0, 1, 1000, true));
  return {
    durationS: numberOption('--duration', values.duration ?? env.BENCH_DURATION, DEFAULT_DURATION_S, 1, 600, false),
    warmupS: numberOption('--warmup', values.warmup, DEFAULT_WARMUP_S, 0, 60, false),
    rounds: numberOption('--rounds', values.rounds, DEFAULT_ROUNDS, 1, 20, true),
    connections,
    json: values.json === true,
  };
}

/** Odd rounds SQLite first, even rounds PostgreSQL first. */
export function roundOrder(round: number): BenchDialect[] {
  return round % 2 === 1 ? ['sqlite', 'postgres'] : ['postgres', 'sqlite'];
}

export interface DialectPhase {
  round: number;
  dialect: BenchDialect;
  connections: number;
  measured: LoadSummary;
  warmup: LoadSummary | undefined;
  storedCheck: StoredCheck;
  /** serve's CPU over the measured run, µs per 2xx. */
  serveCpuUsPerReq: number;
  /** PostgreSQL processes on the bench's database, µs per 2xx (0 on SQLite). */
  pgCpuUsPerReq: number;
  /** Server-wide WAL writer + checkpointer + background writer, µs per 2xx (shared with other users). */
  pgAuxCpuUsPerReq: number;
  pg: PgCpu;
  /** 1-min load average when the measured run ended. */
  load1: number;
}

export interface DialectSummary {
  dialect: BenchDialect;
  connections: number;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  serveCpuUsPerReq: number;
  pgCpuUsPerReq: number;
  pgAuxCpuUsPerReq: number;
}

/** Medians over the rounds, per dialect and connection count. */
export function summarizeDialects(phases: DialectPhase[], connections: number[]): DialectSummary[] {
  const out: DialectSummary[] = [];
  for (const c of connections) {
    for (const dialect of DIALECTS) {
      const ps = phases.filter((p) => p.dialect === dialect && p.connections === c);
      const m = (f: (p: DialectPhase) => number) => median(ps.map(f));
      out.push({
        dialect,
        connections: c,
        reqPerSec: m((p) => p.measured.reqPerSec),
        p50Ms: m((p) => p.measured.p50Ms),
        p99Ms: m((p) => p.measured.p99Ms),
        serveCpuUsPerReq: m((p) => p.serveCpuUsPerReq),
        pgCpuUsPerReq: m((p) => p.pgCpuUsPerReq),
        pgAuxCpuUsPerReq: m((p) => p.pgAuxCpuUsPerReq),
      });
    }
  }
  return out;
}

export function dialectProblems(phases: DialectPhase[]): string[] {
  const out: string[] = [];
  for (const p of phases) {
    const at = `round ${p.round} ${p.dialect} ${p.connections}c`;
    out.push(...loadProblems(at, p.warmup, p.measured));
    const c = p.storedCheck;
    if (c.verdict === 'mismatch')
      out.push(`${at}: bucket gained ${c.stored} requests but autocannon counted ${c.acked} 2xx (cut off in flight: ${c.cutOff})`);
    if (p.dialect === 'postgres' && !p.pg.readable) out.push(`${at}: ${PG_CPU_UNREADABLE}`);
  }
  return out;
}

export function renderDialectReport(
  opts: DialectBenchOptions,
  machine: MachineInfo,
  loadAvg: LoadAverages,
  pgSettings: Record<string, string>,
  phases: DialectPhase[],
  summary: DialectSummary[],
): string {
  const lines: string[] = [];
  lines.push('hookbucket ingest benchmark: SQLite against PostgreSQL');
  lines.push(...machineLines(machine, loadAvg));
  lines.push(
    `load gen  autocannon, closed loop, POST ${BODY_BYTES} B JSON to /b/${BUCKET}, ${opts.durationS} s measured after ${opts.warmupS} s warm-up per run, ${opts.rounds} rounds`,
  );
  lines.push('receiver  hookbucket serve --durability full --no-worker, bucket with a destination (request + delivery row per request)');
  lines.push(`sqlite    a file in a temp folder (synchronous=FULL, WAL)`);
  lines.push(`postgres  ${settingsText(pgSettings)}; serve sets synchronous_commit=on`);
  lines.push('');
  const rows = phases.map((p) => [
    String(p.round),
    p.dialect,
    String(p.connections),
    thousands(p.measured.reqPerSec),
    fixed(p.measured.p50Ms, 0),
    fixed(p.measured.p99Ms, 0),
    fixed(p.serveCpuUsPerReq, 0),
    p.dialect === 'postgres' ? fixed(p.pgCpuUsPerReq, 0) : '',
    fixed(p.pgAuxCpuUsPerReq, 1),
    p.dialect === 'postgres' ? String(p.pg.backends) : '',
    p.dialect === 'postgres' ? fixed(p.pg.commits / Math.max(1, p.measured.ok2xx), 3) : '',
    p.storedCheck.verdict,
    fixed(p.load1, 2),
  ]);
  for (const l of table(
    [
      'round',
      'dialect',
      'conns',
      'req/s',
      'p50 ms',
      'p99 ms',
      'serve µs/req',
      'pg µs/req',
      'pg aux µs/req',
      'backends',
      'commits/req',
      'stored',
      'load1',
    ],
    rows,
    2,
  ))
    lines.push(l);
  lines.push('(serve: /proc/<pid>/stat of the serve process; pg: backends on the bench database; pg aux: server-wide');
  lines.push(' WAL writer + checkpointer + background writer, shared with anything else using the server)');
  lines.push('');
  lines.push(`medians of ${opts.rounds} rounds`);
  const mrows: string[][] = [];
  for (const c of opts.connections) {
    const s = summary.find((x) => x.dialect === 'sqlite' && x.connections === c);
    const p = summary.find((x) => x.dialect === 'postgres' && x.connections === c);
    if (!s || !p) continue;
    for (const x of [s, p]) {
      mrows.push([
        String(c),
        x.dialect,
        thousands(x.reqPerSec),
        fixed(x.p50Ms, 0),
        fixed(x.p99Ms, 0),
        fixed(x.serveCpuUsPerReq, 0),
        x.dialect === 'postgres' ? fixed(x.pgCpuUsPerReq, 0) : '',
        fixed(x.serveCpuUsPerReq + x.pgCpuUsPerReq, 0),
      ]);
    }
    mrows.push([
      String(c),
      'pg/sqlite',
      ratio(p.reqPerSec, s.reqPerSec),
      ratio(p.p50Ms, s.p50Ms),
      ratio(p.p99Ms, s.p99Ms),
      ratio(p.serveCpuUsPerReq, s.serveCpuUsPerReq),
      '',
      ratio(p.serveCpuUsPerReq + p.pgCpuUsPerReq, s.serveCpuUsPerReq),
    ]);
  }
  for (const l of table(['conns', 'dialect', 'req/s', 'p50 ms', 'p99 ms', 'serve µs/req', 'pg µs/req', 'serve+pg µs/req'], mrows, 2))
    lines.push(`  ${l}`);
  return `${lines.join('\n')}\n`;
}

// ---------------------------------------------------------------------------------------------

const here = dirname(fileURLToPath(import.meta.url)); // dist/bench
const CLI_BIN = resolve(here, '../src/cli/bin.js');

async function storedCount(db: string, cwd: string): Promise<number> {
  let out: string;
  try {
    out = await cli(db, cwd, ['bucket', 'show', BUCKET, '--json']);
  } catch (e) {
    // execFile's error: its message holds only the command line when the child was killed.
    const x = e as { killed?: boolean; signal?: string; code?: unknown; stderr?: string };
    throw new Error(
      `bucket show --json failed (code ${String(x.code)}, signal ${x.signal ?? '-'}, killed ${x.killed === true}): ${x.stderr?.trim() ?? ''}`,
    );
  }
  const shown = JSON.parse(out) as { requests?: unknown };
  if (typeof shown.requests !== 'number') throw new Error('bucket show --json gave no numeric .requests');
  return shown.requests;
}

async function main(): Promise<number> {
  const opts = optionsOrUsage(
    () => parseDialectOptions(process.argv.slice(2), process.env),
    'node dist/bench/ingest-dialects.js [--duration <s>] [--warmup <s>] [--rounds <n>] [--connections 32,256] [--json]',
  );
  if (opts === undefined) return 2;
  const report = opts.json ? process.stderr : process.stdout;
  const sigint = abortOnSigint();

  const server = benchPgServer(process.env);
  const body = makeBody(BODY_BYTES);
  const tmp = await mkdtemp(join(os.tmpdir(), 'hookbucket-dialects-'));
  let pgDb: BenchDatabase | undefined;
  let running: Managed | undefined;
  const loadBefore = os.loadavg();
  try {
    const pgSettings = await serverSettings(server);
    pgDb = await createBenchDatabase(server);
    const dbs: Record<BenchDialect, string> = { sqlite: join(tmp, 'bench.db'), postgres: pgDb.url };
    const spool = (d: BenchDialect) => join(tmp, `spool-${d}`);
    for (const d of DIALECTS) await cli(dbs[d], tmp, ['--spool-dir', spool(d), 'bucket', 'create', BUCKET, '--destination', DESTINATION]);
    const storedSoFar: Record<BenchDialect, number> = { sqlite: 0, postgres: 0 };

    const phases: DialectPhase[] = [];
    for (let round = 1; round <= opts.rounds; round++) {
      for (const connections of opts.connections) {
        for (const dialect of roundOrder(round)) {
          if (sigint.signal.aborted) throw new Error('interrupted');
          const port = await freePort();
          const baseUrl = `http://127.0.0.1:${port}`;
          const args = [
            CLI_BIN,
            '--db',
            dbs[dialect],
            '--spool-dir',
            spool(dialect),
            'serve',
            '--port',
            String(port),
            '--host',
            '127.0.0.1',
            '--log-level',
            'warn',
            '--durability',
            'full',
            '--no-worker',
            '--no-admin',
          ];
          running = startChild(`serve-${dialect}`, args, tmp);
          await waitReady(running, baseUrl);
          const url = `${baseUrl}/b/${BUCKET}`;
          const at = `round ${round}/${opts.rounds} ${dialect} ${connections}c`;
          let warmup: LoadSummary | undefined;
          if (opts.warmupS > 0) {
            progress(`${at}: warm-up ${opts.warmupS} s`);
            warmup = summarize('receiver', connections, await load(url, connections, opts.warmupS, body, sigint.signal));
          }
          if (sigint.signal.aborted) throw new Error('interrupted');
          progress(`${at}: measuring ${opts.durationS} s`);
          const pid = running.child.pid!;
          const sampler = await startPgCpuSampler(server, dialect === 'postgres' ? pgDb.name : undefined);
          const cpu0 = await procCpuUs(pid);
          const measured = summarize('receiver', connections, await load(url, connections, opts.durationS, body, sigint.signal));
          const cpu1 = await procCpuUs(pid);
          const pgCpu = await sampler.stop();
          const load1 = os.loadavg()[0]!;
          if (sigint.signal.aborted) throw new Error('interrupted');
          await stopChild(running);
          running = undefined;

          // Counted after a clean stop, so every request serve accepted has been committed. SQLite:
          // `bucket show --json`, as bench/ingest.ts; PostgreSQL: SQL (see pgBucketTotals).
          const total = dialect === 'postgres' ? (await pgBucketTotals(pgDb.url, BUCKET)).requests : await storedCount(dbs[dialect], tmp);
          const storedCheck = checkStoredLoads(total - storedSoFar[dialect], [warmup, measured]);
          storedSoFar[dialect] = total;
          const per = Math.max(1, measured.ok2xx);
          phases.push({
            round,
            dialect,
            connections,
            measured,
            warmup,
            storedCheck,
            serveCpuUsPerReq: cpu0 === undefined || cpu1 === undefined ? NaN : (cpu1 - cpu0) / per,
            pgCpuUsPerReq: pgCpu.databaseTotalUs / per,
            pgAuxCpuUsPerReq: pgCpu.auxTotalUs / per,
            pg: pgCpu,
            load1,
          });
        }
      }
    }

    const summary = summarizeDialects(phases, opts.connections);
    const machine = machineInfo();
    const loadAvg = { before: loadBefore, after: os.loadavg() };
    report.write(renderDialectReport(opts, machine, loadAvg, pgSettings, phases, summary));
    const found = dialectProblems(phases);
    if (opts.json) {
      process.stdout.write(
        `${JSON.stringify(
          { machine, load: loadAvg, pgSettings, options: { ...opts, bodyBytes: BODY_BYTES }, phases, summary, problems: found },
          null,
          2,
        )}\n`,
      );
    }
    if (found.length > 0) {
      report.write(`\nWARNING: the run had errors, so its figures are suspect:\n${found.map((p) => `  - ${p}`).join('\n')}\n`);
      return 1;
    }
    return 0;
  } catch (e) {
    process.stderr.write(`bench failed: ${e instanceof Error ? e.message : String(e)}\n`);
    return 1;
  } finally {
    if (running) await stopChild(running).catch((e: unknown) => progress(e instanceof Error ? e.message : String(e)));
    await pgDb?.drop().catch((e: unknown) => progress(`could not drop ${pgDb?.name}: ${e instanceof Error ? e.message : String(e)}`));
    await rm(tmp, { recursive: true, force: true });
    sigint.dispose();
  }
}

await runIfMain(import.meta.url, main);

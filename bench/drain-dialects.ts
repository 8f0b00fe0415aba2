/**
 * The drain on PostgreSQL against the drain on SQLite: the real worker (DrainWorker, the dialect's
 * drain store from openStore, the pooled undici agent, the system clock) draining the same stored
 * requests to the same loopback consumer, in alternating rounds.
 *
 *   npm run bench:drain-dialects                      # 3 rounds of 5,000 per dialect: about 2 min
 *   npm run bench:drain-dialects -- --requests 2000 --rounds 5
 *   npm run bench:drain-dialects -- --json > out.json # report on stderr, JSON on stdout
 *
 * Every run gets a fresh database: a SQLite file in a temp folder, or a fresh PostgreSQL database
 * `hookbucket_bench_<random>` on HOOKBUCKET_TEST_PG (default postgres://postgres@127.0.0.1:5432/test),
 * dropped after the run. Both --durability full (synchronous=FULL; synchronous_commit=on). N
 * requests (2 KiB JSON, 10 headers, as bench/drain.ts) are stored through the dialect's real ingest
 * sink (group commit), then the worker starts and drains them with the bucket's defaults (no rate
 * cap, concurrency 10) to the consumer (bench/drain-consumer.ts: node:http on 127.0.0.1, port 0, its
 * own process).
 *
 * Per run: deliveries per second = (N − 1) / (last − first arrival at the consumer); worker CPU per
 * delivery = this process's CPU (process.cpuUsage: the worker, its undici agent, its database
 * driver; the sampler below is in it for both dialects alike) from the worker's start to the N-th
 * arrival, over N; PostgreSQL CPU per delivery = the processes pg_stat_activity shows on the run's
 * database, from /proc (bench/pg-bench.ts), over the same window, and apart the server-wide WAL
 * writer, checkpointer and background writer (also sampled in SQLite runs: the level other users
 * of the server cause). A run must end with N deliveries `delivered` and N distinct requests at the
 * consumer. A warm-up round of 500 per dialect runs first, unreported; then round i runs both
 * dialects, SQLite first in odd rounds, PostgreSQL first in even ones. Medians are reported.
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { loadConfig, type Config } from '../src/config/config.js';
import { createDeliveryAgent } from '../src/drain/forward.js';
import { DrainWorker } from '../src/drain/worker.js';
import { systemClock } from '../src/shared/clock.js';
import { newId } from '../src/shared/ids.js';
import { createLogger, type Logger } from '../src/shared/logger.js';
import { openStore } from '../src/store/open-store.js';
import type { CapturedRequest } from '../src/store/store.js';
import type { ConsumerDump } from './drain-consumer.js';
import { ConsumerProcess, senderHeaders, spanRate } from './drain.js';
import { DIALECTS, roundOrder, type BenchDialect } from './ingest-dialects.js';
import {
  benchFailed,
  fixed,
  intOption,
  machineLines,
  median,
  optionsOrUsage,
  parseFlags,
  problemLines,
  progress,
  ratio,
  runIfMain,
  table,
  thousands,
  writeReport,
  type LoadAverages,
} from './report.js';
import { machineInfo, makeBody, type MachineInfo } from './ingest.js';
import {
  benchPgServer,
  createBenchDatabase,
  PG_CPU_UNREADABLE,
  pgBucketTotals,
  serverSettings,
  settingsText,
  startPgCpuSampler,
  type BenchDatabase,
  type PgCpu,
} from './pg-bench.js';

const BODY_BYTES = 2048;
const DEFAULT_REQUESTS = 5_000;
const DEFAULT_ROUNDS = 3;
const WARMUP_REQUESTS = 500;
const PRESTORE_BATCH = 500;
/** Receive times 5 to a millisecond in the past, as bench/drain.ts (one stamp for all would tie every next_attempt_at). */
const PRESTORE_PER_MS = 5;
/** Longest wait for a drain of n requests: 10 ms each, at least 30 s. */
const drainTimeoutMs = (n: number) => Math.max(30_000, n * 10);
const STOP_GRACE_MS = 10_000;
const EXIT_GRACE_MS = 5_000;
const BUCKET = 'tput';

export interface DrainDialectOptions {
  requests: number;
  rounds: number;
  json: boolean;
}

export function parseDrainDialectOptions(argv: string[]): DrainDialectOptions {
  const values = parseFlags(argv, { requests: { type: 'string' }, rounds: { type: 'string' }, json: { type: 'boolean', default: false } });
  return {
    requests: intOption('--requests', values.requests, DEFAULT_REQUESTS, 100, 100_000),
    rounds: intOption('--rounds', values.rounds, DEFAULT_ROUNDS, 1, 20),
    json: values.json === true,
  };
}

/** What a drain run measures (drainFigures), here and in bench/scale-drain.ts. */
export interface DrainFigures {
  deliveriesPerS: number;
  spanMs: number;
  workerCpuUsPerDelivery: number;
  pgCpuUsPerDelivery: number;
  pgAuxCpuUsPerDelivery: number;
  pg: PgCpu;
}

export interface DrainDialectRun extends DrainFigures {
  round: number;
  dialect: BenchDialect;
  requests: number;
  passesPerDelivery: number;
  load1: number;
}

export interface DrainDialectSummary
  extends Pick<DrainFigures, 'deliveriesPerS' | 'workerCpuUsPerDelivery' | 'pgCpuUsPerDelivery' | 'pgAuxCpuUsPerDelivery'> {
  dialect: BenchDialect;
}

export function summarizeDrainDialects(runs: DrainDialectRun[]): DrainDialectSummary[] {
  return DIALECTS.map((dialect) => {
    const rs = runs.filter((r) => r.dialect === dialect);
    const m = (f: (r: DrainDialectRun) => number) => median(rs.map(f));
    return {
      dialect,
      deliveriesPerS: m((r) => r.deliveriesPerS),
      workerCpuUsPerDelivery: m((r) => r.workerCpuUsPerDelivery),
      pgCpuUsPerDelivery: m((r) => r.pgCpuUsPerDelivery),
      pgAuxCpuUsPerDelivery: m((r) => r.pgAuxCpuUsPerDelivery),
    };
  });
}

export function renderDrainDialectReport(
  opts: DrainDialectOptions,
  machine: MachineInfo,
  loadAvg: LoadAverages,
  pgSettings: Record<string, string>,
  runs: DrainDialectRun[],
  summary: DrainDialectSummary[],
  problems: string[],
): string {
  const lines: string[] = [];
  lines.push('hookbucket drain benchmark: PostgreSQL against SQLite');
  lines.push(...machineLines(machine, loadAvg));
  lines.push(
    `requests  ${thousands(opts.requests)} per run, stored through the dialect's ingest sink (durability full): POST, ${BODY_BYTES} B JSON, 10 headers`,
  );
  lines.push(
    'worker    DrainWorker in this process, bucket defaults (no rate cap, concurrency 10), consumer node:http on 127.0.0.1 in its own process',
  );
  lines.push(`postgres  ${settingsText(pgSettings)}; the drain store sets synchronous_commit=on`);
  lines.push('');
  const rows = runs.map((r) => [
    String(r.round),
    r.dialect,
    thousands(r.deliveriesPerS),
    fixed(r.spanMs, 0),
    fixed(r.workerCpuUsPerDelivery, 0),
    r.dialect === 'postgres' ? fixed(r.pgCpuUsPerDelivery, 0) : '',
    fixed(r.pgAuxCpuUsPerDelivery, 1),
    r.dialect === 'postgres' ? String(r.pg.backends) : '',
    r.dialect === 'postgres' ? fixed(r.pg.commits / r.requests, 2) : '',
    fixed(r.passesPerDelivery, 2),
    fixed(r.load1, 2),
  ]);
  for (const l of table(
    [
      'round',
      'dialect',
      'deliveries/s',
      'span ms',
      'worker µs/dlv',
      'pg µs/dlv',
      'pg aux µs/dlv',
      'backends',
      'commits/dlv',
      'passes/dlv',
      'load1',
    ],
    rows,
    2,
  ))
    lines.push(l);
  lines.push("(worker: this process; pg: backends on the run's database; pg aux: server-wide WAL writer + checkpointer +");
  lines.push(' background writer, shared with anything else using the server)');
  lines.push('');
  lines.push(`medians of ${opts.rounds} rounds`);
  const s = summary.find((x) => x.dialect === 'sqlite')!;
  const p = summary.find((x) => x.dialect === 'postgres')!;
  const mrows = [
    ...[s, p].map((x) => [
      x.dialect,
      thousands(x.deliveriesPerS),
      fixed(x.workerCpuUsPerDelivery, 0),
      x.dialect === 'postgres' ? fixed(x.pgCpuUsPerDelivery, 0) : '',
      fixed(x.workerCpuUsPerDelivery + x.pgCpuUsPerDelivery, 0),
    ]),
    [
      'pg/sqlite',
      ratio(p.deliveriesPerS, s.deliveriesPerS),
      ratio(p.workerCpuUsPerDelivery, s.workerCpuUsPerDelivery),
      '',
      ratio(p.workerCpuUsPerDelivery + p.pgCpuUsPerDelivery, s.workerCpuUsPerDelivery),
    ],
  ];
  for (const l of table(['dialect', 'deliveries/s', 'worker µs/dlv', 'pg µs/dlv', 'worker+pg µs/dlv'], mrows, 1)) lines.push(`  ${l}`);
  lines.push(...problemLines(problems));
  return `${lines.join('\n')}\n`;
}

// ---------------------------------------------------------------------------------------------

/**
 * What went wrong in a drain of n requests: not all n `delivered` in the database (or not n
 * stored), or not n distinct requests once each at the consumer.
 */
export function drainProblems(
  at: string,
  n: number,
  counts: { requests: number; states: Record<string, number> },
  dump: ConsumerDump,
): string[] {
  const out: string[] = [];
  const delivered = counts.states.delivered ?? 0;
  if (delivered !== n || counts.requests !== n)
    out.push(`${at}: ${delivered} of ${n} deliveries delivered in the db (states ${JSON.stringify(counts.states)})`);
  if (dump.distinctIds !== n || dump.at.length !== n)
    out.push(`${at}: the consumer got ${dump.at.length} requests (${dump.distinctIds} distinct) of ${n}`);
  return out;
}

/**
 * A drain run's figures: deliveries per second and span from the arrivals at the consumer, and
 * the worker's and PostgreSQL's CPU (µs) per delivery of the n.
 */
export function drainFigures(arrivals: readonly number[], n: number, workerCpuUs: number, pg: PgCpu): DrainFigures {
  const sorted = [...arrivals].sort((a, b) => a - b);
  return {
    deliveriesPerS: spanRate(sorted),
    spanMs: sorted[sorted.length - 1]! - sorted[0]!,
    workerCpuUsPerDelivery: workerCpuUs / n,
    pgCpuUsPerDelivery: pg.databaseTotalUs / n,
    pgAuxCpuUsPerDelivery: pg.auxTotalUs / n,
    pg,
  };
}

/** The config of a bench's own store connections (also bench/scale-drain.ts's): durability full, no worker. */
export function benchConfig(db: string, spoolDir: string): Config {
  return loadConfig(
    {},
    {},
    { db, spoolDir, durability: 'full', host: '127.0.0.1', port: 0, minFreeDisk: '0', logLevel: 'warn', worker: false, admin: false },
  );
}

/**
 * Stores n requests in `bucket` through the dialect's ingest sink, each with its delivery row (the
 * bucket has a destination). Also bench/scale-drain.ts's.
 */
export async function prestore(config: Config, bucket: string, n: number, body: string, logger: Logger): Promise<void> {
  const sink = await openStore(config, { clock: systemClock }).ingestSink({ logger });
  const t0 = Date.now() - Math.ceil(n / PRESTORE_PER_MS) - 1;
  try {
    for (let i = 0; i < n; i += PRESTORE_BATCH) {
      const batch: Promise<void>[] = [];
      for (let j = i; j < Math.min(n, i + PRESTORE_BATCH); j++) {
        const captured: CapturedRequest = {
          id: newId(),
          bucket,
          receivedAt: t0 + Math.floor(j / PRESTORE_PER_MS),
          method: 'POST',
          path: '/events',
          query: null,
          rawHeaders: senderHeaders(j, Buffer.byteLength(body)),
          body: Buffer.from(body), // its own buffer: SQLite's ingest transfers it to the writer thread
          peer: '127.0.0.1',
        };
        batch.push(sink.submit(captured, { createDelivery: true }));
      }
      await Promise.all(batch);
    }
  } finally {
    await sink.close();
  }
}

async function oneRun(
  dialect: BenchDialect,
  round: number,
  n: number,
  ctx: { tmp: string; server: string; consumer: ConsumerProcess; body: string; logger: Logger; problems: string[] },
): Promise<DrainDialectRun> {
  let pgDb: BenchDatabase | undefined;
  const sqlitePath = join(ctx.tmp, `drain-${round}-${dialect}.db`);
  if (dialect === 'postgres') pgDb = await createBenchDatabase(ctx.server);
  const config = benchConfig(pgDb?.url ?? sqlitePath, join(ctx.tmp, `spool-${round}-${dialect}`));
  const openers = openStore(config, { clock: systemClock });
  const at = `${round === 0 ? 'warm-up' : `round ${round}`} ${dialect}`;
  // Held open over the run, as serve holds its store while the ingest and drain connections open
  // theirs (on SQLite, see prestore in bench/drain.ts).
  const store = await openers.store({ lockWaitMs: 5_000 });
  try {
    await store.createBucket({ name: BUCKET, destination: `${ctx.consumer.url}/hook` });
    progress(`${at}: storing ${n} requests`);
    await prestore(config, BUCKET, n, ctx.body, ctx.logger);

    await ctx.consumer.reset([n]);
    const drainStore = await openers.drainStore({ checkpoints: true });
    const dispatcher = createDeliveryAgent();
    const worker = new DrainWorker({ store: drainStore, dispatcher, clock: systemClock, logger: ctx.logger });
    progress(`${at}: draining`);
    const sampler = await startPgCpuSampler(ctx.server, pgDb?.name);
    let cpuUs = NaN;
    let pg: PgCpu;
    let passes = 0;
    try {
      const cpu0 = process.cpuUsage();
      await worker.start('refuse');
      await ctx.consumer.reached(n, drainTimeoutMs(n));
      const d = process.cpuUsage(cpu0);
      cpuUs = d.user + d.system;
      passes = worker.passes;
    } finally {
      pg = await sampler.stop();
      await worker.stop(STOP_GRACE_MS);
      await dispatcher.close();
      await drainStore.close();
    }
    const load1 = os.loadavg()[0]!;
    const dump = await ctx.consumer.dump();
    // PostgreSQL: plain SQL, not bucketCounts (see pgBucketTotals).
    const counts = pgDb ? await pgBucketTotals(pgDb.url, BUCKET) : await store.bucketCounts(BUCKET);
    ctx.problems.push(...drainProblems(at, n, { requests: counts.requests, states: counts.states as Record<string, number> }, dump));
    if (dialect === 'postgres' && !pg.readable) ctx.problems.push(`${at}: ${PG_CPU_UNREADABLE}`);
    return {
      round,
      dialect,
      requests: n,
      ...drainFigures(dump.at, n, cpuUs, pg),
      passesPerDelivery: passes / n,
      load1,
    };
  } finally {
    await store.close();
    if (pgDb) await pgDb.drop();
    for (const f of [sqlitePath, `${sqlitePath}-wal`, `${sqlitePath}-shm`]) await rm(f, { force: true });
  }
}

async function main(): Promise<number> {
  const opts = optionsOrUsage(
    () => parseDrainDialectOptions(process.argv.slice(2)),
    'node dist/bench/drain-dialects.js [--requests 5000] [--rounds 3] [--json]',
  );
  if (opts === undefined) return 2;
  const logger = createLogger('warn', process.stderr);
  const server = benchPgServer(process.env);
  const body = makeBody(BODY_BYTES);
  const tmp = await mkdtemp(join(os.tmpdir(), 'hookbucket-drain-dialects-'));
  const problems: string[] = [];
  const loadBefore = os.loadavg();
  let consumer: ConsumerProcess | undefined;
  try {
    const pgSettings = await serverSettings(server);
    consumer = await ConsumerProcess.start();
    const ctx = { tmp, server, consumer, body, logger, problems };
    const runs: DrainDialectRun[] = [];
    for (let round = 0; round <= opts.rounds; round++) {
      for (const dialect of roundOrder(Math.max(1, round))) {
        const r = await oneRun(dialect, round, round === 0 ? WARMUP_REQUESTS : opts.requests, ctx);
        if (round > 0) runs.push(r);
      }
    }
    const summary = summarizeDrainDialects(runs);
    const machine = machineInfo();
    const loadAvg = { before: loadBefore, after: os.loadavg() };
    const text = renderDrainDialectReport(opts, machine, loadAvg, pgSettings, runs, summary, problems);
    return writeReport(
      opts.json,
      text,
      { machine, load: loadAvg, pgSettings, options: { ...opts, bodyBytes: BODY_BYTES }, runs, summary, problems },
      problems,
    );
  } catch (e) {
    return benchFailed(e, problems);
  } finally {
    await consumer?.stop();
    await rm(tmp, { recursive: true, force: true });
  }
}

await runIfMain(import.meta.url, main, EXIT_GRACE_MS);

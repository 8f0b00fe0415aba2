/**
 * The drain with 1, 2 and 3 `worker` processes (the real CLI binary, shared claims) on one
 * PostgreSQL database, draining the same stored requests to the same loopback consumer, in
 * rotating order.
 *
 *   npm run bench:scale-drain                          # 3 rounds of 5,000 per configuration: about 2.5 min
 *   npm run bench:scale-drain -- --concurrency 30      # the bucket's concurrency (default 10)
 *   npm run bench:scale-drain -- --json > out.json     # report on stderr, JSON on stdout
 *
 * Every run gets a fresh database `hookbucket_bench_<random>` on HOOKBUCKET_TEST_PG (default
 * postgres://postgres@127.0.0.1:5432/test), dropped after the run. The bucket (no rate cap,
 * concurrency 10 unless --concurrency: a limit over all workers together, from their live leases)
 * is paused, N requests (2 KiB JSON, 10 headers, as bench/drain.ts) are stored through the ingest
 * sink in this process, the k workers start and report active, and `bucket resume` lets them go.
 * The consumer is bench/drain-consumer.ts (node:http on 127.0.0.1, its own process).
 *
 * Per run: deliveries per second = (N − 1) / (last − first arrival at the consumer); worker CPU per
 * delivery = the k worker processes' utime + stime (/proc) from before the resume to the N-th
 * arrival, over N; PostgreSQL CPU per delivery = the backends on the run's database (bench/pg-bench.ts)
 * over the same window. A run must end with N deliveries `delivered` and N distinct requests at
 * the consumer, none twice. A warm-up run of 500 with 2 workers runs first, unreported; round i
 * runs 1, 2, 3 workers rotated by i − 1 (1-2-3, 2-3-1, 3-1-2). Medians over the rounds.
 */
import { join } from 'node:path';
import { createLogger, type Logger } from '../src/shared/logger.js';
import { benchConfig, drainFigures, drainProblems, prestore, type DrainFigures } from './drain-dialects.js';
import { ConsumerProcess } from './drain.js';
import { machineInfo, makeBody, type MachineInfo } from './ingest.js';
import {
  benchPgServer,
  PG_CPU_UNREADABLE,
  pgBucketTotals,
  serverSettings,
  settingsText,
  startPgCpuSampler,
  withBenchAdmin,
  type PgCpu,
} from './pg-bench.js';
import {
  benchFailed,
  fixed,
  intOption,
  machineLines,
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
import { Cluster, loadAvg, median, rotation } from './scale-lib.js';

const BODY_BYTES = 2048;
const DEFAULT_REQUESTS = 5_000;
const DEFAULT_ROUNDS = 3;
const DEFAULT_CONCURRENCY = 10;
const WARMUP_REQUESTS = 500;
const WORKER_COUNTS = [1, 2, 3] as const;
/** Longest wait for a drain of n requests: 10 ms each, at least 30 s. */
const drainTimeoutMs = (n: number) => Math.max(30_000, n * 10);
const EXIT_GRACE_MS = 5_000;
/** After the last arrival, the database is read up to this many times, this far apart, until every delivery is recorded. */
const SETTLE_POLLS = 50;
const SETTLE_POLL_MS = 100;
export const BUCKET = 'tput';

export interface ScaleDrainOptions {
  requests: number;
  rounds: number;
  concurrency: number;
  json: boolean;
}

export function parseScaleDrainOptions(argv: string[]): ScaleDrainOptions {
  const values = parseFlags(argv, {
    requests: { type: 'string' },
    rounds: { type: 'string' },
    concurrency: { type: 'string' },
    json: { type: 'boolean', default: false },
  });
  return {
    requests: intOption('--requests', values.requests, DEFAULT_REQUESTS, 100, 100_000),
    rounds: intOption('--rounds', values.rounds, DEFAULT_ROUNDS, 1, 20),
    concurrency: intOption('--concurrency', values.concurrency, DEFAULT_CONCURRENCY, 1, 1000),
    json: values.json === true,
  };
}

export interface ScaleDrainRun extends DrainFigures {
  round: number;
  workers: number;
  requests: number;
  /** Attempts per worker process (from the attempts table), to show the work was shared. */
  attemptsByWorker: number[];
  load1: number;
}

export interface ScaleDrainSummary extends Pick<DrainFigures, 'deliveriesPerS' | 'workerCpuUsPerDelivery' | 'pgCpuUsPerDelivery'> {
  workers: number;
}

export function summarizeScaleDrain(runs: ScaleDrainRun[]): ScaleDrainSummary[] {
  return WORKER_COUNTS.map((workers) => {
    const rs = runs.filter((r) => r.workers === workers);
    const m = (f: (r: ScaleDrainRun) => number) => median(rs.map(f));
    return {
      workers,
      deliveriesPerS: m((r) => r.deliveriesPerS),
      workerCpuUsPerDelivery: m((r) => r.workerCpuUsPerDelivery),
      pgCpuUsPerDelivery: m((r) => r.pgCpuUsPerDelivery),
    };
  });
}

export function renderScaleDrainReport(
  opts: ScaleDrainOptions,
  machine: MachineInfo,
  load: LoadAverages,
  pgSettings: Record<string, string>,
  runs: ScaleDrainRun[],
  summary: ScaleDrainSummary[],
  problems: string[],
): string {
  const lines: string[] = [];
  lines.push('hookbucket drain benchmark: 1, 2 and 3 worker processes on one PostgreSQL database');
  lines.push(...machineLines(machine, load));
  lines.push(`requests  ${thousands(opts.requests)} per run, stored while the bucket is paused: POST, ${BODY_BYTES} B JSON, 10 headers`);
  lines.push(
    `workers   \`hookbucket worker\` processes, bucket with no rate cap, concurrency ${opts.concurrency} (over all workers); consumer node:http on 127.0.0.1, own process`,
  );
  lines.push(
    `shared    PostgreSQL, the workers, the consumer and this process (sampling) on ${machine.cpuCount} cores, with whatever else runs on the machine`,
  );
  lines.push(`postgres  ${settingsText(pgSettings)}`);
  lines.push('');
  const rows = runs.map((r) => [
    String(r.round),
    String(r.workers),
    thousands(r.deliveriesPerS),
    fixed(r.spanMs, 0),
    fixed(r.workerCpuUsPerDelivery, 0),
    fixed(r.pgCpuUsPerDelivery, 0),
    fixed(r.pgAuxCpuUsPerDelivery, 1),
    String(r.pg.backends),
    r.attemptsByWorker.join('/'),
    fixed(r.load1, 2),
  ]);
  for (const l of table(
    [
      'round',
      'workers',
      'deliveries/s',
      'span ms',
      'workers µs/dlv',
      'pg µs/dlv',
      'pg aux µs/dlv',
      'backends',
      'attempts per worker',
      'load1',
    ],
    rows,
    2,
  ))
    lines.push(l);
  lines.push("(workers: /proc of the worker processes; pg: backends on the run's database; pg aux: server-wide WAL");
  lines.push(' writer + checkpointer + background writer, shared with anything else using the server)');
  lines.push('');
  lines.push(`medians of ${opts.rounds} rounds`);
  const one = summary.find((s) => s.workers === 1)!;
  const mrows: string[][] = summary.map((s) => [
    `${s.workers}w`,
    thousands(s.deliveriesPerS),
    fixed(s.workerCpuUsPerDelivery, 0),
    fixed(s.pgCpuUsPerDelivery, 0),
    fixed(s.workerCpuUsPerDelivery + s.pgCpuUsPerDelivery, 0),
  ]);
  for (const s of summary.filter((x) => x.workers > 1)) {
    mrows.push([
      `${s.workers}w/1w`,
      ratio(s.deliveriesPerS, one.deliveriesPerS),
      ratio(s.workerCpuUsPerDelivery, one.workerCpuUsPerDelivery),
      ratio(s.pgCpuUsPerDelivery, one.pgCpuUsPerDelivery),
      ratio(s.workerCpuUsPerDelivery + s.pgCpuUsPerDelivery, one.workerCpuUsPerDelivery + one.pgCpuUsPerDelivery),
    ]);
  }
  for (const l of table(['workers', 'deliveries/s', 'workers µs/dlv', 'pg µs/dlv', 'workers+pg µs/dlv'], mrows, 1)) lines.push(`  ${l}`);
  lines.push(...problemLines(problems));
  return `${lines.join('\n')}\n`;
}

// ---------------------------------------------------------------------------------------------

/** Attempts per worker id on the run's database, largest first. */
async function attemptsByWorker(dbUrl: string): Promise<number[]> {
  return withBenchAdmin(dbUrl, async (c) => {
    const { rows } = await c.query<{ n: string }>('select count(*) as n from attempts group by worker_id order by 1 desc');
    return rows.map((r) => Number(r.n));
  });
}

async function oneRun(
  workers: number,
  round: number,
  n: number,
  ctx: { server: string; consumer: ConsumerProcess; body: string; logger: Logger; concurrency: number; problems: string[] },
): Promise<ScaleDrainRun> {
  const at = `${round === 0 ? 'warm-up' : `round ${round}`} ${workers}w`;
  const cluster = await Cluster.create(ctx.server);
  try {
    await cluster.cli(['bucket', 'create', BUCKET, '--destination', `${ctx.consumer.url}/hook`, '--concurrency', String(ctx.concurrency)]);
    await cluster.cli(['bucket', 'pause', BUCKET]);
    progress(`${at}: storing ${n} requests`);
    await prestore(benchConfig(cluster.db.url, join(cluster.tmp, 'spool-prestore')), BUCKET, n, ctx.body, ctx.logger);
    await ctx.consumer.reset([n]);
    const procs = await cluster.startWorkers(workers);
    progress(`${at}: draining`);
    const sampler = await startPgCpuSampler(ctx.server, cluster.db.name);
    let pg: PgCpu;
    let cpuUs = NaN;
    try {
      const cpu0 = await Cluster.cpuUs(procs);
      await cluster.cli(['bucket', 'resume', BUCKET]);
      await ctx.consumer.reached(n, drainTimeoutMs(n));
      cpuUs = (await Cluster.cpuUs(procs)) - cpu0;
    } finally {
      pg = await sampler.stop();
    }
    const load1 = loadAvg()[0]!;
    const dump = await ctx.consumer.dump();
    // A worker records an attempt after the consumer answered it: the last records may still be
    // on their way when the last request arrives.
    let counts = await pgBucketTotals(cluster.db.url, BUCKET);
    for (let i = 0; i < SETTLE_POLLS && (counts.states.delivered ?? 0) < n; i++) {
      await new Promise((r) => setTimeout(r, SETTLE_POLL_MS));
      counts = await pgBucketTotals(cluster.db.url, BUCKET);
    }
    ctx.problems.push(...drainProblems(at, n, counts, dump));
    if (!pg.readable) ctx.problems.push(`${at}: ${PG_CPU_UNREADABLE}`);
    const byWorker = await attemptsByWorker(cluster.db.url);
    return {
      round,
      workers,
      requests: n,
      ...drainFigures(dump.at, n, cpuUs, pg),
      attemptsByWorker: byWorker,
      load1,
    };
  } finally {
    await cluster.close();
  }
}

async function main(): Promise<number> {
  const opts = optionsOrUsage(
    () => parseScaleDrainOptions(process.argv.slice(2)),
    'node dist/bench/scale-drain.js [--requests 5000] [--rounds 3] [--concurrency 10] [--json]',
  );
  if (opts === undefined) return 2;
  const logger = createLogger('warn', process.stderr);
  const server = benchPgServer(process.env);
  const body = makeBody(BODY_BYTES);
  const problems: string[] = [];
  const loadBefore = loadAvg();
  let consumer: ConsumerProcess | undefined;
  try {
    const pgSettings = await serverSettings(server);
    consumer = await ConsumerProcess.start();
    const ctx = { server, consumer, body, logger, concurrency: opts.concurrency, problems };
    await oneRun(2, 0, WARMUP_REQUESTS, ctx);
    const runs: ScaleDrainRun[] = [];
    for (let round = 1; round <= opts.rounds; round++) {
      for (const workers of rotation(WORKER_COUNTS, round)) runs.push(await oneRun(workers, round, opts.requests, ctx));
    }
    const summary = summarizeScaleDrain(runs);
    const machine = machineInfo();
    const load = { before: loadBefore, after: loadAvg() };
    const text = renderScaleDrainReport(opts, machine, load, pgSettings, runs, summary, problems);
    return writeReport(
      opts.json,
      text,
      { machine, load, pgSettings, options: { ...opts, bodyBytes: BODY_BYTES }, runs, summary, problems },
      problems,
    );
  } catch (e) {
    return benchFailed(e, problems);
  } finally {
    await consumer?.stop();
  }
}

await runIfMain(import.meta.url, main, EXIT_GRACE_MS);

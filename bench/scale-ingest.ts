/**
 * Ingest through 1 receiver against 2 receivers (`serve --no-worker`, the real CLI binary, each on
 * its own port) on one PostgreSQL database, under the same closed-loop load as bench/ingest.ts
 * split across them, in alternating rounds.
 *
 *   npm run bench:scale-ingest                          # 3 rounds, 10 s per measured run: about 2 min
 *   npm run bench:scale-ingest -- --connections 128 --duration 20
 *   npm run bench:scale-ingest -- --json > out.json     # report on stderr, JSON on stdout
 *
 * Every run gets a fresh database `hookbucket_bench_<random>` on HOOKBUCKET_TEST_PG (default
 * postgres://postgres@127.0.0.1:5432/test), dropped after it. The bucket has a destination (each
 * request also writes its delivery row) that nothing drains: no worker runs. The receivers run with
 * --durability full (synchronous_commit = on).
 *
 * Load: autocannon in this process, POST 2 KiB JSON, C connections in all (default 64): with 2
 * receivers, C/2 to each, both loads running at once over the same window. req/s is the sum of
 * autocannon's means per receiver; p50 and p99 are the worse receiver's. A warm-up of 3 s runs
 * before each measured run. Round i runs 1r then 2r in odd rounds, 2r then 1r in even ones.
 *
 * CPU per request (2xx of the measured run): the receivers' utime + stime (/proc), and the
 * backends on the run's database (bench/pg-bench.ts), over the measured run. After the run the
 * receivers stop (SIGTERM) and the stored count must match the 2xx acks (up to requests cut off in
 * flight when autocannon stopped).
 */
import {
  checkStoredLoads,
  load,
  loadProblems,
  machineInfo,
  makeBody,
  summarize,
  type LoadSummary,
  type MachineInfo,
  type StoredCheck,
} from './ingest.js';
import {
  benchPgServer,
  PG_CPU_UNREADABLE,
  pgBucketTotals,
  serverSettings,
  settingsText,
  startPgCpuSampler,
  type PgCpu,
} from './pg-bench.js';
import {
  abortOnSigint,
  fixed,
  machineLines,
  numberOption,
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
import { Cluster, loadAvg, median } from './scale-lib.js';

const BODY_BYTES = 2048;
const BUCKET = 'bench';
const DESTINATION = 'http://127.0.0.1:9/unused'; // never called: no worker runs
const DEFAULT_CONNECTIONS = 64;
const DEFAULT_DURATION_S = 10;
const DEFAULT_WARMUP_S = 3;
const DEFAULT_ROUNDS = 3;
const RECEIVER_COUNTS = [1, 2] as const;

export interface ScaleIngestOptions {
  durationS: number;
  warmupS: number;
  rounds: number;
  connections: number;
  json: boolean;
}

export function parseScaleIngestOptions(argv: string[]): ScaleIngestOptions {
  const values = parseFlags(argv, {
    duration: { type: 'string' },
    warmup: { type: 'string' },
    rounds: { type: 'string' },
    connections: { type: 'string' },
    json: { type: 'boolean', default: false },
  });
  return {
    durationS: numberOption('--duration', values.duration, DEFAULT_DURATION_S, 1, 600, false),
    warmupS: numberOption('--warmup', values.warmup, DEFAULT_WARMUP_S, 0, 60, false),
    rounds: numberOption('--rounds', values.rounds, DEFAULT_ROUNDS, 1, 20, true),
    connections: numberOption('--connections', values.connections, DEFAULT_CONNECTIONS, 2, 1000, true),
    json: values.json === true,
  };
}

/** Odd rounds 1 receiver first, even rounds 2 first. */
export function receiverOrder(round: number): number[] {
  return round % 2 === 1 ? [1, 2] : [2, 1];
}

/** Loads run at once against several receivers, as one: summed rates and counts, the worse latencies. */
export function combine(parts: LoadSummary[]): LoadSummary {
  const sum = (f: (s: LoadSummary) => number) => parts.reduce((n, s) => n + f(s), 0);
  const max = (f: (s: LoadSummary) => number) => Math.max(...parts.map(f));
  return {
    server: 'receiver',
    connections: sum((s) => s.connections),
    durationS: max((s) => s.durationS),
    reqPerSec: sum((s) => s.reqPerSec),
    p50Ms: max((s) => s.p50Ms),
    p99Ms: max((s) => s.p99Ms),
    maxMs: max((s) => s.maxMs),
    ok2xx: sum((s) => s.ok2xx),
    non2xx: sum((s) => s.non2xx),
    errors: sum((s) => s.errors),
    cutOff: sum((s) => s.cutOff),
  };
}

export interface ScaleIngestRun {
  round: number;
  receivers: number;
  measured: LoadSummary;
  perReceiverReqPerSec: number[];
  warmup: LoadSummary | undefined;
  storedCheck: StoredCheck;
  serveCpuUsPerReq: number;
  pgCpuUsPerReq: number;
  pgAuxCpuUsPerReq: number;
  pg: PgCpu;
  load1: number;
}

export interface ScaleIngestSummary {
  receivers: number;
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  serveCpuUsPerReq: number;
  pgCpuUsPerReq: number;
}

export function summarizeScaleIngest(runs: ScaleIngestRun[]): ScaleIngestSummary[] {
  return RECEIVER_COUNTS.map((receivers) => {
    const rs = runs.filter((r) => r.receivers === receivers);
    const m = (f: (r: ScaleIngestRun) => number) => median(rs.map(f));
    return {
      receivers,
      reqPerSec: m((r) => r.measured.reqPerSec),
      p50Ms: m((r) => r.measured.p50Ms),
      p99Ms: m((r) => r.measured.p99Ms),
      serveCpuUsPerReq: m((r) => r.serveCpuUsPerReq),
      pgCpuUsPerReq: m((r) => r.pgCpuUsPerReq),
    };
  });
}

export function scaleIngestProblems(runs: ScaleIngestRun[]): string[] {
  const out: string[] = [];
  for (const r of runs) {
    const at = `round ${r.round} ${r.receivers}r`;
    out.push(...loadProblems(at, r.warmup, r.measured));
    const c = r.storedCheck;
    if (c.verdict === 'mismatch')
      out.push(`${at}: the bucket holds ${c.stored} requests but autocannon counted ${c.acked} 2xx (cut off in flight: ${c.cutOff})`);
    if (!r.pg.readable) out.push(`${at}: ${PG_CPU_UNREADABLE}`);
  }
  return out;
}

export function renderScaleIngestReport(
  opts: ScaleIngestOptions,
  machine: MachineInfo,
  load: LoadAverages,
  pgSettings: Record<string, string>,
  runs: ScaleIngestRun[],
  summary: ScaleIngestSummary[],
  problems: string[],
): string {
  const lines: string[] = [];
  lines.push('hookbucket ingest benchmark: 1 against 2 receivers on one PostgreSQL database');
  lines.push(...machineLines(machine, load));
  lines.push(
    `load gen  autocannon in this process, closed loop, ${opts.connections} connections split evenly across the receivers, POST ${BODY_BYTES} B JSON, ${opts.durationS} s measured after ${opts.warmupS} s warm-up`,
  );
  lines.push(
    'receiver  hookbucket serve --no-worker --durability full, each on its own port; bucket with a destination (request + delivery row)',
  );
  lines.push(
    `shared    PostgreSQL, the receivers and the load generator on ${machine.cpuCount} cores, with whatever else runs on the machine`,
  );
  lines.push(`postgres  ${settingsText(pgSettings)}`);
  lines.push('');
  const rows = runs.map((r) => [
    String(r.round),
    String(r.receivers),
    thousands(r.measured.reqPerSec),
    r.perReceiverReqPerSec.map((x) => thousands(x)).join('/'),
    fixed(r.measured.p50Ms, 0),
    fixed(r.measured.p99Ms, 0),
    fixed(r.serveCpuUsPerReq, 0),
    fixed(r.pgCpuUsPerReq, 0),
    fixed(r.pgAuxCpuUsPerReq, 1),
    fixed(r.pg.commits / Math.max(1, r.measured.ok2xx), 3),
    r.storedCheck.verdict,
    fixed(r.load1, 2),
  ]);
  for (const l of table(
    [
      'round',
      'receivers',
      'req/s',
      'per receiver',
      'p50 ms',
      'p99 ms',
      'serve µs/req',
      'pg µs/req',
      'pg aux µs/req',
      'commits/req',
      'stored',
      'load1',
    ],
    rows,
    2,
  ))
    lines.push(l);
  lines.push("(serve: /proc of the receivers, summed; pg: backends on the run's database; pg aux: server-wide WAL writer +");
  lines.push(" checkpointer + background writer; p50/p99: the worse receiver's)");
  lines.push('');
  lines.push(`medians of ${opts.rounds} rounds`);
  const one = summary.find((s) => s.receivers === 1)!;
  const two = summary.find((s) => s.receivers === 2)!;
  const mrows = [
    ...summary.map((s) => [
      `${s.receivers}r`,
      thousands(s.reqPerSec),
      fixed(s.p50Ms, 0),
      fixed(s.p99Ms, 0),
      fixed(s.serveCpuUsPerReq, 0),
      fixed(s.pgCpuUsPerReq, 0),
      fixed(s.serveCpuUsPerReq + s.pgCpuUsPerReq, 0),
    ]),
    [
      '2r/1r',
      ratio(two.reqPerSec, one.reqPerSec),
      ratio(two.p50Ms, one.p50Ms),
      ratio(two.p99Ms, one.p99Ms),
      ratio(two.serveCpuUsPerReq, one.serveCpuUsPerReq),
      ratio(two.pgCpuUsPerReq, one.pgCpuUsPerReq),
      ratio(two.serveCpuUsPerReq + two.pgCpuUsPerReq, one.serveCpuUsPerReq + one.pgCpuUsPerReq),
    ],
  ];
  for (const l of table(['receivers', 'req/s', 'p50 ms', 'p99 ms', 'serve µs/req', 'pg µs/req', 'serve+pg µs/req'], mrows, 1))
    lines.push(`  ${l}`);
  lines.push(...problemLines(problems, 'ERRORS: the run had errors, so its figures are suspect:'));
  return `${lines.join('\n')}\n`;
}

// ---------------------------------------------------------------------------------------------

async function oneRun(
  receivers: number,
  round: number,
  opts: ScaleIngestOptions,
  ctx: { server: string; body: string; signal: AbortSignal },
): Promise<ScaleIngestRun> {
  const at = `round ${round}/${opts.rounds} ${receivers}r`;
  const cluster = await Cluster.create(ctx.server);
  try {
    await cluster.cli(['bucket', 'create', BUCKET, '--destination', DESTINATION]);
    for (let i = 0; i < receivers; i++) await cluster.startReceiver();
    const urls = cluster.receivers.map((r) => `${r.url}/b/${BUCKET}`);
    const per = Math.floor(opts.connections / receivers);
    const loadAll = async (s: number) => {
      const parts = await Promise.all(urls.map((u) => load(u, per, s, ctx.body, ctx.signal)));
      return parts.map((p) => summarize('receiver', per, p));
    };
    let warmup: LoadSummary | undefined;
    if (opts.warmupS > 0) {
      progress(`${at}: warm-up ${opts.warmupS} s`);
      warmup = combine(await loadAll(opts.warmupS));
    }
    if (ctx.signal.aborted) throw new Error('interrupted');
    progress(`${at}: measuring ${opts.durationS} s`);
    const procs = cluster.receivers.map((r) => r.proc);
    const sampler = await startPgCpuSampler(ctx.server, cluster.db.name);
    const cpu0 = await Cluster.cpuUs(procs);
    const parts = await loadAll(opts.durationS);
    const cpu1 = await Cluster.cpuUs(procs);
    const pg = await sampler.stop();
    const load1 = loadAvg()[0]!;
    if (ctx.signal.aborted) throw new Error('interrupted');
    const measured = combine(parts);
    // Counted after a clean stop, so every request a receiver accepted has been committed.
    await Promise.all(procs.map((p) => p.term(15_000)));
    const stored = (await pgBucketTotals(cluster.db.url, BUCKET)).requests;
    const storedCheck = checkStoredLoads(stored, [warmup, measured]);
    const reqs = Math.max(1, measured.ok2xx);
    return {
      round,
      receivers,
      measured,
      perReceiverReqPerSec: parts.map((p) => p.reqPerSec),
      warmup,
      storedCheck,
      serveCpuUsPerReq: (cpu1 - cpu0) / reqs,
      pgCpuUsPerReq: pg.databaseTotalUs / reqs,
      pgAuxCpuUsPerReq: pg.auxTotalUs / reqs,
      pg,
      load1,
    };
  } finally {
    await cluster.close();
  }
}

async function main(): Promise<number> {
  const opts = optionsOrUsage(
    () => parseScaleIngestOptions(process.argv.slice(2)),
    'node dist/bench/scale-ingest.js [--duration <s>] [--warmup <s>] [--rounds <n>] [--connections 64] [--json]',
  );
  if (opts === undefined) return 2;
  const sigint = abortOnSigint();
  const server = benchPgServer(process.env);
  const body = makeBody(BODY_BYTES);
  const loadBefore = loadAvg();
  try {
    const pgSettings = await serverSettings(server);
    const runs: ScaleIngestRun[] = [];
    for (let round = 1; round <= opts.rounds; round++) {
      for (const receivers of receiverOrder(round))
        runs.push(await oneRun(receivers, round, opts, { server, body, signal: sigint.signal }));
    }
    const summary = summarizeScaleIngest(runs);
    const machine = machineInfo();
    const load = { before: loadBefore, after: loadAvg() };
    const problems = scaleIngestProblems(runs);
    const text = renderScaleIngestReport(opts, machine, load, pgSettings, runs, summary, problems);
    return writeReport(
      opts.json,
      text,
      { machine, load, pgSettings, options: { ...opts, bodyBytes: BODY_BYTES }, runs, summary, problems },
      problems,
    );
  } catch (e) {
    process.stderr.write(`bench failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    return 1;
  } finally {
    sigint.dispose();
  }
}

await runIfMain(import.meta.url, main);

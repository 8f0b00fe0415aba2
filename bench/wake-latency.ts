/**
 * Wake-up latency of idle workers on PostgreSQL: from the moment a request's 2xx reached its sender
 * to the moment the consumer got it, with 3 `worker` processes and with 1 (the baseline), one
 * receiver (`serve --no-worker`), all the real CLI binary, in alternating rounds.
 *
 *   npm run bench:wake-latency                          # 3 rounds of 20 s at 100/s per configuration: about 3 min
 *   npm run bench:wake-latency -- --rate 50 --duration 10 --rounds 2
 *   npm run bench:wake-latency -- --json > out.json     # report on stderr, JSON on stdout
 *
 * Every run gets a fresh database `hookbucket_bench_<random>` on HOOKBUCKET_TEST_PG (default
 * postgres://postgres@127.0.0.1:5432/test), dropped after it. The bucket has the defaults (no rate
 * cap, concurrency 10); the consumer is bench/drain-consumer.ts (node:http on 127.0.0.1, its own
 * process), which stamps each arrival.
 *
 * Load: open loop from this process, one POST (2 KiB JSON, the 10 headers of bench/drain.ts, with
 * its sequence number in x-bench-seq, which the worker forwards) every 1/rate s on a fixed
 * schedule, whatever the answers do; its ack time is when the response's status line and headers
 * arrived (undici's request() resolving). A warm-up second at the same rate runs first in each run,
 * unreported, then `duration` seconds measured. At 100/s the workers are idle between requests:
 * each request wakes them through LISTEN/NOTIFY (sent in ingest's commit).
 *
 * Per request: latency = arrival at the consumer − ack, both on this machine's clock (epoch ms with
 * sub-millisecond parts: performance.timeOrigin + performance.now() in each process). The run
 * reports p50, p90, p99 and max over all its requests; every request must arrive, once. Apart:
 * send → ack (ingest: capture, group commit, the NOTIFY); ack → attempt start (attempts.started_at,
 * the database clock read in the claim transaction, whole ms: the wake-up, the worker's pass, the
 * claim's locks); attempt start → arrival (the claim's commit, the forward). Medians over the
 * rounds of each run's percentiles; the target is p50 <= 20 ms and p99 <= 100 ms.
 */
import { Agent, request } from 'undici';
import { ConsumerProcess, senderHeaders } from './drain.js';
import { machineInfo, makeBody, type MachineInfo } from './ingest.js';
import { benchPgServer, pgBucketTotals, serverSettings, settingsText, startPgCpuSampler, withBenchAdmin } from './pg-bench.js';
import {
  benchFailed,
  fixed,
  machineLines,
  numberOption,
  optionsOrUsage,
  parseFlags,
  problemLines,
  progress,
  runIfMain,
  table,
  writeReport,
  type LoadAverages,
} from './report.js';
import { Cluster, loadAvg, median, percentile } from './scale-lib.js';

const BODY_BYTES = 2048;
const BUCKET = 'wake';
const DEFAULT_RATE = 100;
const DEFAULT_DURATION_S = 20;
const DEFAULT_ROUNDS = 3;
const WARMUP_S = 1;
const WORKER_COUNTS = [3, 1] as const;
const TARGET = { p50Ms: 20, p99Ms: 100 };
/** Longest wait for the last requests to reach the consumer after the last send. */
const ARRIVAL_TIMEOUT_MS = 30_000;
const EXIT_GRACE_MS = 5_000;

const epochMs = () => performance.timeOrigin + performance.now();

export interface WakeOptions {
  rate: number;
  durationS: number;
  rounds: number;
  json: boolean;
}

export function parseWakeOptions(argv: string[]): WakeOptions {
  const values = parseFlags(argv, {
    rate: { type: 'string' },
    duration: { type: 'string' },
    rounds: { type: 'string' },
    json: { type: 'boolean', default: false },
  });
  return {
    rate: numberOption('--rate', values.rate, DEFAULT_RATE, 1, 1000, false),
    durationS: numberOption('--duration', values.duration, DEFAULT_DURATION_S, 1, 600, false),
    rounds: numberOption('--rounds', values.rounds, DEFAULT_ROUNDS, 1, 20, true),
    json: values.json === true,
  };
}

/** Odd rounds 3 workers first, even rounds 1 first. */
export function workerOrder(round: number): number[] {
  return round % 2 === 1 ? [...WORKER_COUNTS] : [...WORKER_COUNTS].reverse();
}

export interface Percentiles {
  p50: number;
  p90: number;
  p99: number;
  max: number;
}

export function percentiles(values: readonly number[]): Percentiles {
  const s = [...values].sort((a, b) => a - b);
  return { p50: percentile(s, 0.5), p90: percentile(s, 0.9), p99: percentile(s, 0.99), max: s.length > 0 ? s[s.length - 1]! : NaN };
}

export interface WakeRun {
  round: number;
  workers: number;
  requests: number;
  /** ack → arrival at the consumer, ms. */
  latency: Percentiles;
  /** send → ack, ms. */
  ack: Percentiles;
  /** ack → attempts.started_at (database clock, whole ms). */
  toStart: Percentiles;
  /** attempts.started_at → arrival. */
  startToArrival: Percentiles;
  /** Requests that reached the consumer before their ack reached the sender. */
  beforeAck: number;
  /** Sends later than their slot on the schedule by more than 5 ms (this process's timers). */
  lateSends: number;
  /** The worker processes' CPU over the measured window, in per cent of one core, summed. */
  workersCpuPct: number;
  receiverCpuPct: number;
  /** The backends on the run's database, per cent of one core over the measured window. */
  pgCpuPct: number;
  /** Transactions committed in the run's database per request (ingest group commits, claims, completions). */
  commitsPerRequest: number;
  load1: number;
}

export interface WakeSummary {
  workers: number;
  latency: Percentiles;
  ack: Percentiles;
  toStart: Percentiles;
  startToArrival: Percentiles;
  workersCpuPct: number;
  commitsPerRequest: number;
}

export function summarizeWake(runs: WakeRun[]): WakeSummary[] {
  const mp = (ps: Percentiles[]): Percentiles => ({
    p50: median(ps.map((p) => p.p50)),
    p90: median(ps.map((p) => p.p90)),
    p99: median(ps.map((p) => p.p99)),
    max: median(ps.map((p) => p.max)),
  });
  return WORKER_COUNTS.map((workers) => {
    const rs = runs.filter((r) => r.workers === workers);
    return {
      workers,
      latency: mp(rs.map((r) => r.latency)),
      ack: mp(rs.map((r) => r.ack)),
      toStart: mp(rs.map((r) => r.toStart)),
      startToArrival: mp(rs.map((r) => r.startToArrival)),
      workersCpuPct: median(rs.map((r) => r.workersCpuPct)),
      commitsPerRequest: median(rs.map((r) => r.commitsPerRequest)),
    };
  });
}

export function renderWakeReport(
  opts: WakeOptions,
  machine: MachineInfo,
  load: LoadAverages,
  pgSettings: Record<string, string>,
  runs: WakeRun[],
  summary: WakeSummary[],
  problems: string[],
): string {
  const lines: string[] = [];
  const p4 = (p: Percentiles) => [fixed(p.p50, 1), fixed(p.p90, 1), fixed(p.p99, 1), fixed(p.max, 1)];
  lines.push('hookbucket wake-up latency: idle workers on PostgreSQL, ack → consumer');
  lines.push(...machineLines(machine, load));
  lines.push(
    `load gen  open loop, ${opts.rate}/s on a fixed schedule for ${opts.durationS} s (after ${WARMUP_S} s warm-up), POST ${BODY_BYTES} B JSON, from this process`,
  );
  lines.push(
    'cluster   1 `serve --no-worker --durability full` + 1 or 3 `worker` processes; bucket defaults (no rate cap, concurrency 10)',
  );
  lines.push(
    `shared    PostgreSQL, the receiver, the workers, the consumer and this process on ${machine.cpuCount} cores, with whatever else runs on the machine`,
  );
  lines.push(`postgres  ${settingsText(pgSettings)}`);
  lines.push('');
  const rows = runs.map((r) => [
    String(r.round),
    String(r.workers),
    String(r.requests),
    ...p4(r.latency),
    fixed(r.ack.p50, 1),
    fixed(r.ack.p99, 1),
    fixed(r.toStart.p50, 0),
    fixed(r.toStart.p99, 0),
    fixed(r.startToArrival.p50, 1),
    fixed(r.startToArrival.p99, 1),
    String(r.beforeAck),
    String(r.lateSends),
    fixed(r.workersCpuPct, 1),
    fixed(r.receiverCpuPct, 1),
    fixed(r.pgCpuPct, 1),
    fixed(r.commitsPerRequest, 1),
    fixed(r.load1, 2),
  ]);
  for (const l of table(
    [
      'round',
      'workers',
      'reqs',
      'p50',
      'p90',
      'p99',
      'max',
      'ack p50',
      'ack p99',
      '→start p50',
      '→start p99',
      'start→ p50',
      'start→ p99',
      'before ack',
      'late sends',
      'workers cpu%',
      'serve cpu%',
      'pg cpu%',
      'commits/req',
      'load1',
    ],
    rows,
    2,
  ))
    lines.push(l);
  lines.push('(ms; p50..max: ack → consumer; ack: send → 2xx; →start: ack → attempts.started_at; start→: started_at → consumer;');
  lines.push(' before ack: arrived before the sender saw its 2xx; cpu%: of one core over the measured window, all workers summed;');
  lines.push(" pg: backends on the run's database; commits/req: its committed transactions over the window per request)");
  lines.push('');
  lines.push(`medians of ${opts.rounds} rounds (target: p50 <= ${TARGET.p50Ms} ms, p99 <= ${TARGET.p99Ms} ms)`);
  const mrows = summary.map((s) => [
    `${s.workers}w`,
    ...p4(s.latency),
    fixed(s.ack.p50, 1),
    fixed(s.ack.p99, 1),
    fixed(s.toStart.p50, 0),
    fixed(s.toStart.p99, 0),
    fixed(s.startToArrival.p50, 1),
    fixed(s.startToArrival.p99, 1),
    fixed(s.workersCpuPct, 1),
    fixed(s.commitsPerRequest, 1),
    s.latency.p50 <= TARGET.p50Ms && s.latency.p99 <= TARGET.p99Ms ? 'met' : 'missed',
  ]);
  for (const l of table(
    [
      'workers',
      'p50',
      'p90',
      'p99',
      'max',
      'ack p50',
      'ack p99',
      '→start p50',
      '→start p99',
      'start→ p50',
      'start→ p99',
      'workers cpu%',
      'commits/req',
      'target',
    ],
    mrows,
    1,
  ))
    lines.push(`  ${l}`);
  lines.push(...problemLines(problems));
  return `${lines.join('\n')}\n`;
}

// ---------------------------------------------------------------------------------------------

interface Sent {
  seq: number;
  slotAt: number;
  sendAt: number;
  ackAt: number;
  status: number;
  requestId: string | undefined;
}

/** n POSTs on a fixed schedule from `startAt`, one every 1000/rate ms, without waiting for answers. */
async function paced(url: string, dispatcher: Agent, body: string, n: number, rate: number, firstSeq: number): Promise<Sent[]> {
  const interval = 1000 / rate;
  const startAt = epochMs() + 20;
  const out: Promise<Sent>[] = [];
  for (let i = 0; i < n; i++) {
    const slotAt = startAt + i * interval;
    const wait = slotAt - epochMs();
    if (wait > 1) await new Promise((r) => setTimeout(r, wait));
    const seq = firstSeq + i;
    const sendAt = epochMs();
    // The sender headers of bench/drain.ts but Host and Content-Length, which undici sets.
    const raw = senderHeaders(seq, Buffer.byteLength(body));
    const pairs: string[] = [];
    for (let j = 0; j < raw.length; j += 2) if (!/^(host|content-length)$/i.test(raw[j]!)) pairs.push(raw[j]!, raw[j + 1]!);
    out.push(
      request(url, { method: 'POST', headers: pairs, body, dispatcher }).then(async (res) => {
        const ackAt = epochMs();
        await res.body.dump();
        const id = res.headers['x-hookbucket-request-id'];
        return { seq, slotAt, sendAt, ackAt, status: res.statusCode, requestId: typeof id === 'string' ? id : undefined };
      }),
    );
  }
  return Promise.all(out);
}

/** attempts.started_at per request id (first attempt), from the run's database. */
async function attemptStarts(dbUrl: string): Promise<Map<string, number>> {
  return withBenchAdmin(dbUrl, async (c) => {
    const { rows } = await c.query<{ request_id: string; started_at: string }>(
      'select request_id, started_at from attempts where number = 1',
    );
    return new Map(rows.map((r) => [r.request_id, Number(r.started_at)]));
  });
}

async function oneRun(
  workers: number,
  round: number,
  opts: WakeOptions,
  ctx: { server: string; consumer: ConsumerProcess; body: string; problems: string[] },
): Promise<WakeRun> {
  const at = `round ${round}/${opts.rounds} ${workers}w`;
  const cluster = await Cluster.create(ctx.server);
  const dispatcher = new Agent({ connections: 64, keepAliveTimeout: 30_000 });
  try {
    await cluster.cli(['bucket', 'create', BUCKET, '--destination', `${ctx.consumer.url}/hook`]);
    const receiver = await cluster.startReceiver();
    const procs = await cluster.startWorkers(workers);
    const url = `${receiver.url}/b/${BUCKET}`;
    const warm = Math.max(1, Math.round(opts.rate * WARMUP_S));
    const n = Math.max(1, Math.round(opts.rate * opts.durationS));

    progress(`${at}: warm-up ${warm} requests`);
    await ctx.consumer.reset([warm]);
    await paced(url, dispatcher, ctx.body, warm, opts.rate, 0);
    await ctx.consumer.reached(warm, ARRIVAL_TIMEOUT_MS);

    progress(`${at}: ${n} requests at ${opts.rate}/s`);
    await ctx.consumer.reset([n]);
    const cpu0 = await Cluster.cpuUs(procs);
    const r0 = await Cluster.cpuUs([receiver.proc]);
    const sampler = await startPgCpuSampler(ctx.server, cluster.db.name);
    const t0 = epochMs();
    const sent = await paced(url, dispatcher, ctx.body, n, opts.rate, warm);
    const t1 = epochMs();
    const cpu1 = await Cluster.cpuUs(procs);
    const r1 = await Cluster.cpuUs([receiver.proc]);
    const pg = await sampler.stop();
    await ctx.consumer
      .reached(n, ARRIVAL_TIMEOUT_MS)
      .catch((e: unknown) => ctx.problems.push(`${at}: ${e instanceof Error ? e.message : String(e)}`));
    const load1 = loadAvg()[0]!;
    const dump = await ctx.consumer.dump();

    const arrival = new Map<number, number>();
    for (let i = 0; i < dump.seq.length; i++) {
      const s = dump.seq[i]!;
      if (arrival.has(s)) ctx.problems.push(`${at}: request #${s} arrived twice`);
      else arrival.set(s, dump.at[i]!);
    }
    const starts = await attemptStarts(cluster.db.url);
    const latency: number[] = [];
    const ack: number[] = [];
    const toStart: number[] = [];
    const startToArrival: number[] = [];
    let beforeAck = 0;
    let lateSends = 0;
    let missing = 0;
    for (const s of sent) {
      if (s.status < 200 || s.status > 299) ctx.problems.push(`${at}: request #${s.seq} answered ${s.status}`);
      ack.push(s.ackAt - s.sendAt);
      if (s.sendAt - s.slotAt > 5) lateSends++;
      const a = arrival.get(s.seq);
      if (a === undefined) {
        missing++;
        continue;
      }
      latency.push(a - s.ackAt);
      if (a < s.ackAt) beforeAck++;
      const st = s.requestId === undefined ? undefined : starts.get(s.requestId);
      if (st !== undefined) {
        toStart.push(st - s.ackAt);
        startToArrival.push(a - st);
      }
    }
    if (missing > 0) ctx.problems.push(`${at}: ${missing} of ${n} requests never reached the consumer`);
    const counts = await pgBucketTotals(cluster.db.url, BUCKET);
    if (counts.requests !== n + warm) ctx.problems.push(`${at}: ${counts.requests} requests stored, ${n + warm} sent`);
    const windowS = (t1 - t0) / 1000;
    return {
      round,
      workers,
      requests: n,
      latency: percentiles(latency),
      ack: percentiles(ack),
      toStart: percentiles(toStart),
      startToArrival: percentiles(startToArrival),
      beforeAck,
      lateSends,
      workersCpuPct: (cpu1 - cpu0) / 1e4 / windowS,
      receiverCpuPct: (r1 - r0) / 1e4 / windowS,
      pgCpuPct: pg.databaseTotalUs / 1e4 / windowS,
      commitsPerRequest: pg.commits / n,
      load1,
    };
  } finally {
    await dispatcher.close();
    await cluster.close();
  }
}

async function main(): Promise<number> {
  const opts = optionsOrUsage(
    () => parseWakeOptions(process.argv.slice(2)),
    'node dist/bench/wake-latency.js [--rate 100] [--duration 20] [--rounds 3] [--json]',
  );
  if (opts === undefined) return 2;
  const server = benchPgServer(process.env);
  const body = makeBody(BODY_BYTES);
  const problems: string[] = [];
  const loadBefore = loadAvg();
  let consumer: ConsumerProcess | undefined;
  try {
    const pgSettings = await serverSettings(server);
    consumer = await ConsumerProcess.start();
    const runs: WakeRun[] = [];
    for (let round = 1; round <= opts.rounds; round++) {
      for (const workers of workerOrder(round)) runs.push(await oneRun(workers, round, opts, { server, consumer, body, problems }));
    }
    const summary = summarizeWake(runs);
    const machine = machineInfo();
    const load = { before: loadBefore, after: loadAvg() };
    const text = renderWakeReport(opts, machine, load, pgSettings, runs, summary, problems);
    return writeReport(
      opts.json,
      text,
      { machine, load, pgSettings, options: { ...opts, bodyBytes: BODY_BYTES }, target: TARGET, runs, summary, problems },
      problems,
    );
  } catch (e) {
    return benchFailed(e, problems);
  } finally {
    await consumer?.stop();
  }
}

await runIfMain(import.meta.url, main, EXIT_GRACE_MS);

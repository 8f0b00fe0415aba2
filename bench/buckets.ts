/**
 * Many-buckets benchmark: what idle buckets cost a running `serve` (ingest, delivery latency, CPU),
 * as the ratio of a database with 10,000 idle buckets to one with 10, both measured in the same run.
 *
 *   npm run bench:buckets                     # about 3 minutes
 *   npm run bench:buckets -- --rounds 1       # quicker, noisier
 *   npm run bench:buckets -- --json > out.json  # report on stderr, JSON on stdout
 *
 * Two databases are made once, through the store directly (10,000 `bucket create` runs would take
 * minutes): each holds `load` (no destination: ingest stores the request only), `busy` (destination:
 * the consumer) and the idle buckets, half with a destination (the consumer, never sent anything)
 * and half without, each with its bucket_due row saying nothing is due (as after the upgrade
 * migration, or once a backlog was delivered).
 *
 * Each round starts `serve` (the real CLI binary, its drain worker inside, durability full) on one
 * database, in alternating order 10, 10000, 10, 10000, …, and measures:
 * 1. ingest: autocannon, 32 connections, closed loop, POST 2 KiB JSON to /b/load for `--duration`
 *    seconds after a 1 s warm-up: req/s (mean of 1 s samples) and p99 (1 ms resolution). Every
 *    commit wakes the drain worker, so a pass that costs more per bucket shows here.
 * 2. latency: an undici client posting to /b/busy paced at 50/s for `--latency-seconds` seconds
 *    (after 25 warm-up requests); latency = the consumer's arrival time minus the time the ingest
 *    2xx reached the client. Both clocks are performance.timeOrigin + performance.now() on this
 *    machine; the consumer is bench/drain-consumer.ts, in its own process.
 * 3. CPU per request: the serve process's utime + stime from /proc/<pid>/stat (every thread, the
 *    writer thread included) over each measured phase, divided by the requests acknowledged in it.
 * Medians over the rounds per size, then ratios 10,000 / 10.
 *
 * The CLI with 10,000 buckets (and 10, for reference), before the rounds (buckets only) and after
 * them (the requests they stored: `bucket list` sums every bucket's bytes), each timed 3 times from spawn to exit
 * (median): `serve` until /healthz answers 200 (polled every 100 ms), `bucket list --json` and
 * `stats --json` with their output to a file.
 *
 * Targets (issue 11), as 10,000 / 10: ingest req/s >= 0.9; latency p50 <= 1.2x and p99 <= 1.5x;
 * CPU per request <= 1.2x (both phases). `serve` ready in under 2 s; `bucket list` and `stats`
 * under 1 s each, with 10,000 buckets. A miss is reported, not an error: the exit code is 1 only
 * when the run broke (a non-2xx, a connection error, a request not forwarded, a child that failed).
 * Loopback only; every wait is bounded.
 */
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, openSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { Pool } from 'undici';
import { systemClock } from '../src/shared/clock.js';
import { openSqlite } from '../src/store/sqlite/open.js';
import { SqliteStore } from '../src/store/sqlite/sqlite-store.js';
import { ConsumerProcess, percentile, withTimeout } from './drain.js';
import {
  childEnv,
  freePort,
  load,
  machineInfo,
  makeBody,
  startChild,
  stopChild,
  waitReady,
  type Managed,
  type MachineInfo,
} from './ingest.js';
import { fixed, median, runIfMain } from './report.js';

const SIZES = [10, 10_000] as const;
type Size = (typeof SIZES)[number];

const BODY_BYTES = 2048;
const CONNECTIONS = 32;
const INGEST_WARMUP_S = 1;
const DEFAULT_DURATION_S = 5;
const DEFAULT_LATENCY_S = 5;
const DEFAULT_ROUNDS = 3;
const LATENCY_RATE_PER_S = 50;
const LATENCY_WARMUP = 25;
const LATENCY_CLIENT_CONNECTIONS = 8;
const REQUEST_TIMEOUT_MS = 10_000;
const ARRIVAL_TIMEOUT_MS = 30_000;
const CLI_REPEATS = 3;

export const TARGETS = {
  minIngestRatio: 0.9,
  maxP50Ratio: 1.2,
  maxP99Ratio: 1.5,
  maxCpuRatio: 1.2,
  maxServeStartMs: 2_000,
  maxListMs: 1_000,
  maxStatsMs: 1_000,
} as const;

export interface BenchOptions {
  rounds: number;
  durationS: number;
  latencyS: number;
  json: boolean;
}

export function parseOptions(argv: string[]): BenchOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      rounds: { type: 'string' },
      duration: { type: 'string' },
      'latency-seconds': { type: 'string' },
      json: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const num = (name: string, raw: string | undefined, fallback: number, min: number, max: number) => {
    if (raw === undefined) return fallback;
    const n = Number(raw);
    if (!Number.isInteger(n) || n < min || n > max)
      throw new Error(`${name} must be a whole number from ${min} to ${max}, got ${JSON.stringify(raw)}`);
    return n;
  };
  return {
    rounds: num('--rounds', values.rounds, DEFAULT_ROUNDS, 1, 20),
    durationS: num('--duration', values.duration, DEFAULT_DURATION_S, 1, 120),
    latencyS: num('--latency-seconds', values['latency-seconds'], DEFAULT_LATENCY_S, 1, 120),
    json: values.json === true,
  };
}

export interface RoundResult {
  round: number;
  idle: Size;
  ingestReqPerS: number;
  ingestP99Ms: number;
  /** CPU ms of the serve process per acknowledged request, ingest phase. */
  ingestCpuMsPerReq: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  latencyCpuMsPerReq: number;
}

export interface Medians {
  idle: Size;
  ingestReqPerS: number;
  ingestP99Ms: number;
  ingestCpuMsPerReq: number;
  latencyP50Ms: number;
  latencyP99Ms: number;
  latencyCpuMsPerReq: number;
}

export interface CliTimes {
  idle: Size;
  /** Requests stored in the database when timed (bucket list sums every bucket's bytes). */
  requests: number;
  serveReadyMs: number;
  listMs: number;
  statsMs: number;
}

export interface Verdict {
  target: string;
  value: number;
  pass: boolean;
}

export function mediansOf(rounds: readonly RoundResult[], idle: Size): Medians {
  const of = (k: keyof Omit<RoundResult, 'round' | 'idle'>) => median(rounds.filter((r) => r.idle === idle).map((r) => r[k]));
  return {
    idle,
    ingestReqPerS: of('ingestReqPerS'),
    ingestP99Ms: of('ingestP99Ms'),
    ingestCpuMsPerReq: of('ingestCpuMsPerReq'),
    latencyP50Ms: of('latencyP50Ms'),
    latencyP99Ms: of('latencyP99Ms'),
    latencyCpuMsPerReq: of('latencyCpuMsPerReq'),
  };
}

export function verdicts(small: Medians, large: Medians, clis: readonly CliTimes[]): Verdict[] {
  const ratio = (a: number, b: number) => (b > 0 ? a / b : NaN);
  const out: Verdict[] = [];
  const ingest = ratio(large.ingestReqPerS, small.ingestReqPerS);
  out.push({ target: `ingest req/s ratio >= ${TARGETS.minIngestRatio}`, value: ingest, pass: ingest >= TARGETS.minIngestRatio });
  const p50 = ratio(large.latencyP50Ms, small.latencyP50Ms);
  out.push({ target: `latency p50 ratio <= ${TARGETS.maxP50Ratio}`, value: p50, pass: p50 <= TARGETS.maxP50Ratio });
  const p99 = ratio(large.latencyP99Ms, small.latencyP99Ms);
  out.push({ target: `latency p99 ratio <= ${TARGETS.maxP99Ratio}`, value: p99, pass: p99 <= TARGETS.maxP99Ratio });
  const cpuIngest = ratio(large.ingestCpuMsPerReq, small.ingestCpuMsPerReq);
  out.push({ target: `CPU/request ratio (ingest) <= ${TARGETS.maxCpuRatio}`, value: cpuIngest, pass: cpuIngest <= TARGETS.maxCpuRatio });
  const cpuLatency = ratio(large.latencyCpuMsPerReq, small.latencyCpuMsPerReq);
  out.push({ target: `CPU/request ratio (paced) <= ${TARGETS.maxCpuRatio}`, value: cpuLatency, pass: cpuLatency <= TARGETS.maxCpuRatio });
  for (const cli of clis) {
    const at = `(${cli.requests} requests)`;
    out.push({
      target: `serve ready ms < ${TARGETS.maxServeStartMs} ${at}`,
      value: cli.serveReadyMs,
      pass: cli.serveReadyMs < TARGETS.maxServeStartMs,
    });
    out.push({ target: `bucket list ms < ${TARGETS.maxListMs} ${at}`, value: cli.listMs, pass: cli.listMs < TARGETS.maxListMs });
    out.push({ target: `stats ms < ${TARGETS.maxStatsMs} ${at}`, value: cli.statsMs, pass: cli.statsMs < TARGETS.maxStatsMs });
  }
  return out;
}

export function renderReport(
  opts: BenchOptions,
  machine: MachineInfo,
  rounds: RoundResult[],
  medians: Medians[],
  cliTimes: CliTimes[],
  v: Verdict[],
): string {
  const lines: string[] = [];
  lines.push('hookbucket many-buckets benchmark');
  lines.push(
    `machine   ${machine.cpuCount} x ${machine.cpuModel}, ${machine.totalMemGiB} GiB RAM, ${machine.platform}, node ${machine.node}`,
  );
  lines.push(
    `load      ingest: autocannon ${CONNECTIONS}c closed loop, ${BODY_BYTES} B JSON to a bucket without destination, ${opts.durationS} s after ${INGEST_WARMUP_S} s warm-up`,
  );
  lines.push(
    `          latency: ${LATENCY_RATE_PER_S}/s paced to one bucket with a destination for ${opts.latencyS} s; ${opts.rounds} round(s) per size, alternating`,
  );
  lines.push('');
  const header = ['idle', 'round', 'ingest req/s', 'ingest p99 ms', 'ingest CPU ms/req', 'lat p50 ms', 'lat p99 ms', 'paced CPU ms/req'];
  const row = (idle: number, round: string, m: Omit<Medians, 'idle'>) => [
    String(idle),
    round,
    fixed(m.ingestReqPerS, 0),
    fixed(m.ingestP99Ms, 0),
    fixed(m.ingestCpuMsPerReq, 3),
    fixed(m.latencyP50Ms, 1),
    fixed(m.latencyP99Ms, 1),
    fixed(m.latencyCpuMsPerReq, 3),
  ];
  const rows = [...rounds.map((r) => row(r.idle, String(r.round), r)), ...medians.map((m) => row(m.idle, 'median', m))];
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]!.length)));
  const fmt = (r: string[]) => r.map((c, i) => c.padStart(widths[i]!)).join('  ');
  lines.push(fmt(header));
  lines.push(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of rows) lines.push(fmt(r));
  lines.push('');
  if (cliTimes.length > 0) {
    lines.push(
      `CLI, median of ${CLI_REPEATS} runs from spawn to exit, output to a file (serve: to its first /healthz 200, polled every 100 ms)`,
    );
    for (const c of cliTimes) {
      lines.push(
        `  ${String(c.idle).padStart(6)} idle buckets, ${String(c.requests).padStart(7)} requests stored: serve ready ${fixed(c.serveReadyMs, 0)} ms, bucket list ${fixed(c.listMs, 0)} ms, stats ${fixed(c.statsMs, 0)} ms`,
      );
    }
    lines.push('');
  }
  lines.push('targets (10,000 idle / 10 idle)');
  for (const x of v)
    lines.push(`  ${x.pass ? 'PASS' : 'MISS'}  ${x.target.padEnd(52)} measured ${fixed(x.value, x.target.includes('ms') ? 0 : 3)}`);
  return `${lines.join('\n')}\n`;
}

// ---------------------------------------------------------------------------------------------
// I/O

const progress = (msg: string) => process.stderr.write(`${msg}\n`);
const epochMs = () => performance.timeOrigin + performance.now();

/** Clock ticks per second for /proc/<pid>/stat times (100 on Linux almost everywhere). */
function clockTicks(): number {
  try {
    const n = Number(execFileSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).trim());
    return Number.isFinite(n) && n > 0 ? n : 100;
  } catch {
    return 100;
  }
}
const TICKS = clockTicks();

/** utime + stime of a process, in ms (fields 14 and 15 of /proc/<pid>/stat; the name may hold spaces). */
export function cpuMsOf(stat: string, ticksPerS: number): number {
  const rest = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return ((Number(rest[11]) + Number(rest[12])) * 1000) / ticksPerS;
}
const cpuMs = (pid: number) => cpuMsOf(readFileSync(`/proc/${pid}/stat`, 'utf8'), TICKS);

/**
 * A database with `load`, `busy` and `idle` idle buckets, made through the store: two template
 * buckets through createBucket (every column with its default), then copies of their rows in one
 * transaction, and one bucket_epoch bump (what createBucket does per bucket).
 */
export async function makeDb(path: string, idle: number, consumerUrl: string): Promise<void> {
  const store = await SqliteStore.open({ path, durability: 'normal', busyTimeoutMs: 5000, clock: systemClock });
  await store.createBucket({ name: 'load' });
  await store.createBucket({ name: 'busy', destination: `${consumerUrl}/busy` });
  await store.createBucket({ name: 'idle-00000', destination: `${consumerUrl}/idle` });
  await store.createBucket({ name: 'idle-00001' });
  await store.close();
  const raw = openSqlite(path, { durability: 'normal', busyTimeoutMs: 5000 });
  try {
    const cols = (raw.prepare('pragma table_info(buckets)').all() as Array<{ name: string }>)
      .map((c) => c.name)
      .filter((c) => c !== 'name');
    const copy = raw.prepare(`insert into buckets (name, ${cols.join(', ')}) select ?, ${cols.join(', ')} from buckets where name = ?`);
    raw.transaction(() => {
      for (let i = 2; i < idle; i++) copy.run(`idle-${String(i).padStart(5, '0')}`, i % 2 === 0 ? 'idle-00000' : 'idle-00001');
      // As after the upgrade migration or a delivered backlog: a bucket_due row, nothing due.
      raw.prepare(`insert or ignore into bucket_due (bucket, next_due_at) select name, null from buckets where name like 'idle-%'`).run();
      raw.prepare(`update meta set value = value + 1 where key = 'bucket_epoch'`).run();
    })();
    const n = Number(raw.prepare(`select count(*) from buckets where name like 'idle-%'`).pluck().get());
    if (n !== idle) throw new Error(`made ${n} idle buckets, wanted ${idle}`);
  } finally {
    raw.close();
  }
}

async function startServe(db: string, cwd: string, name: string): Promise<{ m: Managed; url: string; readyMs: number }> {
  const port = await freePort();
  const t0 = epochMs();
  const m = startChild(
    name,
    [join(cliDir(), 'bin.js'), '--db', db, 'serve', '--port', String(port), '--host', '127.0.0.1', '--no-admin', '--log-level', 'warn'],
    cwd,
  );
  const url = `http://127.0.0.1:${port}`;
  await waitReady(m, url);
  return { m, url, readyMs: epochMs() - t0 };
}

function cliDir(): string {
  return new URL('../src/cli/', import.meta.url).pathname;
}

/** Sends `n` requests to `url` paced at the rate; returns each request's ack time (NaN when not 2xx). */
async function paced(client: Pool, path: string, n: number, seq0: number, body: string, failures: { n: number }): Promise<number[]> {
  const intervalMs = 1000 / LATENCY_RATE_PER_S;
  const ackAt = new Array<number>(n).fill(NaN);
  const inflight: Promise<void>[] = [];
  const start = epochMs() + intervalMs;
  const deadline = start + n * intervalMs + 5_000; // bounds the loop should the event loop stall
  for (let i = 0; i < n && epochMs() < deadline; i++) {
    const wait = start + i * intervalMs - epochMs();
    if (wait > 0) await sleep(wait);
    inflight.push(
      client
        .request({
          path,
          method: 'POST',
          headers: { 'content-type': 'application/json', 'x-bench-seq': String(seq0 + i) },
          body,
          headersTimeout: REQUEST_TIMEOUT_MS,
          bodyTimeout: REQUEST_TIMEOUT_MS,
        })
        .then(async (res) => {
          const t = epochMs();
          await res.body.arrayBuffer();
          if (res.statusCode >= 200 && res.statusCode < 300) ackAt[i] = t;
          else failures.n++;
        })
        .catch(() => void failures.n++),
    );
  }
  await withTimeout(Promise.all(inflight), REQUEST_TIMEOUT_MS + 5_000, 'ingest answers');
  return ackAt;
}

async function round(
  opts: BenchOptions,
  idle: Size,
  roundNo: number,
  db: string,
  tmp: string,
  consumer: ConsumerProcess,
  body: string,
  problems: string[],
): Promise<RoundResult> {
  const { m, url } = await startServe(db, tmp, `serve-${idle}`);
  const pid = m.child.pid!;
  const client = new Pool(url, { connections: LATENCY_CLIENT_CONNECTIONS });
  try {
    const abort = new AbortController();
    progress(`round ${roundNo}, ${idle} idle: ingest ${opts.durationS} s at ${CONNECTIONS} connections`);
    await load(`${url}/b/load`, CONNECTIONS, INGEST_WARMUP_S, body, abort.signal);
    const c0 = cpuMs(pid);
    const r = await load(`${url}/b/load`, CONNECTIONS, opts.durationS, body, abort.signal);
    const ingestCpu = cpuMs(pid) - c0;
    if (r.non2xx > 0 || r.errors > 0) problems.push(`round ${roundNo}, ${idle} idle, ingest: ${r.non2xx} non-2xx, ${r.errors} errors`);

    progress(`round ${roundNo}, ${idle} idle: ${LATENCY_RATE_PER_S}/s paced for ${opts.latencyS} s`);
    const failures = { n: 0 };
    await consumer.reset([LATENCY_WARMUP]);
    await paced(client, '/b/busy', LATENCY_WARMUP, 1_000_000, body, failures);
    await consumer.reached(LATENCY_WARMUP, ARRIVAL_TIMEOUT_MS);
    const count = LATENCY_RATE_PER_S * opts.latencyS;
    await consumer.reset([count]);
    const c1 = cpuMs(pid);
    const ackAt = await paced(client, '/b/busy', count, 0, body, failures);
    await consumer
      .reached(count, ARRIVAL_TIMEOUT_MS)
      .catch((e: unknown) => problems.push(`round ${roundNo}, ${idle} idle: ${(e as Error).message}`));
    const pacedCpu = cpuMs(pid) - c1;
    const dump = await consumer.dump();
    if (failures.n > 0) problems.push(`round ${roundNo}, ${idle} idle: ${failures.n} paced requests failed or were not 2xx`);
    if (dump.distinctIds !== dump.at.length) problems.push(`round ${roundNo}, ${idle} idle: a request reached the consumer twice`);
    const lat: number[] = [];
    for (let k = 0; k < dump.seq.length; k++) {
      const s = dump.seq[k]!;
      if (s >= 0 && s < count && !Number.isNaN(ackAt[s]!)) lat.push(dump.at[k]! - ackAt[s]!);
    }
    lat.sort((a, b) => a - b);
    if (lat.length !== count)
      problems.push(`round ${roundNo}, ${idle} idle: ${lat.length} of ${count} paced requests acknowledged and forwarded`);
    return {
      round: roundNo,
      idle,
      ingestReqPerS: r.requests.average,
      ingestP99Ms: r.latency.p99,
      ingestCpuMsPerReq: r['2xx'] > 0 ? ingestCpu / r['2xx'] : NaN,
      latencyP50Ms: percentile(lat, 50),
      latencyP99Ms: percentile(lat, 99),
      latencyCpuMsPerReq: count > 0 ? pacedCpu / count : NaN,
    };
  } finally {
    await client.close();
    await stopChild(m);
  }
}

/**
 * Runs the CLI with its stdout going to a file, as `> out.json` would (a pipe read by this process
 * would add the bench's own reading of 10 MB to the figure); returns the wall time in ms.
 */
async function timedCli(db: string, cwd: string, args: string[], outFile: string): Promise<number> {
  const out = openSync(outFile, 'w');
  try {
    const t0 = epochMs();
    const child = spawn(process.execPath, [join(cliDir(), 'bin.js'), '--db', db, ...args], {
      cwd,
      env: childEnv(),
      stdio: ['ignore', out, 'inherit'],
    });
    const code = await withTimeout(
      new Promise<number | null>((ok, fail) => {
        child.once('error', fail);
        child.once('exit', ok);
      }),
      60_000,
      `hookbucket ${args.join(' ')}`,
    );
    const ms = epochMs() - t0;
    if (code !== 0) throw new Error(`hookbucket ${args.join(' ')} exited with ${code}`);
    return ms;
  } finally {
    closeSync(out);
  }
}

async function timeCli(idle: Size, db: string, tmp: string): Promise<CliTimes> {
  const serve: number[] = [];
  const list: number[] = [];
  const stats: number[] = [];
  const outFile = join(tmp, 'cli-out.json');
  for (let i = 0; i < CLI_REPEATS; i++) {
    const s = await startServe(db, tmp, `serve-start-${idle}`);
    serve.push(s.readyMs);
    await stopChild(s.m);
    list.push(await timedCli(db, tmp, ['bucket', 'list', '--json'], outFile));
    const listed = JSON.parse(readFileSync(outFile, 'utf8')) as { buckets: unknown[] };
    if (listed.buckets.length !== idle + 2)
      throw new Error(`bucket list --json gave ${listed.buckets.length} buckets, expected ${idle + 2}`);
    stats.push(await timedCli(db, tmp, ['stats', '--json'], outFile));
    const st = JSON.parse(readFileSync(outFile, 'utf8')) as { buckets: unknown[] };
    if (st.buckets.length !== idle + 2) throw new Error(`stats --json gave ${st.buckets.length} buckets, expected ${idle + 2}`);
  }
  const raw = openSqlite(db, { durability: 'normal', busyTimeoutMs: 5000 });
  const requests = Number(raw.prepare('select count(*) from requests').pluck().get());
  raw.close();
  return { idle, requests, serveReadyMs: median(serve), listMs: median(list), statsMs: median(stats) };
}

async function main(): Promise<number> {
  let opts: BenchOptions;
  try {
    opts = parseOptions(process.argv.slice(2));
  } catch (e) {
    process.stderr.write(
      `${(e as Error).message}\nusage: node dist/bench/buckets.js [--rounds 3] [--duration 5] [--latency-seconds 5] [--json]\n`,
    );
    return 2;
  }
  const report = opts.json ? process.stderr : process.stdout;
  const tmp = await mkdtemp(join(os.tmpdir(), 'hookbucket-bench-buckets-'));
  let consumer: ConsumerProcess | undefined;
  const problems: string[] = [];
  try {
    consumer = await ConsumerProcess.start();
    const body = makeBody(BODY_BYTES);
    const dbs = new Map<Size, string>();
    for (const idle of SIZES) {
      const db = join(tmp, `idle-${idle}.db`);
      progress(`making a database with ${idle} idle buckets`);
      await makeDb(db, idle, consumer.url);
      dbs.set(idle, db);
    }
    // The CLI on the fresh databases (buckets only), and again after the rounds stored requests.
    const cliTimes: CliTimes[] = [];
    for (const idle of SIZES) {
      progress(`timing serve start, bucket list and stats with ${idle} idle buckets`);
      cliTimes.push(await timeCli(idle, dbs.get(idle)!, tmp));
    }
    const rounds: RoundResult[] = [];
    for (let r = 1; r <= opts.rounds; r++) {
      for (const idle of SIZES) rounds.push(await round(opts, idle, r, dbs.get(idle)!, tmp, consumer, body, problems));
    }
    for (const idle of SIZES) {
      progress(`timing serve start, bucket list and stats with ${idle} idle buckets, after the rounds`);
      cliTimes.push(await timeCli(idle, dbs.get(idle)!, tmp));
    }
    const medians = SIZES.map((s) => mediansOf(rounds, s));
    const v = verdicts(
      medians[0]!,
      medians[1]!,
      cliTimes.filter((c) => c.idle === 10_000),
    );
    const machine = machineInfo();
    report.write(renderReport(opts, machine, rounds, medians, cliTimes, v));
    if (opts.json)
      process.stdout.write(
        `${JSON.stringify({ machine, options: opts, targets: TARGETS, rounds, medians, cli: cliTimes, verdicts: v, problems }, null, 2)}\n`,
      );
    if (problems.length > 0) {
      report.write(`\nWARNING: the run had errors, so its figures are suspect:\n${problems.map((p) => `  - ${p}`).join('\n')}\n`);
      return 1;
    }
    return 0;
  } catch (e) {
    process.stderr.write(`bench failed: ${e instanceof Error ? (e.stack ?? e.message) : String(e)}\n`);
    return 1;
  } finally {
    await consumer?.stop();
    await rm(tmp, { recursive: true, force: true });
  }
}

await runIfMain(import.meta.url, main);

/**
 * Ingest benchmark: the receiver's throughput and latency as a ratio of a no-op server measured in
 * the same run, on the same machine, under the same closed-loop load.
 *
 *   npm run bench:ingest                      # 30 s per measured run
 *   npm run bench:ingest -- --duration 5      # quick smoke run (or BENCH_DURATION=5)
 *   npm run bench:ingest -- --json > out.json # report on stderr, JSON on stdout
 *
 * What runs:
 * - the no-op baseline (bench/noop-server.ts): Hono on @hono/node-server, reads the body, answers 200;
 * - the real receiver, started with the real CLI binary (`serve`, default durability full) on a fresh
 *   SQLite file, into a bucket with a destination so each request also writes a delivery row.
 * Each server is its own child process, so autocannon never shares their event loop, and only the
 * server under test is alive during its runs, so neither steals CPU from the other (a receiver left
 * idle still checkpoints its WAL every 100 ms). The receiver keeps its database across its runs.
 *
 * Load: autocannon, POST of a 2 KiB JSON body, pipelining 1, no rate limit (closed loop: each
 * connection sends its next request when the previous answer arrives), at 32 and 256 connections.
 * Runs alternate noop32, recv32, noop256, recv256, each after its own warm-up (default 3 s) that is
 * not measured. 30 s per measured run by default, so WAL growth and checkpoints are part of it.
 *
 * Targets (issue): at 256 connections receiver req/s >= 0.75 of no-op; at 32 connections >= 0.50
 * with receiver p99 <= 25 ms. A miss is reported, not an error: the exit code is 0 unless something
 * failed (connection errors, non-2xx answers, a stored count that cannot match the acks, a child
 * that would not start or stop).
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { get as httpGet } from 'node:http';
import { createRequire } from 'node:module';
import { createServer, type AddressInfo } from 'node:net';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { fileURLToPath } from 'node:url';
import { parseArgs, promisify } from 'node:util';
import { abortOnSigint, optionsOrUsage, progress, runIfMain } from './report.js';

const CONNECTIONS = [32, 256] as const;
const BODY_BYTES = 2048; // 2 KiB, a typical webhook payload
const DEFAULT_DURATION_S = 30;
const DEFAULT_WARMUP_S = 3;
const BUCKET = 'bench';
// Port 9 (discard) on loopback: nothing listens there, and serve runs with --no-worker (ingest alone);
// the destination only makes ingest write a delivery row beside each request.
const DESTINATION = 'http://127.0.0.1:9/unused';

const READY_TIMEOUT_MS = 15_000; // 15 s for a child to answer GET /healthz with 200
const READY_POLL_MS = 100;
const HEALTH_REQUEST_TIMEOUT_MS = 1_000;
// The receiver lets in-flight requests finish for up to 10 s (main.ts close()), then flushes.
const STOP_TIMEOUT_MS = 20_000;
const CLI_TIMEOUT_MS = 30_000;
const STDERR_TAIL_LINES = 20;

export const TARGETS = {
  /** Receiver req/s over no-op req/s at 256 connections. */
  minRatioAt256: 0.75,
  /** Receiver req/s over no-op req/s at 32 connections. */
  minRatioAt32: 0.5,
  /** Receiver p99 latency at 32 connections, in ms. */
  maxP99At32Ms: 25,
} as const;

// ---------------------------------------------------------------------------------------------
// autocannon is CommonJS without bundled types; type only the part of it this file uses.

interface AutocannonOptions {
  url: string;
  method: 'POST';
  headers: Record<string, string>;
  body: string;
  connections: number;
  /** In seconds. */
  duration: number;
}

export interface AutocannonResult {
  /** Completed requests per 1 s sample; `total` completed and `sent` started over the run. */
  requests: { average: number; total: number; sent: number };
  /** In ms, recorded with a 1 ms resolution. */
  latency: { p50: number; p99: number; max: number };
  /** Connection errors, including timeouts. */
  errors: number;
  timeouts: number;
  non2xx: number;
  '2xx': number;
  /** In seconds. */
  duration: number;
}

interface AutocannonInstance extends PromiseLike<AutocannonResult> {
  stop(): void;
}

const autocannon = createRequire(import.meta.url)('autocannon') as (opts: AutocannonOptions) => AutocannonInstance;

// ---------------------------------------------------------------------------------------------
// Pure parts: options, body, summary, verdicts, report.

export type ServerKind = 'noop' | 'receiver';

export interface BenchOptions {
  /** Measured seconds per run. */
  durationS: number;
  /** Unmeasured seconds before each measured run. */
  warmupS: number;
  json: boolean;
}

/** Flags win over BENCH_DURATION, which wins over the 30 s default. Throws on a bad value. */
export function parseOptions(argv: string[], env: NodeJS.ProcessEnv): BenchOptions {
  const { values } = parseArgs({
    args: argv,
    options: {
      duration: { type: 'string' },
      warmup: { type: 'string' },
      json: { type: 'boolean', default: false },
    },
    strict: true,
  });
  const seconds = (name: string, raw: string | undefined, fallback: number, min: number): number => {
    if (raw === undefined || raw === '') return fallback;
    const n = Number(raw);
    if (!Number.isFinite(n) || n < min || n > 3600)
      throw new Error(`${name} must be a number of seconds from ${min} to 3600, got ${JSON.stringify(raw)}`);
    return n;
  };
  return {
    durationS: seconds('--duration', values.duration ?? env.BENCH_DURATION, DEFAULT_DURATION_S, 1),
    warmupS: seconds('--warmup', values.warmup, DEFAULT_WARMUP_S, 0),
    json: values.json === true,
  };
}

/** A JSON body of exactly `bytes` bytes (ASCII only, so characters and bytes agree). */
export function makeBody(bytes: number): string {
  const shape = (pad: string) => JSON.stringify({ id: 'evt_bench_0001', type: 'bench.event', created: 1_700_000_000, data: { pad } });
  const padLength = bytes - shape('').length;
  if (padLength < 0) throw new Error(`body of ${bytes} bytes is too small for the event shape`);
  return shape('x'.repeat(padLength));
}

export interface LoadSummary {
  server: ServerKind;
  connections: number;
  durationS: number;
  /** Mean of autocannon's 1 s samples of completed requests. */
  reqPerSec: number;
  p50Ms: number;
  p99Ms: number;
  maxMs: number;
  ok2xx: number;
  non2xx: number;
  /** Connection errors and timeouts. */
  errors: number;
  /** Requests still unanswered when autocannon stopped: the server may have stored them without us seeing the ack. */
  cutOff: number;
}

export function summarize(server: ServerKind, connections: number, r: AutocannonResult): LoadSummary {
  return {
    server,
    connections,
    durationS: r.duration,
    reqPerSec: r.requests.average,
    p50Ms: r.latency.p50,
    p99Ms: r.latency.p99,
    maxMs: r.latency.max,
    ok2xx: r['2xx'],
    non2xx: r.non2xx,
    errors: r.errors,
    cutOff: Math.max(0, r.requests.sent - r.requests.total - r.errors),
  };
}

export interface StoredCheck {
  /** Requests the bucket gained over this receiver phase (warm-up and measured run). */
  stored: number;
  /** 2xx answers autocannon counted over the same phase. */
  acked: number;
  /** Requests in flight when autocannon stopped: stored, perhaps, but never acked to us. */
  cutOff: number;
  /**
   * equal: stored = acked. cut-off: stored exceeds acked by no more than the requests cut off
   * mid-flight (the server finished them after autocannon closed the socket). mismatch: anything
   * else; fewer stored than acked means an acknowledged request was lost.
   */
  verdict: 'equal' | 'cut-off' | 'mismatch';
}

export function checkStored(stored: number, acked: number, cutOff: number): StoredCheck {
  const verdict = stored === acked ? 'equal' : stored > acked && stored - acked <= cutOff ? 'cut-off' : 'mismatch';
  return { stored, acked, cutOff, verdict };
}

/** checkStored against the 2xx and cut-off requests of a phase's loads (its warm-up, if any, and its measured run). */
export function checkStoredLoads(stored: number, loads: readonly (LoadSummary | undefined)[]): StoredCheck {
  const ran = loads.filter((s): s is LoadSummary => s !== undefined);
  return checkStored(
    stored,
    ran.reduce((n, s) => n + s.ok2xx, 0),
    ran.reduce((n, s) => n + s.cutOff, 0),
  );
}

/** The non-2xx answers and connection errors of a phase's warm-up (if any) and measured run, as problems of `at`. */
export function loadProblems(at: string, warmup: LoadSummary | undefined, measured: LoadSummary): string[] {
  const out: string[] = [];
  for (const [label, s] of [
    ['warm-up', warmup],
    ['measured', measured],
  ] as const) {
    if (!s) continue;
    if (s.non2xx > 0) out.push(`${at} ${label}: ${s.non2xx} non-2xx responses`);
    if (s.errors > 0) out.push(`${at} ${label}: ${s.errors} connection errors/timeouts`);
  }
  return out;
}

export interface Phase {
  server: ServerKind;
  connections: number;
  warmup: LoadSummary | undefined;
  measured: LoadSummary;
  /** Receiver phases only. */
  storedCheck?: StoredCheck;
}

export interface Verdict {
  target: string;
  value: number;
  pass: boolean;
}

export interface Comparison {
  connections: number;
  noop: LoadSummary;
  receiver: LoadSummary;
  /** Receiver req/s over no-op req/s. */
  ratio: number;
  verdicts: Verdict[];
}

export function compare(phases: Phase[]): Comparison[] {
  return CONNECTIONS.map((connections) => {
    const find = (server: ServerKind) => {
      const p = phases.find((x) => x.server === server && x.connections === connections);
      if (!p) throw new Error(`no ${server} run at ${connections} connections`);
      return p.measured;
    };
    const noop = find('noop');
    const receiver = find('receiver');
    const ratio = noop.reqPerSec > 0 ? receiver.reqPerSec / noop.reqPerSec : 0;
    const verdicts: Verdict[] =
      connections === 256
        ? [{ target: `req/s ratio >= ${TARGETS.minRatioAt256}`, value: ratio, pass: ratio >= TARGETS.minRatioAt256 }]
        : [
            { target: `req/s ratio >= ${TARGETS.minRatioAt32}`, value: ratio, pass: ratio >= TARGETS.minRatioAt32 },
            { target: `receiver p99 <= ${TARGETS.maxP99At32Ms} ms`, value: receiver.p99Ms, pass: receiver.p99Ms <= TARGETS.maxP99At32Ms },
          ];
    return { connections, noop, receiver, ratio, verdicts };
  });
}

export interface MachineInfo {
  cpuModel: string;
  cpuCount: number;
  node: string;
  platform: string;
  totalMemGiB: number;
}

export function machineInfo(): MachineInfo {
  const cpus = os.cpus();
  return {
    cpuModel: cpus[0]?.model.trim() ?? 'unknown',
    cpuCount: cpus.length,
    node: process.version,
    platform: `${os.platform()} ${os.release()} ${os.arch()}`,
    totalMemGiB: Math.round((os.totalmem() / 2 ** 30) * 10) / 10,
  };
}

/** Problems that make the run an error (exit 1), as opposed to a missed target. */
export function problems(phases: Phase[]): string[] {
  const out: string[] = [];
  for (const p of phases) {
    out.push(...loadProblems(`${p.server} ${p.connections}c`, p.warmup, p.measured));
    const c = p.storedCheck;
    if (c?.verdict === 'mismatch') {
      out.push(
        `${p.server} ${p.connections}c: bucket gained ${c.stored} requests but autocannon counted ${c.acked} 2xx (cut off in flight: ${c.cutOff})`,
      );
    }
  }
  return out;
}

const fixed = (n: number, digits: number) => n.toFixed(digits);

export function renderReport(opts: BenchOptions, machine: MachineInfo, phases: Phase[], comparisons: Comparison[]): string {
  const lines: string[] = [];
  lines.push('hookbucket ingest benchmark');
  lines.push(
    `machine   ${machine.cpuCount} x ${machine.cpuModel}, ${machine.totalMemGiB} GiB RAM, ${machine.platform}, node ${machine.node}`,
  );
  lines.push(
    `load      autocannon, closed loop, POST ${BODY_BYTES} B JSON to /b/${BUCKET}, ${opts.durationS} s measured after ${opts.warmupS} s warm-up per run`,
  );
  lines.push('receiver  hookbucket serve, durability full, bucket with a destination (request + delivery row per request)');
  lines.push('');

  const header = ['conns', 'server', 'req/s', 'p50 ms', 'p99 ms', 'max ms', '2xx', 'non-2xx', 'errors'];
  const rows: string[][] = [];
  for (const c of comparisons) {
    for (const s of [c.noop, c.receiver]) {
      rows.push([
        String(c.connections),
        s.server === 'noop' ? 'no-op' : 'receiver',
        fixed(s.reqPerSec, 0),
        fixed(s.p50Ms, 0),
        fixed(s.p99Ms, 0),
        fixed(s.maxMs, 0),
        String(s.ok2xx),
        String(s.non2xx),
        String(s.errors),
      ]);
    }
  }
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]?.length ?? 0)));
  // Text columns flush left, numbers flush right.
  const fmt = (r: string[]) => r.map((cell, i) => (i < 2 ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join('  ');
  lines.push(fmt(header));
  lines.push(widths.map((w) => '-'.repeat(w)).join('  '));
  for (const r of rows) lines.push(fmt(r));
  lines.push('(latency from autocannon, 1 ms resolution)');
  lines.push('');

  lines.push('targets');
  for (const c of comparisons) {
    lines.push(`  ${c.connections} connections: receiver/no-op req/s = ${fixed(c.ratio, 3)}`);
    for (const v of c.verdicts) {
      const shown = v.target.includes('ratio') ? fixed(v.value, 3) : `${fixed(v.value, 0)} ms`;
      lines.push(`    ${v.pass ? 'PASS' : 'MISS'}  ${v.target.padEnd(24)} measured ${shown}`);
    }
  }
  lines.push('');

  lines.push('stored vs acknowledged (bucket show --json .requests, per receiver phase incl. warm-up)');
  for (const p of phases) {
    const c = p.storedCheck;
    if (!c) continue;
    const note =
      c.verdict === 'equal'
        ? 'equal'
        : c.verdict === 'cut-off'
          ? `stored ${c.stored - c.acked} more: requests in flight when autocannon stopped (up to ${c.cutOff})`
          : `MISMATCH (in flight when autocannon stopped: ${c.cutOff})`;
    lines.push(`  ${String(p.connections).padStart(3)} connections: stored ${c.stored}, 2xx counted ${c.acked}: ${note}`);
  }
  return `${lines.join('\n')}\n`;
}

// ---------------------------------------------------------------------------------------------
// I/O: child processes, readiness, load.

const here = dirname(fileURLToPath(import.meta.url)); // dist/bench
const CLI_BIN = resolve(here, '../src/cli/bin.js');
const NOOP_SERVER = resolve(here, 'noop-server.js');

/**
 * Children run in the temp dir with HOOKBUCKET_* removed from their environment, so neither a
 * developer's .env (bin.js reads ./.env) nor exported settings change what is measured.
 */
export function childEnv(): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith('HOOKBUCKET_')));
}

interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface Managed {
  readonly name: string;
  readonly child: ChildProcess;
  readonly exited: Promise<Exit>;
  /** Set once the child has exited. */
  readonly exit: Exit | undefined;
  /** Its last STDERR_TAIL_LINES lines of output. */
  readonly tail: string[];
}

/** Starts `node <args>`, forwarding its output to our stderr with a prefix and keeping a tail for error messages. */
export function startChild(name: string, args: string[], cwd: string): Managed {
  const child = spawn(process.execPath, args, { cwd, env: childEnv(), stdio: ['ignore', 'pipe', 'pipe'] });
  const tail: string[] = [];
  let exit: Exit | undefined;
  const exited = new Promise<Exit>((resolveExit) => {
    child.once('exit', (code, signal) => resolveExit((exit = { code, signal })));
    child.once('error', (err) => {
      tail.push(`spawn failed: ${err.message}`);
      resolveExit((exit = { code: null, signal: null }));
    });
  });
  for (const stream of [child.stdout, child.stderr]) {
    stream?.setEncoding('utf8');
    let partial = '';
    stream?.on('data', (chunk: string) => {
      const lines = (partial + chunk).split('\n');
      partial = lines.pop() ?? '';
      for (const line of lines) {
        process.stderr.write(`[${name}] ${line}\n`);
        tail.push(line);
        if (tail.length > STDERR_TAIL_LINES) tail.shift();
      }
    });
  }
  return {
    name,
    child,
    exited,
    tail,
    get exit() {
      return exit;
    },
  };
}

function describeExit(m: Managed): string {
  const e = m.exit;
  const how = e === undefined ? 'still running' : e.signal ? `killed by ${e.signal}` : `exit code ${e.code}`;
  return `${m.name} ${how}${m.tail.length ? `; last output:\n  ${m.tail.join('\n  ')}` : ''}`;
}

/** One GET without a pooled agent, so no keep-alive socket of ours lingers on the server under test. */
function getStatus(url: string): Promise<{ status: number; body: string }> {
  return new Promise((resolveGet, reject) => {
    const req = httpGet(url, { agent: false, timeout: HEALTH_REQUEST_TIMEOUT_MS }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (c: string) => (body += c));
      res.on('end', () => resolveGet({ status: res.statusCode ?? 0, body }));
      res.on('error', reject);
    });
    req.on('timeout', () => req.destroy(new Error(`no answer within ${HEALTH_REQUEST_TIMEOUT_MS} ms`)));
    req.on('error', reject);
  });
}

/** Polls GET /healthz until it answers 200, the child exits, or `timeoutMs` (default READY_TIMEOUT_MS) passes. */
export async function waitReady(m: Managed, baseUrl: string, timeoutMs = READY_TIMEOUT_MS): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = 'no answer yet';
  while (Date.now() < deadline) {
    if (m.exit) throw new Error(`${m.name} exited before it was ready: ${describeExit(m)}`);
    try {
      const r = await getStatus(`${baseUrl}/healthz`);
      if (r.status === 200) return;
      last = `${r.status} ${r.body}`;
    } catch (e) {
      last = e instanceof Error ? e.message : String(e);
    }
    await sleep(READY_POLL_MS);
  }
  throw new Error(`${m.name} not ready after ${timeoutMs} ms (last /healthz: ${last}): ${describeExit(m)}`);
}

/** SIGTERM, then wait for exit; SIGKILL after STOP_TIMEOUT_MS. Throws unless the child exited 0. */
export async function stopChild(m: Managed): Promise<void> {
  if (!m.exit) {
    m.child.kill('SIGTERM');
    const exited = await Promise.race([m.exited, sleep(STOP_TIMEOUT_MS, undefined, { ref: false })]);
    if (!exited) {
      m.child.kill('SIGKILL');
      await m.exited;
      throw new Error(`${m.name} did not exit within ${STOP_TIMEOUT_MS} ms of SIGTERM and was killed`);
    }
  }
  if (m.exit?.code !== 0) throw new Error(`${m.name} stopped badly: ${describeExit(m)}`);
}

/** A free loopback port. Another process could take it before the child binds; the child then fails to start and we say so. */
export async function freePort(): Promise<number> {
  const server = createServer();
  await new Promise<void>((ok, fail) => {
    server.once('error', fail);
    server.listen(0, '127.0.0.1', ok);
  });
  const { port } = server.address() as AddressInfo;
  await new Promise<void>((ok) => server.close(() => ok()));
  return port;
}

const execFileAsync = promisify(execFile);

/** Runs the hookbucket CLI against the bench database and returns its stdout. */
export async function cli(dbPath: string, cwd: string, args: string[]): Promise<string> {
  const { stdout } = await execFileAsync(process.execPath, [CLI_BIN, '--db', dbPath, ...args], {
    cwd,
    env: childEnv(),
    timeout: CLI_TIMEOUT_MS,
  });
  return stdout;
}

async function storedCount(dbPath: string, cwd: string): Promise<number> {
  const shown = JSON.parse(await cli(dbPath, cwd, ['bucket', 'show', BUCKET, '--json'])) as { requests?: unknown };
  if (typeof shown.requests !== 'number') throw new Error('bucket show --json gave no numeric .requests');
  return shown.requests;
}

/** One autocannon run; SIGINT on the bench (signal) stops it early, and its partial result is discarded by the caller. */
export async function load(
  url: string,
  connections: number,
  durationS: number,
  body: string,
  signal: AbortSignal,
): Promise<AutocannonResult> {
  const instance = autocannon({
    url,
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body,
    connections,
    duration: durationS,
  });
  const stop = () => instance.stop();
  signal.addEventListener('abort', stop, { once: true });
  try {
    return await instance;
  } finally {
    signal.removeEventListener('abort', stop);
  }
}

// ---------------------------------------------------------------------------------------------

async function main(): Promise<number> {
  const opts = optionsOrUsage(
    () => parseOptions(process.argv.slice(2), process.env),
    'node dist/bench/ingest.js [--duration <s>] [--warmup <s>] [--json]',
  );
  if (opts === undefined) return 2;
  // With --json, stdout carries only the JSON; the human report moves to stderr.
  const report = opts.json ? process.stderr : process.stdout;
  const sigint = abortOnSigint();

  const body = makeBody(BODY_BYTES);
  const tmp = await mkdtemp(join(os.tmpdir(), 'hookbucket-bench-'));
  const dbPath = join(tmp, 'bench.db');
  let running: Managed | undefined;
  try {
    await cli(dbPath, tmp, ['bucket', 'create', BUCKET, '--destination', DESTINATION]);

    const phases: Phase[] = [];
    let storedSoFar = 0;
    for (const connections of CONNECTIONS) {
      for (const server of ['noop', 'receiver'] as const) {
        if (sigint.signal.aborted) throw new Error('interrupted');
        const port = await freePort();
        const args =
          server === 'noop'
            ? [NOOP_SERVER, '--port', String(port)]
            : [
                CLI_BIN,
                '--db',
                dbPath,
                'serve',
                '--no-worker',
                '--no-admin',
                '--port',
                String(port),
                '--host',
                '127.0.0.1',
                '--log-level',
                'warn',
              ];
        const baseUrl = `http://127.0.0.1:${port}`;
        running = startChild(server, args, tmp);
        await waitReady(running, baseUrl);

        const url = `${baseUrl}/b/${BUCKET}`;
        let warmup: LoadSummary | undefined;
        if (opts.warmupS > 0) {
          progress(`${server} ${connections}c: warm-up ${opts.warmupS} s`);
          warmup = summarize(server, connections, await load(url, connections, opts.warmupS, body, sigint.signal));
        }
        if (sigint.signal.aborted) throw new Error('interrupted');
        progress(`${server} ${connections}c: measuring ${opts.durationS} s`);
        const measured = summarize(server, connections, await load(url, connections, opts.durationS, body, sigint.signal));
        if (sigint.signal.aborted) throw new Error('interrupted');

        await stopChild(running);
        running = undefined;

        const phase: Phase = { server, connections, warmup, measured };
        if (server === 'receiver') {
          // Counted after a clean stop, so every request the receiver accepted has been committed.
          const total = await storedCount(dbPath, tmp);
          phase.storedCheck = checkStoredLoads(total - storedSoFar, [warmup, measured]);
          storedSoFar = total;
        }
        phases.push(phase);
      }
    }

    const comparisons = compare(phases);
    const machine = machineInfo();
    report.write(renderReport(opts, machine, phases, comparisons));
    const found = problems(phases);
    if (opts.json) {
      process.stdout.write(
        `${JSON.stringify(
          {
            machine,
            options: { ...opts, bodyBytes: BODY_BYTES, connections: CONNECTIONS },
            targets: TARGETS,
            phases,
            comparisons,
            problems: found,
          },
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
    if (running) await stopChild(running).catch((e: unknown) => process.stderr.write(`${e instanceof Error ? e.message : String(e)}\n`));
    await rm(tmp, { recursive: true, force: true });
    sigint.dispose();
  }
}

// Run only when executed, so the pure helpers above can be imported by a test.
await runIfMain(import.meta.url, main);

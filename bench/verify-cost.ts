/**
 * The CPU cost of sender verification at ingest: serve's CPU per 2 KiB request into a bucket that
 * verifies Stripe signatures, over its CPU per request into the same bucket shape without
 * verification, measured in the same serve process in the same run.
 *
 *   npm run bench:verify                         # 7 rounds of 4000 requests per bucket
 *   npm run bench:verify -- --rounds 3 --requests 1000   # a quick smoke run
 *   npm run bench:verify -- --json > out.json    # report on stderr, JSON on stdout
 *
 * Why CPU and not wall clock: on a shared 2-core machine throughput ratios move by more than the
 * 5% budget from one run to the next. The CPU serve spends is read per thread from
 * /proc/<pid>/task/<tid>/schedstat (the first field: nanoseconds on the CPU, kept by the scheduler
 * per thread), before and after each round; the process-wide utime + stime from /proc/<pid>/stat
 * (clock ticks, 10 ms each) is shown beside it as a cross-check that includes threads that ended.
 * Verification runs on the main thread (the HMAC is fed as the body arrives), so the main thread's
 * figure is shown apart from the total (the SQLite writer and checkpoint threads, libuv, V8).
 *
 * What runs: the real CLI binary (`serve --no-worker --no-admin`, durability full) on a fresh
 * SQLite file, two buckets without a destination (so the store's share, and with it the
 * denominator, is as small as it gets): `plain` (no verification) and `stripe` (`--verify stripe`,
 * `--on-invalid reject`, so every 2xx is a verified request). Every request carries the same
 * headers (a valid Stripe-Signature included) and the same 2 KiB JSON body; only the bucket
 * differs. The load: this process, undici with 8 connections kept alive and 8 requests in flight.
 * Rounds alternate plain, stripe, plain, …, after one unmeasured warm-up round each; the figures
 * are the medians over rounds, per request.
 *
 * Budget (issue 15): verification costs at most 5% more CPU per 2 KiB request (total CPU ratio
 * ≤ 1.05). A miss is reported, not an error: the exit code is 0 unless something failed.
 */
import { createHmac } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Pool } from 'undici';
import { parseVerifyScheme } from '../src/policy/verify.js';
import { systemClock } from '../src/shared/clock.js';
import { SqliteStore } from '../src/store/sqlite/sqlite-store.js';
import { cpuMsOf } from './buckets.js';
import { cli, freePort, makeBody, type Managed, startChild, stopChild, waitReady } from './ingest.js';
import {
  abortOnSigint,
  benchFailed,
  fixed,
  intOption,
  median,
  optionsOrUsage,
  parseFlags,
  problemLines,
  progress,
  runIfMain,
  table,
  writeReport,
} from './report.js';

const BODY_BYTES = 2048; // 2 KiB, a typical webhook payload
const CONNECTIONS = 8;
const SECRET = 'whsec_bench_verify_cost_secret_0001';
/** The budget: verified CPU per request over unverified, at most. */
export const MAX_RATIO = 1.05;

const here = dirname(fileURLToPath(import.meta.url)); // dist/bench
const CLI_BIN = resolve(here, '../src/cli/bin.js');

export interface VerifyCostOptions {
  rounds: number;
  requests: number;
  json: boolean;
}

export function parseVerifyCostOptions(argv: string[]): VerifyCostOptions {
  const v = parseFlags(argv, { rounds: { type: 'string' }, requests: { type: 'string' }, json: { type: 'boolean', default: false } });
  return {
    rounds: intOption('--rounds', v.rounds, 7, 1, 100),
    requests: intOption('--requests', v.requests, 4000, 100, 1_000_000),
    json: v.json === true,
  };
}

// ---------------------------------------------------------------------------------------------
// Pure parts

/** The first field of a /proc/<pid>/task/<tid>/schedstat line: nanoseconds on the CPU. */
export function schedstatNs(text: string): number {
  const n = Number(text.trim().split(/\s+/)[0]);
  return Number.isFinite(n) ? n : 0;
}

/** CPU ns per thread id. */
export type ThreadCpu = Map<string, { name: string; ns: number }>;

/** Each thread's CPU between two readings (a thread born in between counts from 0; one that ended is lost, see the stat cross-check). */
export function threadDelta(before: ThreadCpu, after: ThreadCpu): ThreadCpu {
  const out: ThreadCpu = new Map();
  for (const [tid, a] of after) out.set(tid, { name: a.name, ns: a.ns - (before.get(tid)?.ns ?? 0) });
  return out;
}

export interface RoundCpu {
  bucket: 'plain' | 'stripe';
  requests: number;
  /** ns per request on the main thread (tid = pid: the event loop, where the HMAC runs). */
  mainNs: number;
  /** ns per request over every thread alive at the end of the round. */
  totalNs: number;
  /** ns per request from /proc/<pid>/stat utime + stime (10 ms ticks; every thread, ended ones too). */
  statNs: number;
}

export function roundCpu(bucket: RoundCpu['bucket'], requests: number, pid: number, delta: ThreadCpu, statMs: number): RoundCpu {
  let total = 0;
  for (const t of delta.values()) total += t.ns;
  return {
    bucket,
    requests,
    mainNs: (delta.get(String(pid))?.ns ?? 0) / requests,
    totalNs: total / requests,
    statNs: (statMs * 1e6) / requests,
  };
}

export interface CostSummary {
  plain: { mainNs: number; totalNs: number; statNs: number };
  stripe: { mainNs: number; totalNs: number; statNs: number };
  /** stripe over plain, medians of rounds. */
  ratio: { main: number; total: number; stat: number };
  withinBudget: boolean;
}

export function summarizeCost(rounds: readonly RoundCpu[]): CostSummary {
  const med = (b: RoundCpu['bucket'], k: 'mainNs' | 'totalNs' | 'statNs') => median(rounds.filter((r) => r.bucket === b).map((r) => r[k]));
  const side = (b: RoundCpu['bucket']) => ({ mainNs: med(b, 'mainNs'), totalNs: med(b, 'totalNs'), statNs: med(b, 'statNs') });
  const plain = side('plain');
  const stripe = side('stripe');
  const ratio = { main: stripe.mainNs / plain.mainNs, total: stripe.totalNs / plain.totalNs, stat: stripe.statNs / plain.statNs };
  return { plain, stripe, ratio, withinBudget: ratio.total <= MAX_RATIO };
}

/** A Stripe-Signature header as Stripe documents it: t=<secs>,v1=<hex HMAC-SHA256 of "<t>.<body>">. */
export function stripeSignature(body: string, secret: string, tSeconds: number): string {
  return `t=${tSeconds},v1=${createHmac('sha256', secret).update(`${tSeconds}.${body}`).digest('hex')}`;
}

// ---------------------------------------------------------------------------------------------
// I/O

function readThreads(pid: number): ThreadCpu {
  const out: ThreadCpu = new Map();
  for (const tid of readdirSync(`/proc/${pid}/task`)) {
    try {
      const ns = schedstatNs(readFileSync(`/proc/${pid}/task/${tid}/schedstat`, 'utf8'));
      const name = readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
      out.set(tid, { name, ns });
    } catch {
      // The thread ended between the listing and the read.
    }
  }
  return out;
}

const statMs = (pid: number) => cpuMsOf(readFileSync(`/proc/${pid}/stat`, 'utf8'), 100);

/** `n` POSTs with CONNECTIONS in flight; returns how many were not 2xx. */
async function drive(
  pool: Pool,
  path: string,
  n: number,
  headers: Record<string, string>,
  body: string,
  signal: AbortSignal,
): Promise<number> {
  let next = 0;
  let bad = 0;
  const worker = async () => {
    while (next < n && !signal.aborted) {
      next++;
      const res = await pool.request({ path, method: 'POST', headers, body });
      await res.body.dump();
      if (res.statusCode < 200 || res.statusCode > 299) bad++;
    }
  };
  await Promise.all(Array.from({ length: CONNECTIONS }, worker));
  return bad;
}

async function main(): Promise<number> {
  const opts = optionsOrUsage(
    () => parseVerifyCostOptions(process.argv.slice(2)),
    'node dist/bench/verify-cost.js [--rounds <n>] [--requests <n per round>] [--json]',
  );
  if (!opts) return 2;
  const sigint = abortOnSigint();
  const problems: string[] = [];
  const body = makeBody(BODY_BYTES);
  const tmp = await mkdtemp(join(os.tmpdir(), 'hookbucket-bench-verify-'));
  const dbPath = join(tmp, 'bench.db');
  let running: Managed | undefined;
  let pool: Pool | undefined;
  try {
    // The CLI makes the database (and migrates it); the verifying bucket is made through the store.
    await cli(dbPath, tmp, ['bucket', 'create', 'plain']);
    const store = await SqliteStore.open({ path: dbPath, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
    try {
      await store.createBucket({
        name: 'stripe',
        provider: { verify: { scheme: parseVerifyScheme('stripe'), secrets: [SECRET], toleranceMs: 5 * 60_000, onInvalid: 'reject' } },
      });
    } finally {
      await store.close();
    }
    const port = await freePort();
    const args = [CLI_BIN, '--db', dbPath, 'serve', '--no-worker', '--no-admin', '--port', String(port), '--host', '127.0.0.1'];
    running = startChild('serve', [...args, '--log-level', 'warn'], tmp);
    const baseUrl = `http://127.0.0.1:${port}`;
    await waitReady(running, baseUrl);
    const pid = running.child.pid!;
    pool = new Pool(baseUrl, { connections: CONNECTIONS, pipelining: 1 });

    const rounds: RoundCpu[] = [];
    const order: Array<RoundCpu['bucket']> = [];
    for (let i = 0; i < opts.rounds; i++) order.push('plain', 'stripe');
    for (const [index, bucket] of (['plain', 'stripe', ...order] as const).entries()) {
      if (sigint.signal.aborted) throw new Error('interrupted');
      const warmup = index < 2;
      const n = warmup ? Math.max(100, Math.floor(opts.requests / 2)) : opts.requests;
      // Signed afresh each round: the tolerance is 5 minutes, and a long run outlasts it.
      const headers = {
        'content-type': 'application/json',
        'stripe-signature': stripeSignature(body, SECRET, Math.floor(Date.now() / 1000)),
      };
      const threadsBefore = readThreads(pid);
      const statBefore = statMs(pid);
      const bad = await drive(pool, `/b/${bucket}`, n, headers, body, sigint.signal);
      const delta = threadDelta(threadsBefore, readThreads(pid));
      const statAfter = statMs(pid);
      if (bad > 0) problems.push(`${bad} of ${n} requests into ${bucket} were not answered 2xx`);
      const r = roundCpu(bucket, n, pid, delta, statAfter - statBefore);
      progress(
        `${warmup ? 'warm-up ' : ''}${bucket}: ${n} requests, main ${fixed(r.mainNs / 1000, 1)} µs/req, all threads ${fixed(r.totalNs / 1000, 1)} µs/req`,
      );
      if (!warmup) rounds.push(r);
    }
    await pool.close();
    pool = undefined;
    await stopChild(running);
    running = undefined;

    const s = summarizeCost(rounds);
    const row = (name: string, k: 'mainNs' | 'totalNs' | 'statNs', r: keyof CostSummary['ratio']) => [
      name,
      fixed(s.plain[k] / 1000, 1),
      fixed(s.stripe[k] / 1000, 1),
      fixed(s.ratio[r], 3),
    ];
    const lines = [
      `verification CPU cost: ${opts.rounds} rounds of ${opts.requests} requests per bucket, 2 KiB JSON bodies, ${CONNECTIONS} connections`,
      `(medians over rounds; µs of serve CPU per request; ${os.cpus().length} CPUs, load ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')})`,
      '',
      ...table(
        ['CPU per request', 'plain µs', 'stripe µs', 'ratio'],
        [
          row('main thread (schedstat)', 'mainNs', 'main'),
          row('all threads (schedstat)', 'totalNs', 'total'),
          row('process (stat, 10 ms ticks)', 'statNs', 'stat'),
        ],
        1,
      ),
      '',
      `budget: all-threads ratio ≤ ${MAX_RATIO}: ${s.withinBudget ? 'met' : 'MISSED'} (${fixed(s.ratio.total, 3)})`,
      ...problemLines(problems),
    ];
    return writeReport(opts.json, `${lines.join('\n')}\n`, { options: opts, rounds, summary: s, problems }, problems);
  } catch (e) {
    return benchFailed(e, problems);
  } finally {
    sigint.dispose();
    await pool?.close().catch(() => undefined);
    if (running) await stopChild(running).catch(() => undefined);
    await rm(tmp, { recursive: true, force: true });
  }
}

await runIfMain(import.meta.url, main, 5000);

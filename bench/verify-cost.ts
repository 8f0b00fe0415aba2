/**
 * The CPU cost of sender verification at ingest: serve's CPU per 2 KiB request into a bucket that
 * verifies Stripe signatures, over its CPU per request into the same bucket shape without
 * verification, measured in the same serve process in the same run.
 *
 *   npm run bench:verify                         # 100 rounds of 2000 requests per bucket (about 3 min)
 *   npm run bench:verify -- --rounds 3 --requests 500    # a quick smoke run
 *   npm run bench:verify -- --destination https://consumer.example/hook   # each request also writes a delivery row
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
 * SQLite file, three buckets, by default without a destination (so the store's share, and with
 * it the denominator, is as small as it gets; `--destination` gives each one): `plain` (no
 * verification), `stripe` (`--verify stripe`, `--on-invalid reject`, so every 2xx is a verified
 * request) and `control`, a twin of `plain`.
 * Every request carries the same headers (a valid Stripe-Signature included) and the same 2 KiB
 * JSON body; only the bucket differs. The load: this process, undici with 8 connections kept alive
 * and 8 requests in flight.
 *
 * How the ratio is read. A round runs each bucket once, back to back, in one of the six orders
 * in turn (roundOrder); one unmeasured warm-up round comes first. A bucket's cost moves a lot from
 * one round to the next (WAL checkpoints, garbage collection, the writer's batch sizes), and it
 * drifts over a run, so each round gives its own ratio, stripe / plain, from two measurements a
 * second or two apart, and the figure is the median of those paired ratios, with an interval of
 * at least 95% for that median from order statistics (no assumption about the distribution). `control` / plain
 * is read the same way: an A/A check of the harness, whose interval shows the noise the stripe
 * figure carries. The budget counts as met when the whole interval is at or under it, missed when
 * the whole interval is over it, and not settled otherwise. Per-round ratios spread by about ±10%
 * on this machine, so 30 rounds give an interval about ±5% wide and 200 rounds about ±2%: hence
 * the default of 100.
 *
 * Budget (issue 15): verification costs at most 5% more CPU per 2 KiB request (all-threads ratio
 * ≤ 1.05). A miss is reported, not an error: the exit code is 0 unless something failed.
 */
import { createHmac } from 'node:crypto';
import { readdirSync, readFileSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import { setTimeout as sleep } from 'node:timers/promises';
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
/** Sorts after the measured buckets' names; see its one request in main(). */
const LAST_BUCKET = 'zz-last';
/** Between a bucket's last answer and the CPU reading. */
const SETTLE_MS = 100;
const CONNECTIONS = 8;
const SECRET = 'whsec_bench_verify_cost_secret_0001';
/** The budget: verified CPU per request over unverified, at most. */
export const MAX_RATIO = 1.05;

const here = dirname(fileURLToPath(import.meta.url)); // dist/bench
const CLI_BIN = resolve(here, '../src/cli/bin.js');

export interface VerifyCostOptions {
  rounds: number;
  requests: number;
  /** Every bucket's destination (never contacted: serve runs with --no-worker), so each request also writes its delivery row; null: none. */
  destination: string | null;
  json: boolean;
}

export function parseVerifyCostOptions(argv: string[]): VerifyCostOptions {
  const v = parseFlags(argv, {
    rounds: { type: 'string' },
    requests: { type: 'string' },
    destination: { type: 'string' },
    json: { type: 'boolean', default: false },
  });
  let destination: string | null = null;
  if (v.destination !== undefined) {
    if (!URL.canParse(v.destination) || !/^https?:$/.test(new URL(v.destination).protocol)) {
      throw new Error(`--destination must be an http(s) URL, got ${JSON.stringify(v.destination)}`);
    }
    destination = v.destination;
  }
  return {
    rounds: intOption('--rounds', v.rounds, 100, 1, 1000),
    requests: intOption('--requests', v.requests, 2000, 100, 1_000_000),
    destination,
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

export const BENCH_BUCKETS = ['plain', 'stripe', 'control'] as const;
export type BenchBucket = (typeof BENCH_BUCKETS)[number];

/**
 * Round `index`'s order: the six orders of the three buckets in turn: over each six rounds, each
 * bucket goes first, second and last equally often, and within a round it follows each other
 * bucket equally often. What a round leaves behind (garbage to collect, a WAL to checkpoint) lands
 * in the next measurement; with one fixed cycle it would always land on the same bucket.
 */
export function roundOrder(index: number): BenchBucket[] {
  return [...ORDERS[index % ORDERS.length]!];
}
const ORDERS: readonly (readonly BenchBucket[])[] = [
  ['plain', 'stripe', 'control'],
  ['control', 'stripe', 'plain'],
  ['stripe', 'control', 'plain'],
  ['plain', 'control', 'stripe'],
  ['control', 'plain', 'stripe'],
  ['stripe', 'plain', 'control'],
];

export interface RoundCpu {
  bucket: BenchBucket;
  /** The round it belongs to: the paired ratios compare buckets within one round. */
  round: number;
  requests: number;
  /** ns per request on the main thread (tid = pid: the event loop, where the HMAC runs). */
  mainNs: number;
  /** ns per request over every thread alive at the end of the round. */
  totalNs: number;
  /** ns per request from /proc/<pid>/stat utime + stime (10 ms ticks; every thread, ended ones too). */
  statNs: number;
}

export function roundCpu(bucket: BenchBucket, round: number, requests: number, pid: number, delta: ThreadCpu, statMs: number): RoundCpu {
  let total = 0;
  for (const t of delta.values()) total += t.ns;
  return {
    bucket,
    round,
    requests,
    mainNs: (delta.get(String(pid))?.ns ?? 0) / requests,
    totalNs: total / requests,
    statNs: (statMs * 1e6) / requests,
  };
}

/** A median with a distribution-free interval: `[low, high]` holds the true median with probability `coverage`. */
export interface MedianInterval {
  median: number;
  low: number;
  high: number;
  /** The interval's exact coverage (at least the confidence asked for, when there are enough values). */
  coverage: number;
  n: number;
}

/**
 * The median of `values` and the order-statistic interval for it: with X ~ Binomial(n, 1/2), the
 * k-th smallest and k-th largest values bound the median with probability 1 − 2·P(X ≤ k − 1); k is
 * the largest that still gives `confidence`. Too few values for that give the whole range, with
 * its (lower) coverage said.
 */
export function medianInterval(values: readonly number[], confidence = 0.95): MedianInterval {
  const x = [...values].sort((a, b) => a - b);
  const n = x.length;
  if (n === 0) return { median: NaN, low: NaN, high: NaN, coverage: 0, n };
  // The interval [x_k, x_(n−k+1)] (1-based) misses the median with probability 2·P(X ≤ k − 1).
  let pmf = 0.5 ** n; // P(X = k − 1)
  let cdf = pmf; // P(X ≤ k − 1)
  let k = 1;
  while (k + 1 <= n - k) {
    const nextPmf = (pmf * (n - k + 1)) / k; // P(X = k)
    if (1 - 2 * (cdf + nextPmf) < confidence) break;
    pmf = nextPmf;
    cdf += nextPmf;
    k++;
  }
  return { median: median(x), low: x[k - 1]!, high: x[n - k]!, coverage: 1 - 2 * cdf, n };
}

export interface CostSummary {
  /** Medians over rounds, ns per request, per bucket. */
  plain: { mainNs: number; totalNs: number; statNs: number };
  stripe: { mainNs: number; totalNs: number; statNs: number };
  control: { mainNs: number; totalNs: number; statNs: number };
  /** stripe over plain, medians of rounds (shown beside the paired figure). */
  ratio: { main: number; total: number; stat: number };
  /** The ratios read round by round (all threads): the figure the budget is judged on. */
  paired: { stripe: MedianInterval; control: MedianInterval };
  /** met: the whole interval is within the budget; missed: the whole interval is over it. */
  budget: 'met' | 'missed' | 'not settled';
}

export function summarizeCost(rounds: readonly RoundCpu[]): CostSummary {
  const med = (b: BenchBucket, k: 'mainNs' | 'totalNs' | 'statNs') => median(rounds.filter((r) => r.bucket === b).map((r) => r[k]));
  const side = (b: BenchBucket) => ({ mainNs: med(b, 'mainNs'), totalNs: med(b, 'totalNs'), statNs: med(b, 'statNs') });
  const plain = side('plain');
  const stripe = side('stripe');
  const control = side('control');
  const ratio = { main: stripe.mainNs / plain.mainNs, total: stripe.totalNs / plain.totalNs, stat: stripe.statNs / plain.statNs };
  const byRound = new Map<number, Partial<Record<BenchBucket, RoundCpu>>>();
  for (const r of rounds) byRound.set(r.round, { ...byRound.get(r.round), [r.bucket]: r });
  const pairs = (b: BenchBucket) => {
    const out: number[] = [];
    for (const round of byRound.values()) {
      const base = round.plain;
      const other = round[b];
      if (base !== undefined && other !== undefined && base.totalNs > 0) out.push(other.totalNs / base.totalNs);
    }
    return medianInterval(out);
  };
  const paired = { stripe: pairs('stripe'), control: pairs('control') };
  const budget = paired.stripe.high <= MAX_RATIO ? 'met' : paired.stripe.low > MAX_RATIO ? 'missed' : 'not settled';
  return { plain, stripe, control, ratio, paired, budget };
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
    'node dist/bench/verify-cost.js [--rounds <n>] [--requests <n per round>] [--destination <url>] [--json]',
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
    const to = opts.destination === null ? [] : ['--destination', opts.destination];
    await cli(dbPath, tmp, ['bucket', 'create', 'plain', ...to]);
    await cli(dbPath, tmp, ['bucket', 'create', 'control', ...to]);
    await cli(dbPath, tmp, ['bucket', 'create', LAST_BUCKET, ...to]);
    const store = await SqliteStore.open({ path: dbPath, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
    try {
      await store.createBucket({
        name: 'stripe',
        destination: opts.destination,
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
    // One request into the bucket named last, so that none of the measured buckets appends at the
    // right edge of the (bucket, id) index, which is cheaper than inserting inside it.
    if ((await drive(pool, `/b/${LAST_BUCKET}`, 1, { 'content-type': 'application/json' }, body, sigint.signal)) > 0) {
      throw new Error(`the request into ${LAST_BUCKET} was not answered 2xx`);
    }

    const rounds: RoundCpu[] = [];
    // Round -1 is the warm-up: measured like the others, then left out.
    for (let round = -1; round < opts.rounds; round++) {
      const warmup = round < 0;
      const n = warmup ? Math.max(100, Math.floor(opts.requests / 2)) : opts.requests;
      const line: string[] = [];
      for (const bucket of roundOrder(Math.max(0, round))) {
        if (sigint.signal.aborted) throw new Error('interrupted');
        // Signed afresh each time: the tolerance is 5 minutes, and a long run outlasts it.
        const headers = {
          'content-type': 'application/json',
          'stripe-signature': stripeSignature(body, SECRET, Math.floor(Date.now() / 1000)),
        };
        const threadsBefore = readThreads(pid);
        const statBefore = statMs(pid);
        const bad = await drive(pool, `/b/${bucket}`, n, headers, body, sigint.signal);
        // Every request was answered after its commit; the pause lets what trails it (the writer's
        // last batch, the checkpoint it may start) land in this measurement, not the next one's.
        await sleep(SETTLE_MS);
        const delta = threadDelta(threadsBefore, readThreads(pid));
        const statAfter = statMs(pid);
        if (bad > 0) problems.push(`${bad} of ${n} requests into ${bucket} were not answered 2xx`);
        const r = roundCpu(bucket, round, n, pid, delta, statAfter - statBefore);
        line.push(`${bucket} ${fixed(r.totalNs / 1000, 1)} (main ${fixed(r.mainNs / 1000, 1)})`);
        if (!warmup) rounds.push(r);
      }
      progress(`${warmup ? 'warm-up' : `round ${round + 1}/${opts.rounds}`}: µs/request, all threads: ${line.join(', ')}`);
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
      fixed(s.control[k] / 1000, 1),
      fixed(s.ratio[r], 3),
      fixed(s.control[k] / s.plain[k], 3),
    ];
    const interval = (m: MedianInterval) =>
      `${fixed(m.median, 3)} (${Math.round(m.coverage * 100)}% interval ${fixed(m.low, 3)} to ${fixed(m.high, 3)})`;
    const lines = [
      `verification CPU cost: ${opts.rounds} rounds of ${opts.requests} requests per bucket, 2 KiB JSON bodies, ${CONNECTIONS} connections, ${opts.destination === null ? 'no destination' : `destination ${opts.destination} (not contacted)`}`,
      `(µs of serve CPU per request; ${os.cpus().length} CPUs, load ${os
        .loadavg()
        .map((l) => l.toFixed(2))
        .join(' ')})`,
      '',
      'Medians over rounds:',
      ...table(
        ['CPU per request', 'plain µs', 'stripe µs', 'control µs', 'stripe/plain', 'control/plain'],
        [
          row('main thread (schedstat)', 'mainNs', 'main'),
          row('all threads (schedstat)', 'totalNs', 'total'),
          row('process (stat, 10 ms ticks)', 'statNs', 'stat'),
        ],
        1,
      ),
      '',
      "Paired within each round (all threads), median of the rounds' ratios:",
      `  stripe / plain:  ${interval(s.paired.stripe)}`,
      `  control / plain: ${interval(s.paired.control)}   (A/A: the harness's own noise)`,
      '',
      `budget: stripe / plain ≤ ${MAX_RATIO} over the whole interval: ${s.budget === 'met' ? 'met' : s.budget === 'missed' ? 'MISSED' : 'not settled (the interval straddles it)'}`,
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

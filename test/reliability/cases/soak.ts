/**
 * Reliability case 27 (issue 5, step 4): the soak. For five minutes (`--soak-seconds <n>` or
 * RELIABILITY_SOAK_SECONDS=<n> to shorten it locally), paced keep-alive traffic of mixed sizes goes
 * to three buckets (one store-only, two forwarding to a loopback consumer that answers 500 to one
 * request in ten), while the worker in `serve` drains, a replay of the last minute of one bucket
 * runs, and exports of the store-only bucket stream one after another. Every second the server's
 * RSS and the WAL's size are sampled. At the end: every delivery settled, every acknowledged
 * request of a forwarding bucket accepted by the consumer at least once, the WAL truncated once
 * quiet, RSS and WAL within their bounds, and the suite's invariant over every acknowledgement.
 */
import { rmSync, statSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import { AnswerReader, sleep } from '../lib/load.js';
import { mib, secs } from '../lib/result.js';
import { randomBytesFrom } from '../lib/seed.js';
import { runHookbucket, type CliRun } from '../lib/serve-process.js';
import type { CaseContext, ReliabilityCase } from '../lib/types.js';
import { Bench, memoryOf, type Wire } from './hostile.js';

const KiB = 1024;
const MiB = 1024 * 1024;

/** `--soak-seconds <n>` / `--soak-seconds=<n>`, then RELIABILITY_SOAK_SECONDS, else 300 (what CI runs). */
export function soakSeconds(argv: readonly string[] = process.argv, env: NodeJS.ProcessEnv = process.env): number {
  const i = argv.indexOf('--soak-seconds');
  const text =
    (i >= 0 ? argv[i + 1] : argv.find((a) => a.startsWith('--soak-seconds='))?.slice('--soak-seconds='.length)) ??
    env.RELIABILITY_SOAK_SECONDS;
  if (text === undefined || text === '') return 300;
  const n = Number(text);
  if (!Number.isFinite(n) || n < 10 || n > 3600) throw new Error(`--soak-seconds must be from 10 to 3600, got ${JSON.stringify(text)}`);
  return n;
}

/** Requests per second across all connections, and the connections that carry them. */
const RATE = 100;
const CONNECTIONS = 16;
/** Share of the consumer's answers that are 500. */
const CONSUMER_500 = 0.1;

/**
 * Bounds, generous enough to hold on a slow CI machine and tight enough to catch a leak or an
 * unbounded WAL: the WAL has journal_size_limit 64 MiB and is truncated after 1 s without writes,
 * but a long export holds a snapshot that checkpoints cannot pass, so it may grow while one runs.
 */
const RSS_PEAK_BOUND = 512 * MiB;
/** RSS over the last fifth of the run may exceed the early steady state (10–30 %) by at most this. */
const RSS_CLIMB_BOUND = 64 * MiB;
const WAL_PEAK_BOUND = 256 * MiB;
/** Once ingest, exports and deliveries are done: the WAL is truncated (checkpoint TRUNCATE after 1 s quiet). */
const WAL_QUIET_BOUND = 4 * MiB;

interface Sample {
  t: number;
  rss: number;
  wal: number;
  db: number;
}

function sizeOf(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

/** Body sizes: mostly small, as webhooks are, with a tail up to 2 MiB (mean about 20 KiB). */
function pickSize(r: () => number): number {
  const u = r();
  if (u < 0.05) return 0;
  if (u < 0.65) return Math.floor(r() * 4 * KiB);
  if (u < 0.95) return 4 * KiB + Math.floor(r() * 60 * KiB);
  if (u < 0.998) return 64 * KiB + Math.floor(r() * 448 * KiB);
  return MiB + Math.floor(r() * MiB);
}

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

const max = (xs: number[]) => xs.reduce((m, x) => Math.max(m, x), 0);

const case27: ReliabilityCase = {
  id: 27,
  title: 'soak: mixed ingest while the worker drains, a replay runs and exports stream; RSS and WAL bounded',
  timeoutMs: (soakSeconds() + 300) * 1000,
  run: async (ctx: CaseContext) => {
    const seconds = soakSeconds();
    const schedule = ['--timeout', '5s', '--base', '1s', '--multiplier', '2', '--cap', '5s', '--max-attempts', '12', '--jitter', 'full'];
    const b = await Bench.start(ctx, {
      consumer: true,
      serve: ['--lease', '30s'],
      buckets: [
        { name: 'plain' },
        { name: 'shop', flags: ['--destination', '{consumer}/shop', ...schedule] },
        { name: 'gh', flags: ['--destination', '{consumer}/gh', '--rate', '60/s', '--burst', '20', ...schedule] },
      ],
    });
    const dir = ctx.tmpDir();
    const wal = `${b.db}-wal`;
    b.result.note(
      `${seconds} s, ${RATE} requests/s offered on ${CONNECTIONS} keep-alive connections; the consumer answers 500 to ${CONSUMER_500 * 100}% of deliveries`,
    );

    // The consumer keeps no bodies (a soak would hold them all): it counts what it accepted.
    const c = b.consumer!;
    const accepted = new Map<string, number>();
    const acceptedIds = new Set<string>();
    let answered500 = 0;
    let received = 0;
    const random = ctx.random;
    c.fallback = (req: IncomingMessage, res: ServerResponse) => {
      c.received.length = 0;
      received++;
      const id = String(req.headers['x-hookbucket-request-id']);
      const key = `${id}/${String(req.headers['x-hookbucket-delivery-generation'])}`;
      if (random() < CONSUMER_500) {
        answered500++;
        return void res.writeHead(500).end('try again');
      }
      accepted.set(key, (accepted.get(key) ?? 0) + 1);
      acceptedIds.add(id);
      res.end('ok');
    };

    let duplicates = 0;
    return b
      .run(async () => {
        const t0 = performance.now();
        const elapsed = () => (performance.now() - t0) / 1000;
        const samples: Sample[] = [];
        const sampler = setInterval(() => {
          try {
            samples.push({ t: elapsed(), rss: memoryOf(b.pid).rss, wal: sizeOf(wal), db: sizeOf(b.db) });
          } catch {
            // serve is gone; the case reports that elsewhere
          }
        }, 1000);

        // ── load: paced keep-alive connections ──
        const pool = randomBytesFrom(random, 4 * MiB);
        const buckets = ['plain', 'plain', 'plain', 'shop', 'shop', 'shop', 'shop', 'gh', 'gh', 'gh'];
        let stopping = false;
        let bytes = 0;
        let resets = 0;
        const refused: Record<string, number> = {};
        const latencies: number[] = [];
        const build = (): Wire => {
          const size = pickSize(random);
          const off = Math.floor(random() * (pool.length - size));
          const body = Buffer.from(pool.subarray(off, off + size));
          const bucket = pick(random, buckets);
          const headers = ['Content-Type', pick(random, ['application/json', 'application/octet-stream', 'text/plain; charset=utf-8'])];
          headers.push(pick(random, ['X-Dup', 'x-dup']), 'one', 'X-DUP', 'two');
          if (random() < 0.5)
            headers.push('Stripe-Signature', `t=${Math.floor(random() * 1e9)},v1=${Math.floor(random() * 1e12).toString(16)}`);
          return b.wire({
            bucket,
            method: pick(random, ['POST', 'POST', 'POST', 'PUT', 'PATCH']),
            path: pick(random, ['', '/events', '/a/%2e%2e/b', '/x%2Fy']),
            query: pick(random, [null, '', 'a=1&a=2', 'q=%20x+y']),
            headers,
            body,
            framing: size > 0 && random() < 0.1 ? 'chunked' : 'length',
            chunkBytes: 16 * KiB,
          });
        };
        const connection = async (k: number) => {
          const u = new URL(b.url);
          const interval = (1000 * CONNECTIONS) / RATE;
          let next = performance.now() + (k * interval) / CONNECTIONS;
          let sock: Socket | undefined;
          let reader: AnswerReader | undefined;
          while (!stopping && !ctx.signal.aborted) {
            if (!sock || sock.destroyed) {
              sock = await new Promise<Socket | undefined>((resolve) => {
                const s = connect(Number(u.port), u.hostname);
                s.once('connect', () => resolve(s));
                s.once('error', () => resolve(undefined));
              });
              if (!sock) {
                await sleep(100);
                continue;
              }
              sock.on('error', () => undefined);
              reader = new AnswerReader(sock);
            }
            const w = build();
            b.result.sent++;
            bytes += w.meta.size;
            const sentAt = performance.now();
            sock.write(w.head);
            sock.write(w.body);
            const ans = await reader!.next(30_000);
            if (ans === 'timeout' || ans.kind === 'closed') {
              resets++;
              sock.destroy();
              sock = undefined;
              continue;
            }
            latencies.push(performance.now() - sentAt);
            const { status, headers } = ans.answer;
            if (status >= 200 && status < 300) b.ack(w, status, headers.get('x-hookbucket-request-id'));
            else refused[status] = (refused[status] ?? 0) + 1;
            if (/close/i.test(headers.get('connection') ?? '')) sock.destroy();
            next += interval;
            const wait = next - performance.now();
            if (wait > 0) await sleep(wait);
            else next = performance.now(); // behind: do not burst to catch up
          }
          sock?.destroy();
        };
        const load = Promise.all(Array.from({ length: CONNECTIONS }, (_, k) => connection(k)));

        // ── exports of the store-only bucket, one after another, from 20 % of the run to its end ──
        const exportsDone: CliRun[] = [];
        const exportLoop = (async () => {
          await sleep(seconds * 200);
          for (let run = 0; !stopping && !ctx.signal.aborted && run < 1000; run++) {
            const out = join(dir, `export-${run}.ndjson`);
            const ackedBefore = b.acks.all().filter((a) => a.bucket === 'plain').length;
            const r = await runHookbucket(['--db', b.db, 'requests', 'export', 'plain', '--out', out, '--json'], { timeoutMs: 600_000 });
            rmSync(out, { force: true });
            exportsDone.push(r);
            if (r.code !== 0) {
              b.fail(`export ${run} exited ${r.code ?? r.signal}: ${r.stderr.slice(0, 300)}`);
              break;
            }
            const n = (JSON.parse(r.stdout) as { requests: number }).requests;
            b.check(n >= ackedBefore, `export ${run} wrote ${n} requests, ${ackedBefore} were acked before it started`);
            await sleep(200);
          }
        })();

        // ── a replay of the last minute of `shop`, at 40 % of the run ──
        let replay: { id: string; total: number } | undefined;
        const replayAt = (async () => {
          await sleep(seconds * 400);
          if (stopping || ctx.signal.aborted) return;
          const r = await runHookbucket(['--db', b.db, 'replay', 'shop', '--since', '1m', '--yes', '--json'], { timeoutMs: 120_000 });
          if (r.code !== 0) return b.fail(`replay exited ${r.code ?? r.signal}: ${r.stderr.slice(0, 300)}`);
          replay = JSON.parse(r.stdout) as { id: string; total: number };
          ctx.log(`replay ${replay.id}: ${replay.total} requests of shop, at ${secs(elapsed() * 1000)} (in ${secs(r.ms)})`);
        })();

        // ── the run itself, with a progress line every 30 s ──
        while (elapsed() < seconds && !ctx.signal.aborted) {
          await sleep(Math.min(30_000, (seconds - elapsed()) * 1000));
          const s = samples.at(-1);
          if (s)
            ctx.log(
              `${elapsed().toFixed(0)} s: ${b.result.acked} acked, serve RSS ${mib(s.rss)}, WAL ${mib(s.wal)}, db ${mib(s.db)}, exports ${exportsDone.length}, consumer ${received} received`,
            );
        }
        stopping = true;
        await load;
        const loadSeconds = elapsed();
        await Promise.all([exportLoop, replayAt]);

        // ── drain: every delivery settled, every acknowledged request of a forwarding bucket accepted ──
        const drainStart = performance.now();
        const settled = await b.settled(180_000);
        const drainMs = performance.now() - drainStart;
        b.check(settled, 'deliveries did not settle within 180 s of the load stopping');
        const forwarded = b.acks.all().filter((a) => a.bucket !== 'plain');
        const missing = forwarded.filter((a) => !acceptedIds.has(a.id));
        b.check(
          missing.length === 0,
          `${missing.length} acknowledged request(s) never accepted by the consumer: ${missing
            .slice(0, 5)
            .map((a) => a.id)
            .join(', ')}`,
        );
        const states = b.query<{ state: string; n: number }>('select state, count(*) as n from deliveries group by state order by state');
        const notDelivered = states.filter((s) => s.state !== 'delivered' && s.state !== 'superseded');
        b.check(notDelivered.length === 0, `deliveries not delivered: ${notDelivered.map((s) => `${s.state} ${s.n}`).join(', ')}`);
        if (replay) {
          const list = await runHookbucket(['--db', b.db, 'replays', 'list', '--bucket', 'shop', '--json']);
          const progress = (
            JSON.parse(list.stdout) as { replays: Array<{ id: string; progress: { total: number; delivered: number } }> }
          ).replays.find((x) => x.id === replay!.id)?.progress;
          b.check(
            progress !== undefined && progress.delivered === progress.total,
            `replay ${replay.id}: ${progress?.delivered} of ${progress?.total} delivered`,
          );
          b.result.figure('replay of the last minute of shop', `${progress?.delivered}/${progress?.total} delivered (generation 2)`);
        } else {
          b.fail('the replay did not run');
        }

        // ── quiet: the WAL is truncated once nothing writes ──
        const quietStart = performance.now();
        let walQuiet = sizeOf(wal);
        while (walQuiet > WAL_QUIET_BOUND && performance.now() - quietStart < 30_000) {
          await sleep(250);
          walQuiet = sizeOf(wal);
        }
        clearInterval(sampler);

        // ── figures and bounds ──
        const rss = samples.map((s) => s.rss);
        const early = samples.filter((s) => s.t >= loadSeconds * 0.1 && s.t <= loadSeconds * 0.3).map((s) => s.rss);
        const late = samples.filter((s) => s.t >= loadSeconds * 0.8 && s.t <= loadSeconds).map((s) => s.rss);
        const peakRss = max(rss);
        const climb = max(late) - max(early);
        const peakWal = max(samples.map((s) => s.wal));
        const sorted = [...latencies].sort((x, y) => x - y);
        const p = (q: number) => sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))] ?? NaN;
        duplicates = [...accepted.values()].reduce((n, v) => n + Math.max(0, v - 1), 0);
        const attempts = b.rowsWhere('select count(*) from attempts');
        b.result.figure(
          'load',
          `${b.result.sent} sent, ${b.result.acked} acked in ${secs(loadSeconds * 1000)} (${(b.result.acked / loadSeconds).toFixed(1)}/s), ${mib(bytes)} of bodies; refused ${JSON.stringify(refused)}, connections lost ${resets}`,
        );
        b.result.figure('ack latency', `p50 ${p(0.5).toFixed(1)} ms, p99 ${p(0.99).toFixed(1)} ms, max ${max(latencies).toFixed(0)} ms`);
        b.result.figure(
          'deliveries',
          `${states.map((s) => `${s.state} ${s.n}`).join(', ')}; ${attempts} attempts; consumer received ${received}, answered 500 to ${answered500}; drained ${secs(drainMs)} after the load stopped`,
        );
        b.result.figure(
          'exports of plain (streamed during ingest)',
          `${exportsDone.length} runs, ${exportsDone.map((r) => secs(r.ms)).join(' ')}`,
        );
        b.result.figure('serve peak RSS', mib(peakRss), `≤ ${mib(RSS_PEAK_BOUND)}`);
        b.result.figure(
          'serve RSS climb (max of last 20 % − max of 10–30 %)',
          `${mib(climb)} (${mib(max(early))} → ${mib(max(late))})`,
          `≤ ${mib(RSS_CLIMB_BOUND)}`,
        );
        b.result.figure('WAL peak', mib(peakWal), `≤ ${mib(WAL_PEAK_BOUND)}`);
        b.result.figure(
          'WAL once quiet',
          `${mib(walQuiet)} after ${secs(performance.now() - quietStart)}`,
          `≤ ${mib(WAL_QUIET_BOUND)} within 30 s`,
        );
        b.result.figure('database at the end', mib(sizeOf(b.db)));
        b.check(b.result.sent === b.result.acked, `${b.result.sent - b.result.acked} request(s) got no 2xx`);
        b.check(peakRss <= RSS_PEAK_BOUND, `serve peak RSS ${mib(peakRss)}`);
        b.check(climb <= RSS_CLIMB_BOUND, `serve RSS climbed ${mib(climb)} from the early steady state to the end`);
        b.check(peakWal <= WAL_PEAK_BOUND, `WAL peaked at ${mib(peakWal)}`);
        b.check(walQuiet <= WAL_QUIET_BOUND, `WAL still ${mib(walQuiet)} 30 s after everything stopped`);
        b.check(samples.length >= loadSeconds * 0.9, `only ${samples.length} samples in ${loadSeconds.toFixed(0)} s`);
        ctx.log(
          `samples (t s, RSS MiB, WAL MiB): ${samples
            .filter((_, i) => i % Math.max(1, Math.floor(samples.length / 20)) === 0)
            .map((s) => `${s.t.toFixed(0)}:${(s.rss / MiB).toFixed(0)}/${(s.wal / MiB).toFixed(1)}`)
            .join(' ')}`,
        );
      })
      .then((r) => {
        // Duplicates as the consumer saw them: a (request, generation) it accepted more than once.
        // (Bench.finish() counted from the consumer's list, which the soak keeps empty.)
        r.duplicates = duplicates;
        return r;
      });
  },
};

export const cases: ReliabilityCase[] = [case27];

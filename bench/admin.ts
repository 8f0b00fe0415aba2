/**
 * Admin benchmark (issue 14 point 7): what the admin listener answers how fast, and what admin use
 * costs ingest, all against the real CLI binary (`serve`) on loopback.
 *
 *   npm run bench:admin                               # 1,000,000 requests, 10,000 buckets; about 10 minutes
 *   npm run bench:admin -- --requests 200000          # smaller listing database, quicker
 *   npm run bench:admin -- --only overview,ingest     # some parts: list, overview, ingest
 *   npm run bench:admin -- --keep /tmp/admin-bench    # keep (and on the next run reuse) the databases there
 *   npm run bench:admin -- --json > out.json          # report on stderr, JSON on stdout
 *
 * 1. list: the first page (50) of a bucket's requests through GET /api/buckets/{name}/requests with
 *    the state and time filters (--search left out), on a SQLite database with `--requests` stored
 *    in the bucket. The database is built directly (bench/list.ts build(): rows in ingest's shape,
 *    batched inserts of 50,000 rows per transaction with synchronous=OFF for the build only, 30
 *    days of requests with a realistic mix of delivery states). `serve --no-worker` then answers
 *    over its admin listener (reads on the off-thread reader with its query budget, as in
 *    production); each query is asked once to warm up and then `--runs` times, one after another
 *    over one keep-alive connection; the time is from sending the request to the last body byte.
 * 2. overview: a database with `--buckets` buckets (bench/buckets.ts makeDb: copies of two
 *    template rows in one transaction), 500 requests ingested over HTTP into two of them, then
 *    `serve`'s inspector overview `/` (first page), a later page (`/?after=…`), and
 *    `/api/buckets` (the first page, as the inspector asks, and every bucket, as `bucket list
 *    --json` through --api does). The first `/` after start is reported apart (the sparkline's
 *    cache is cold then); the others are timed `--runs` times after one warm-up.
 * 3. ingest under admin load: one `serve` (worker on, admin on) on the overview database;
 *    autocannon at 32 connections posts 2 KiB JSON to a bucket for `--duration` seconds, in
 *    `--rounds` pairs of alternating rounds: without admin traffic, and with an undici client
 *    fetching the overview HTML once a second plus one SSE reader on /api/events?bucket=load (the
 *    bucket under load, as its inspector page follows it, so it receives an event per stored
 *    request; `--events all` follows every bucket instead). Each round follows a 2 s unmeasured
 *    warm-up of the same kind. Ratio = median req/s with admin load / median req/s without.
 *
 * Targets (issue 14): list first page < 50 ms (median and p95); overview and /api/buckets page
 * < 1 s; ingest ratio >= 0.95. A miss is reported, not an error: the exit code is 1 only when the
 * run broke (a non-2xx, a connection error, an SSE reader that got no event, a child that failed).
 * Loopback only; every loop is bounded in count and every wait in time. The machine's load average
 * before and after is in the report: other processes on the same cores change every figure.
 */
import { existsSync } from 'node:fs';
import { mkdir, mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { Pool } from 'undici';
import { makeDb } from './buckets.js';
import { percentile } from './drain.js';
import { freePort, load, machineInfo, makeBody, startChild, stopChild, waitReady, type Managed } from './ingest.js';
import { build, LIST_BUCKET } from './list.js';
import {
  abortOnSigint,
  benchFailed,
  fixed,
  intOption,
  type LoadAverages,
  machineLines,
  median,
  optionsOrUsage,
  parseFlags,
  problemLines,
  progress,
  ratio,
  runIfMain,
  table,
  writeReport,
} from './report.js';

export const TARGETS = {
  /** First page of requests through the API, ms (median and p95). */
  maxListMs: 50,
  /** Overview HTML and the /api/buckets page with 10,000 buckets, ms. */
  maxOverviewMs: 1_000,
  /** Ingest req/s with admin load over without. */
  minIngestRatio: 0.95,
} as const;

const PARTS = ['list', 'overview', 'ingest'] as const;
type Part = (typeof PARTS)[number];

const BODY_BYTES = 2048;
const CONNECTIONS = 32;
const WARMUP_S = 2;
const OVERVIEW_EVERY_MS = 1_000;
const SEED_REQUESTS = 500;
const REQUEST_TIMEOUT_MS = 30_000;
/** serve on a 1.8 GB database whose pages are not cached yet, on a busy disk, takes a while to answer /healthz. */
const READY_TIMEOUT_MS = 180_000; // 3 min

export interface AdminBenchOptions {
  requests: number;
  buckets: number;
  runs: number;
  rounds: number;
  durationS: number;
  only: Part[];
  /** The SSE reader's buckets: one name, or `all` (no bucket parameter: every bucket). */
  events: string;
  keep: string | undefined;
  json: boolean;
}

export function parseOptions(argv: string[]): AdminBenchOptions {
  const v = parseFlags(argv, {
    requests: { type: 'string' },
    buckets: { type: 'string' },
    runs: { type: 'string' },
    rounds: { type: 'string' },
    duration: { type: 'string' },
    only: { type: 'string' },
    events: { type: 'string' },
    keep: { type: 'string' },
    json: { type: 'boolean' },
  });
  const only = (v.only ?? PARTS.join(',')).split(',').map((s) => s.trim());
  for (const p of only) if (!(PARTS as readonly string[]).includes(p)) throw new Error(`--only takes ${PARTS.join(', ')}; got ${p}`);
  return {
    requests: intOption('--requests', v.requests, 1_000_000, 1_000, 10_000_000),
    buckets: intOption('--buckets', v.buckets, 10_000, 10, 100_000),
    runs: intOption('--runs', v.runs, 30, 3, 1_000),
    rounds: intOption('--rounds', v.rounds, 3, 1, 20),
    durationS: intOption('--duration', v.duration, 10, 1, 300),
    only: only as Part[],
    events: v.events ?? 'load',
    keep: v.keep,
    json: v.json === true,
  };
}

/** Median and p95 of a set of times, ms. */
export interface Timing {
  name: string;
  runs: number;
  medianMs: number;
  p95Ms: number;
  maxMs: number;
  /** What the answer held (rows, buckets, bytes), as a check that it was a real page. */
  detail: string;
}

export function timing(name: string, times: readonly number[], detail: string): Timing {
  const s = [...times].sort((a, b) => a - b);
  return { name, runs: s.length, medianMs: median(s), p95Ms: percentile(s, 95), maxMs: s[s.length - 1] ?? NaN, detail };
}

export interface IngestRound {
  round: number;
  admin: boolean;
  reqPerS: number;
  p99Ms: number;
  /** Overview pages fetched in the round, and their slowest time. */
  overviews: number;
  overviewMaxMs: number;
  /** SSE events the reader got in the round. */
  events: number;
}

export interface Verdict {
  target: string;
  value: number;
  pass: boolean;
}

export function verdicts(list: readonly Timing[], overview: readonly Timing[], ingestRatio: number | undefined): Verdict[] {
  const out: Verdict[] = [];
  for (const t of list) {
    if (t.name.startsWith('baseline')) continue;
    out.push({ target: `list ${t.name}: median < ${TARGETS.maxListMs} ms`, value: t.medianMs, pass: t.medianMs < TARGETS.maxListMs });
    out.push({ target: `list ${t.name}: p95 < ${TARGETS.maxListMs} ms`, value: t.p95Ms, pass: t.p95Ms < TARGETS.maxListMs });
  }
  for (const t of overview) {
    if (t.name.includes('every bucket')) continue; // for reference: not a page
    const worst = Math.max(t.medianMs, t.p95Ms);
    out.push({ target: `${t.name}: < ${TARGETS.maxOverviewMs} ms`, value: worst, pass: worst < TARGETS.maxOverviewMs });
  }
  if (ingestRatio !== undefined)
    out.push({ target: `ingest ratio >= ${TARGETS.minIngestRatio}`, value: ingestRatio, pass: ingestRatio >= TARGETS.minIngestRatio });
  return out;
}

// ---------------------------------------------------------------------------------------------
// I/O

const cliBin = () => new URL('../src/cli/bin.js', import.meta.url).pathname;

interface Serve {
  m: Managed;
  ingest: string;
  admin: string;
}

async function startServe(db: string, cwd: string, name: string, extra: string[]): Promise<Serve> {
  const port = await freePort();
  const adminPort = await freePort();
  const m = startChild(
    name,
    [
      cliBin(),
      '--db',
      db,
      'serve',
      '--port',
      String(port),
      '--host',
      '127.0.0.1',
      '--admin-port',
      String(adminPort),
      '--log-level',
      'warn',
      ...extra,
    ],
    cwd,
  );
  const ingest = `http://127.0.0.1:${port}`;
  try {
    await waitReady(m, ingest, READY_TIMEOUT_MS);
  } catch (e) {
    // Not ready in time: it must not outlive the bench.
    await stopChild(m).catch(() => undefined);
    throw e;
  }
  return { m, ingest, admin: `http://127.0.0.1:${adminPort}` };
}

/** One GET, timed from sending to the last body byte; throws on a non-2xx. */
async function timedGet(pool: Pool, path: string): Promise<{ ms: number; body: Buffer }> {
  const t0 = performance.now();
  const res = await pool.request({ path, method: 'GET', headersTimeout: REQUEST_TIMEOUT_MS, bodyTimeout: REQUEST_TIMEOUT_MS });
  const body = Buffer.from(await res.body.arrayBuffer());
  const ms = performance.now() - t0;
  if (res.statusCode !== 200) throw new Error(`GET ${path}: ${res.statusCode} ${body.toString('utf8').slice(0, 300)}`);
  return { ms, body };
}

async function timeQuery(pool: Pool, name: string, path: string, runs: number, detail: (body: Buffer) => string): Promise<Timing> {
  const first = await timedGet(pool, path);
  const times: number[] = [];
  for (let i = 0; i < runs; i++) times.push((await timedGet(pool, path)).ms);
  const t = timing(name, times, detail(first.body));
  progress(`  ${name}: median ${fixed(t.medianMs, 1)} ms, p95 ${fixed(t.p95Ms, 1)} ms (${t.detail})`);
  return t;
}

/** The state and time filters of `requests list`, as the API's query parameters. */
export const LIST_CASES: ReadonlyArray<[string, string]> = [
  ['no filter', ''],
  ['state=failed (2%)', 'state=failed'],
  ['state=delivering (0.1%)', 'state=delivering'],
  ['state=none (5%)', 'state=none'],
  ['state=exhausted,failed,none', 'state=exhausted,failed,none'],
  ['since=1d', 'since=1d'],
  ['since=20d until=10d', `since=20d&until=10d`],
  ['state=retrying since=7d', 'state=retrying&since=7d'],
  ['state=exhausted since=20d until=10d', 'state=exhausted&since=20d&until=10d'],
  ['state=pending,retrying since=30m', 'state=pending,retrying&since=30m'],
];

async function benchList(opts: AdminBenchOptions, dir: string, problems: string[]): Promise<{ timings: Timing[]; buildS: number | null }> {
  const db = join(dir, `list-${opts.requests}.db`);
  let buildS: number | null = null;
  if (existsSync(db)) progress(`list: reusing ${db}`);
  else {
    progress(`list: building ${opts.requests.toLocaleString('en-US')} requests (+50,000 in another bucket)`);
    const t0 = performance.now();
    await build(db, opts.requests);
    buildS = (performance.now() - t0) / 1000;
  }
  const serve = await startServe(db, dir, 'serve-list', ['--no-worker']);
  const pool = new Pool(serve.admin, { connections: 1 });
  const timings: Timing[] = [];
  try {
    // The baseline in the same run: the admin listener's cheapest route (no store read), timed the
    // same way, so what the machine's load adds to every answer shows beside the queries.
    timings.push(
      await timeQuery(pool, 'baseline: GET /healthz (admin listener, no read)', '/healthz', opts.runs, (b) => `${b.length} bytes`),
    );
    for (const [name, q] of LIST_CASES) {
      const path = `/api/buckets/${LIST_BUCKET}/requests${q === '' ? '' : `?${q}`}`;
      timings.push(
        await timeQuery(pool, name, path, opts.runs, (b) => {
          const page = JSON.parse(b.toString('utf8')) as { requests: unknown[] };
          return `${page.requests.length} rows`;
        }),
      );
    }
  } catch (e) {
    problems.push(`list: ${(e as Error).message}`);
  } finally {
    await pool.close();
    await stopChild(serve.m);
  }
  return { timings, buildS };
}

/** The overview database: `buckets` buckets (load, busy and idle-…), made once per directory. */
async function overviewDb(opts: AdminBenchOptions, dir: string): Promise<string> {
  const db = join(dir, `buckets-${opts.buckets}.db`);
  if (existsSync(db)) {
    progress(`overview: reusing ${db}`);
    return db;
  }
  progress(`overview: making ${opts.buckets.toLocaleString('en-US')} buckets`);
  await makeDb(db, opts.buckets - 2, 'http://127.0.0.1:9');
  return db;
}

async function seed(serve: Serve, body: string): Promise<void> {
  const pool = new Pool(serve.ingest, { connections: 8 });
  try {
    const sends: Promise<void>[] = [];
    for (let i = 0; i < SEED_REQUESTS; i++) {
      const bucket = i % 2 === 0 ? 'load' : 'idle-00002';
      sends.push(
        pool.request({ path: `/b/${bucket}`, method: 'POST', headers: { 'content-type': 'application/json' }, body }).then(async (r) => {
          await r.body.dump();
          if (r.statusCode >= 300) throw new Error(`seeding /b/${bucket}: ${r.statusCode}`);
        }),
      );
    }
    await Promise.all(sends);
  } finally {
    await pool.close();
  }
}

async function benchOverview(opts: AdminBenchOptions, dir: string, body: string, problems: string[]): Promise<Timing[]> {
  const db = await overviewDb(opts, dir);
  const serve = await startServe(db, dir, 'serve-overview', ['--no-worker']);
  const pool = new Pool(serve.admin, { connections: 1 });
  const timings: Timing[] = [];
  try {
    await seed(serve, body);
    const rows = (b: Buffer) => `${(b.toString('utf8').match(/<tr>/g)?.length ?? 1) - 1} rows, ${b.length} bytes`;
    const buckets = (b: Buffer) =>
      `${(JSON.parse(b.toString('utf8')) as { buckets: unknown[] }).buckets.length} buckets, ${b.length} bytes`;
    const first = await timedGet(pool, '/');
    timings.push(timing('overview / (first view after start)', [first.ms], rows(first.body)));
    progress(`  first overview: ${fixed(first.ms, 0)} ms`);
    const middle = `idle-${String(Math.floor(opts.buckets / 2)).padStart(5, '0')}`;
    timings.push(await timeQuery(pool, 'overview /', '/', opts.runs, rows));
    timings.push(await timeQuery(pool, `overview /?after=${middle}`, `/?after=${middle}`, opts.runs, rows));
    timings.push(await timeQuery(pool, 'GET /api/buckets?limit=50', '/api/buckets?limit=50', opts.runs, buckets));
    timings.push(await timeQuery(pool, 'GET /api/buckets (every bucket)', '/api/buckets', Math.min(opts.runs, 10), buckets));
  } catch (e) {
    problems.push(`overview: ${(e as Error).message}`);
  } finally {
    await pool.close();
    await stopChild(serve.m);
  }
  return timings;
}

/** The admin load of one round: the overview once a second and one SSE reader on every bucket, until `signal`. */
async function adminLoad(
  serve: Serve,
  events: string,
  signal: AbortSignal,
): Promise<{ overviews: number[]; events: number; errors: string[] }> {
  const pool = new Pool(serve.admin, { connections: 2 });
  const overviews: number[] = [];
  const errors: string[] = [];
  let received = 0;
  const sse = (async () => {
    try {
      const path = events === 'all' ? '/api/events' : `/api/events?bucket=${encodeURIComponent(events)}`;
      const res = await pool.request({ path, method: 'GET', headers: { accept: 'text/event-stream' }, signal });
      if (res.statusCode !== 200) throw new Error(`GET /api/events: ${res.statusCode}`);
      let tail = '';
      for await (const chunk of res.body) {
        const text = tail + (chunk as Buffer).toString('utf8');
        const parts = text.split('\n\n');
        tail = parts.pop() ?? '';
        for (const p of parts) if (/^event: /m.test(p)) received++;
      }
    } catch (e) {
      if (!signal.aborted) errors.push(`SSE reader: ${(e as Error).message}`);
    }
  })();
  const pages = (async () => {
    while (!signal.aborted) {
      const next = performance.now() + OVERVIEW_EVERY_MS;
      try {
        overviews.push((await timedGet(pool, '/')).ms);
      } catch (e) {
        if (!signal.aborted) errors.push(`overview: ${(e as Error).message}`);
      }
      const wait = next - performance.now();
      if (wait > 0) await sleep(wait, undefined, { signal }).catch(() => undefined);
    }
  })();
  await Promise.all([sse, pages]);
  await pool.close();
  return { overviews, events: received, errors };
}

async function benchIngest(
  opts: AdminBenchOptions,
  dir: string,
  body: string,
  problems: string[],
  interrupt: AbortSignal,
): Promise<{ rounds: IngestRound[]; ratio: number }> {
  const db = await overviewDb(opts, dir);
  const serve = await startServe(db, dir, 'serve-ingest', []);
  const rounds: IngestRound[] = [];
  try {
    const url = `${serve.ingest}/b/load`;
    for (let r = 1; r <= opts.rounds; r++) {
      for (const admin of [false, true]) {
        if (interrupt.aborted) throw new Error('interrupted');
        const stop = new AbortController();
        const running = admin ? adminLoad(serve, opts.events, stop.signal) : undefined;
        progress(`round ${r}, ${admin ? 'with' : 'without'} admin load: ${WARMUP_S} s warm-up, ${opts.durationS} s measured`);
        await load(url, CONNECTIONS, WARMUP_S, body, interrupt);
        // Only the measured part counts the admin figures: the reader's stream opened in the warm-up.
        const t = await load(url, CONNECTIONS, opts.durationS, body, interrupt);
        stop.abort();
        const got = running ? await running : { overviews: [], events: 0, errors: [] };
        if (t.non2xx > 0 || t.errors > 0)
          problems.push(`ingest round ${r} (${admin ? 'admin' : 'none'}): ${t.non2xx} non-2xx, ${t.errors} errors`);
        for (const e of got.errors) problems.push(`ingest round ${r}: ${e}`);
        if (admin && got.events === 0) problems.push(`ingest round ${r}: the SSE reader got no event`);
        if (admin && got.overviews.length === 0) problems.push(`ingest round ${r}: no overview page was read`);
        rounds.push({
          round: r,
          admin,
          reqPerS: t.requests.average,
          p99Ms: t.latency.p99,
          overviews: got.overviews.length,
          overviewMaxMs: got.overviews.length ? Math.max(...got.overviews) : NaN,
          events: got.events,
        });
        progress(
          `  ${fixed(t.requests.average, 0)} req/s, p99 ${t.latency.p99} ms${admin ? `, ${got.overviews.length} overviews, ${got.events} events` : ''}`,
        );
        // Let the reader's stream close and the hub's poller stop before the next round.
        await sleep(500);
      }
    }
  } finally {
    await stopChild(serve.m);
  }
  const med = (admin: boolean) => median(rounds.filter((x) => x.admin === admin).map((x) => x.reqPerS));
  return { rounds, ratio: med(false) > 0 ? med(true) / med(false) : NaN };
}

export function renderReport(
  opts: AdminBenchOptions,
  machine: ReturnType<typeof machineInfo>,
  loadAvg: LoadAverages,
  list: { timings: Timing[]; buildS: number | null } | undefined,
  overview: Timing[] | undefined,
  ingest: { rounds: IngestRound[]; ratio: number } | undefined,
  v: readonly Verdict[],
): string {
  const lines: string[] = ['hookbucket admin benchmark', ...machineLines(machine, loadAvg), ''];
  const timingRows = (ts: readonly Timing[]) =>
    table(
      ['query', 'runs', 'median ms', 'p95 ms', 'max ms', 'answer'],
      ts.map((t) => [t.name, String(t.runs), fixed(t.medianMs, 1), fixed(t.p95Ms, 1), fixed(t.maxMs, 1), t.detail]),
      1,
    );
  if (list) {
    lines.push(
      `1. GET /api/buckets/${LIST_BUCKET}/requests, first page of 50, ${opts.requests.toLocaleString('en-US')} requests in the bucket (SQLite${list.buildS === null ? ', reused database' : `, built in ${fixed(list.buildS, 0)} s`}); client time to the last byte`,
      ...timingRows(list.timings),
      '',
    );
  }
  if (overview) lines.push(`2. the overview with ${opts.buckets.toLocaleString('en-US')} buckets`, ...timingRows(overview), '');
  if (ingest) {
    lines.push(
      `3. ingest (autocannon, ${CONNECTIONS} connections, POST ${BODY_BYTES} B, ${opts.durationS} s per round) without and with admin load (overview HTML every ${OVERVIEW_EVERY_MS} ms + an SSE reader on ${opts.events === 'all' ? 'every bucket' : `/api/events?bucket=${opts.events}`})`,
      ...table(
        ['round', 'admin load', 'req/s', 'p99 ms', 'overviews', 'slowest overview ms', 'SSE events'],
        ingest.rounds.map((r) => [
          String(r.round),
          r.admin ? 'yes' : 'no',
          fixed(r.reqPerS, 0),
          fixed(r.p99Ms, 0),
          r.admin ? String(r.overviews) : '-',
          r.admin ? fixed(r.overviewMaxMs, 0) : '-',
          r.admin ? String(r.events) : '-',
        ]),
        2,
      ),
      `median req/s with / without admin load: ${ratio(
        median(ingest.rounds.filter((r) => r.admin).map((r) => r.reqPerS)),
        median(ingest.rounds.filter((r) => !r.admin).map((r) => r.reqPerS)),
      )}`,
      '',
    );
  }
  lines.push('targets');
  for (const x of v)
    lines.push(`  ${x.pass ? 'PASS' : 'MISS'}  ${x.target.padEnd(60)} measured ${fixed(x.value, x.target.includes('ratio') ? 3 : 1)}`);
  return `${lines.join('\n')}\n`;
}

async function main(): Promise<number> {
  const opts = optionsOrUsage(
    () => parseOptions(process.argv.slice(2)),
    'node dist/bench/admin.js [--requests 1000000] [--buckets 10000] [--runs 30] [--rounds 3] [--duration 10] [--only list,overview,ingest] [--events load|all] [--keep DIR] [--json]',
  );
  if (opts === undefined) return 2;
  const sigint = abortOnSigint();
  const problems: string[] = [];
  const dir = opts.keep ?? (await mkdtemp(join(os.tmpdir(), 'hookbucket-bench-admin-')));
  if (opts.keep) await mkdir(opts.keep, { recursive: true });
  const before = os.loadavg();
  try {
    const body = makeBody(BODY_BYTES);
    const list = opts.only.includes('list') ? await benchList(opts, dir, problems) : undefined;
    const overview = opts.only.includes('overview') ? await benchOverview(opts, dir, body, problems) : undefined;
    const ingest = opts.only.includes('ingest') ? await benchIngest(opts, dir, body, problems, sigint.signal) : undefined;
    const loadAvg = { before, after: os.loadavg() };
    const v = verdicts(list?.timings ?? [], overview ?? [], ingest?.ratio);
    const machine = machineInfo();
    const text = renderReport(opts, machine, loadAvg, list, overview, ingest, v) + problemLines(problems).join('\n');
    return writeReport(
      opts.json,
      text,
      { machine, load: loadAvg, options: opts, targets: TARGETS, list, overview, ingest, verdicts: v, problems },
      problems,
    );
  } catch (e) {
    return benchFailed(e, problems);
  } finally {
    if (!opts.keep) await rm(dir, { recursive: true, force: true });
    sigint.dispose();
  }
}

await runIfMain(import.meta.url, main, 10_000);

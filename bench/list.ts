/**
 * Listing benchmark: `requests list` first pages over a one-million-request bucket.
 *
 *   npm run bench:list                          # 1,000,000 requests, 9 timed runs per query
 *   npm run bench:list -- --requests 200000     # smaller
 *   npm run bench:list -- --keep /tmp/list.db   # keep (and on the next run reuse) the database
 *
 * The database is built directly, not through HTTP: rows in ingest's shape (the columns and JSON
 * header encoding of src/store/sqlite/ingest-batch.ts, a first delivery per request unless it has
 * none), inserted with cached statements in 50,000-row transactions with synchronous=OFF; that
 * setting is for the build only, the timed queries run on a normal connection. The bucket covers
 * 30 days, one request every ~2.6 s, with ingest-like ids (UUIDv7 of each request's receipt ms).
 * Each request gets a delivery state (delivered 88%, none 5%, failed 2%, exhausted 2%, retrying 1%,
 * pending 1%, delivering 0.1%, the rest delivered), 2% have a second (replay) generation, and a
 * second bucket holds 50,000 more requests so that the bucket column matters.
 *
 * Each query goes through SqliteStore.listRequests (what the CLI calls, bucket lookup included),
 * once to warm up and then --runs times; the median is printed. Times are with the file in the OS
 * page cache (a first query after a cold start reads pages from disk and is slower).
 * Process start-up of the CLI (about 100 ms of Node and module loading) is not included.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { parseArgs } from 'node:util';
import { UUID } from 'uuidv7';
import { mulberry32 } from '../src/policy/prng.js';
import { systemClock } from '../src/shared/clock.js';
import { openSqlite } from '../src/store/sqlite/open.js';
import { explainPlan, planRequestQueries } from '../src/store/sqlite/request-query.js';
import { SqliteStore } from '../src/store/sqlite/sqlite-store.js';
import type { RequestFilter } from '../src/store/store.js';
import { runIfMain } from './report.js';

const BUCKET = 'bench';
const OTHER = 'other';
const DAY = 86_400_000;
const SPAN_MS = 30 * DAY;
const TX_ROWS = 50_000;
const PAGE = 50;

const PROVIDERS = ['stripe', 'github', 'shopify'] as const;
const EVENTS = ['charge.succeeded', 'invoice.paid', 'push', 'pull_request', 'orders/create', 'customers/update'] as const;

type Plan = { state: string | null; attempts: number; status: number | null; generations: number };

function pickState(rand: () => number): Plan {
  const x = rand();
  if (x < 0.05) return { state: null, attempts: 0, status: null, generations: 0 };
  if (x < 0.07) return { state: 'failed', attempts: 1, status: [400, 404, 410][Math.floor(rand() * 3)]!, generations: 1 };
  if (x < 0.09) return { state: 'exhausted', attempts: 14, status: [500, 502, 503][Math.floor(rand() * 3)]!, generations: 1 };
  if (x < 0.1) return { state: 'retrying', attempts: 2 + Math.floor(rand() * 4), status: 503, generations: 1 };
  if (x < 0.11) return { state: 'pending', attempts: 0, status: null, generations: 1 };
  if (x < 0.111) return { state: 'delivering', attempts: 1, status: null, generations: 1 };
  return { state: 'delivered', attempts: 1 + (rand() < 0.1 ? 1 : 0), status: 200, generations: rand() < 0.02 ? 2 : 1 };
}

/** The bucket the built database's `n` requests are in (a second bucket holds 50,000 more). */
export const LIST_BUCKET = BUCKET;

/**
 * Builds the listing database at `path` (which must not exist): `n` requests in LIST_BUCKET and
 * 50,000 in another, as described at the top of this file. Exported for bench/admin.ts.
 */
export async function build(path: string, N: number): Promise<void> {
  const started = performance.now();
  const store = await SqliteStore.open({ path, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
  await store.createBucket({ name: BUCKET, destination: 'http://127.0.0.1:9/unused' });
  await store.createBucket({ name: OTHER, destination: 'http://127.0.0.1:9/unused' });
  await store.close();

  const db = openSqlite(path, { durability: 'normal', busyTimeoutMs: 5000 });
  db.pragma('synchronous = OFF'); // the build only; queries below run on a fresh connection
  db.pragma('cache_size = -262144'); // 256 MiB while building
  const insertRequest = db.prepare(
    `insert into requests (id, bucket, received_at, method, path, query, headers, body, size, sha256, peer)
     values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const insertDelivery = db.prepare(
    `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at,
       lease_until, trigger, replay_id, deferrals, last_deferral_reason, created_at, updated_at, last_status, latest, settled_at)
     values (?, ?, ?, null, ?, ?, ?, ?, null, ?, null, 0, null, ?, ?, ?, ?, ?)`,
  );
  const rand = mulberry32(42);
  const end = Date.now();
  const total = N + 50_000;
  const idAt = (ms: number) =>
    UUID.fromFieldsV7(ms, Math.floor(rand() * 4096), Math.floor(rand() * 2 ** 30), Math.floor(rand() * 2 ** 32)).toString();
  const tx = db.transaction((from: number, to: number) => {
    for (let i = from; i < to; i++) {
      const other = i >= N;
      const k = other ? i - N : i;
      const n = other ? 50_000 : N;
      const receivedAt = end - SPAN_MS + Math.floor((k * SPAN_MS) / n);
      const id = idAt(receivedAt);
      const provider = PROVIDERS[k % 3]!;
      const event = EVENTS[(k * 7) % EVENTS.length]!;
      const body = Buffer.from(
        JSON.stringify({
          id: `evt_${k}`,
          type: event,
          customer: `cus_${k % 50_000}`,
          created: Math.floor(receivedAt / 1000),
          data: { object: { amount: (k * 37) % 100_000, currency: 'usd', description: 'x'.repeat(300 + (k % 300)) } },
        }),
      );
      const headers = [
        'Host',
        'hooks.example.com',
        'User-Agent',
        `${provider}-hookshot/1.0`,
        'Content-Type',
        'application/json',
        'Content-Length',
        String(body.length),
        'X-Event',
        event,
        'X-Shop-Domain',
        `shop-${k % 100}.myshopify.com`,
        'Stripe-Signature',
        `t=${Math.floor(receivedAt / 1000)},v1=${(k * 2654435761) % 2 ** 32}`,
      ];
      const bucket = other ? OTHER : BUCKET;
      insertRequest.run(
        id,
        bucket,
        receivedAt,
        'POST',
        `/webhooks/${provider}/${event}`,
        k % 10 === 0 ? 'live=1' : null,
        JSON.stringify(headers),
        body,
        body.length,
        createHash('sha256').update(body).digest('hex'),
        '10.0.0.1',
      );
      const p = pickState(rand);
      if (p.state === null) continue;
      if (p.generations === 2) {
        insertDelivery.run(
          idAt(receivedAt),
          id,
          bucket,
          1,
          'exhausted',
          14,
          receivedAt,
          'initial',
          receivedAt,
          receivedAt,
          503,
          0,
          receivedAt,
        );
      }
      const settled = ['delivered', 'failed', 'exhausted'].includes(p.state) ? receivedAt + 1000 : null;
      insertDelivery.run(
        idAt(receivedAt),
        id,
        bucket,
        p.generations === 2 ? 2 : 1,
        p.state,
        p.attempts,
        receivedAt,
        p.generations === 2 ? 'replay' : 'initial',
        receivedAt,
        receivedAt,
        p.status,
        1,
        settled,
      );
    }
  });
  for (let from = 0; from < total; from += TX_ROWS) {
    tx(from, Math.min(total, from + TX_ROWS));
    if ((from / TX_ROWS) % 4 === 0)
      process.stderr.write(`\rbuilding: ${from.toLocaleString('en-US')} of ${total.toLocaleString('en-US')} requests`);
  }
  db.pragma('wal_checkpoint(TRUNCATE)');
  db.close();
  process.stderr.write(`\rbuilt ${total.toLocaleString('en-US')} requests in ${((performance.now() - started) / 1000).toFixed(1)} s\n`);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length % 2 ? s[(s.length - 1) / 2]! : (s[s.length / 2 - 1]! + s[s.length / 2]!) / 2;
}

async function main(): Promise<void> {
  const { values: args } = parseArgs({
    options: {
      requests: { type: 'string', default: '1000000' },
      runs: { type: 'string', default: '9' },
      keep: { type: 'string' },
    },
  });
  const N = Number(args.requests);
  const RUNS = Number(args.runs);
  const dir = args.keep ? undefined : await mkdtemp(join(os.tmpdir(), 'hookbucket-bench-list-'));
  const path = args.keep ?? join(dir!, 'list.db');
  // Ctrl-C during the build must not leave a 1.7 GB file behind.
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.once(sig, () => {
      if (dir) void rm(dir, { recursive: true, force: true }).finally(() => process.exit(130));
      else process.exit(130);
    });
  }
  try {
    if (!existsSync(path)) await build(path, N);
    else process.stderr.write(`reusing ${path}\n`);
    const store = await SqliteStore.open({ path, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
    const now = Date.now();
    const cases: Array<[string, RequestFilter]> = [
      ['first page, no filter', {}],
      ['--state failed', { states: ['failed'] }],
      ['--state retrying --since 7d', { states: ['retrying'], sinceMs: now - 7 * DAY }],
      ['--state exhausted --since 20d --until 10d', { states: ['exhausted'], sinceMs: now - 20 * DAY, untilMs: now - 10 * DAY }],
      ['--state exhausted,failed,none', { states: ['exhausted', 'failed', 'none'] }],
      ['--state delivering (0.1%)', { states: ['delivering'] }],
      ['--state none (5%)', { states: ['none'] }],
      ["--path '/webhooks/github/*'", { pathGlob: '/webhooks/github/*' }],
      ['--header X-Shop-Domain=shop-42.myshopify.com (1%)', { headers: [{ name: 'x-shop-domain', value: 'shop-42.myshopify.com' }] }],
      ['--status 5xx', { status: { class: 5 } }],
      ['--state failed --status 404', { states: ['failed'], status: { code: 404 } }],
      ['--method DELETE (no match: walks the whole bucket)', { methods: ['DELETE'] }],
      ['--search invoice.paid (1 in 6 bodies)', { search: 'invoice.paid' }],
      ['--search \'"cus_4242"\' (1 in 50,000 bodies)', { search: '"cus_4242"' }],
      ['--search not-there (no match: every body)', { search: 'not-there' }],
    ];
    const rows: Array<[string, number, number]> = [];
    for (const [name, filter] of cases) {
      let got = 0;
      const once = async () => {
        const t = performance.now();
        const page = await store.listRequests(BUCKET, filter, { limit: PAGE });
        got = page.requests.length;
        return performance.now() - t;
      };
      await once();
      const times: number[] = [];
      for (let i = 0; i < RUNS; i++) times.push(await once());
      rows.push([name, median(times), got]);
      process.stderr.write(`  ${name}: ${median(times).toFixed(2)} ms\n`);
    }
    await store.close();

    const raw = openSqlite(path, { durability: 'normal', busyTimeoutMs: 5000 });
    const plan = planRequestQueries(BUCKET, { states: ['retrying'], sinceMs: now - 7 * DAY }, false, { order: 'desc', limit: PAGE + 1 });
    const detail = explainPlan(raw, plan[0]!);
    raw.close();

    const base = rows[0]![1];
    const width = Math.max(...rows.map((r) => r[0].length));
    console.log(
      `\nrequests list, first page of ${PAGE}, ${N.toLocaleString('en-US')} requests in the bucket; median of ${RUNS} runs (ms)\n`,
    );
    console.log(`${'query'.padEnd(width)}  ${'ms'.padStart(9)}  ${'rows'.padStart(4)}  × unfiltered`);
    for (const [name, ms, got] of rows)
      console.log(`${name.padEnd(width)}  ${ms.toFixed(2).padStart(9)}  ${String(got).padStart(4)}  ${(ms / base).toFixed(1)}`);
    console.log(`\nplan of --state retrying --since 7d:\n  ${detail.join('\n  ')}`);
    const stateTime = rows[2]![1];
    console.log(`\nstate + time first page: ${stateTime.toFixed(2)} ms (target < 100 ms: ${stateTime < 100 ? 'met' : 'MISSED'})`);
  } finally {
    if (dir) await rm(dir, { recursive: true, force: true });
  }
}

// Run only when executed, so bench/admin.ts can import build().
await runIfMain(import.meta.url, async () => {
  await main();
  return 0;
});

/**
 * The PostgreSQL twins (issue 12, point 6): the kill -9, SIGTERM, lock and bad-input cases run
 * again with `serve --db postgres://…`, each on a fresh `hookbucket_test_<random>` database
 * (dropped after) with its spool in the case's folder, checked by the same invariant read from
 * PostgreSQL directly (lib/pg-invariant.ts). Each twin's id is its SQLite case's id plus `p`, so it
 * runs right after it; 7q (connection loss) has no SQLite twin, and 3p is case 3's counterpart
 * with several workers on one database (one killed under load). They run only when
 * HOOKBUCKET_TEST_PG names a server (.ci/run sets it).
 */
import { performance } from 'node:perf_hooks';
import pg from 'pg';
import { pgTestServer } from '../../helpers/pg-database.js';
import { workerIdOf, wasActive } from '../../scale/harness.js';
import { AckLog } from '../lib/ack-log.js';
import { countByRequestId, duplicatesIn, startConsumer, type Consumer } from '../lib/consumer.js';
import { LoadGenerator, sleep, type Outcome } from '../lib/load.js';
import { newResult, secs, until } from '../lib/result.js';
import { randomInt } from '../lib/seed.js';
import { hookbucket, startServe, startWorkerProcess, type HookbucketProcess, type ServeHandle } from '../lib/serve-process.js';
import { openTestStore } from '../lib/test-store.js';
import type { CaseContext, CaseResult, ReliabilityCase } from '../lib/types.js';
import { killUnderLoad, sigtermUnderLoad } from './crash.js';
import { cases as hostileCases } from './hostile.js';
import { writeLockHeld } from './storage.js';

const server = pgTestServer();

/** Kill rounds on PostgreSQL: as many as SQLite's (about 80 s here). */
const PG_KILL_ROUNDS = 20;

function onPostgres(id: string, title: string, timeoutMs: number, run: (ctx: CaseContext) => Promise<CaseResult>): ReliabilityCase {
  return { id, title: `${title} (PostgreSQL)`, timeoutMs, run: (ctx) => run({ ...ctx, postgres: server! }) };
}

function twinOf(id: number): ReliabilityCase {
  const c = hostileCases.find((x) => x.id === id);
  if (!c) throw new Error(`no hostile case ${id}`);
  return onPostgres(`${id}p`, c.title, c.timeoutMs ?? 120_000, c.run);
}

// ---------------------------------------------------------------------------------------------
// 7q. the receiver loses its connections mid-load

const LOCK_TIMEOUT_MS = 2_000; // serve's --lock-timeout (the default)
const TERMINATE_ROUNDS = 3;
/** How long the database refuses every connection in the "server away" phase. */
const AWAY_MS = 3_000; // 3 s
/** After its connections are cut (or the server is back), ingest answers 2xx again within this. */
const RECOVERY_BOUND_MS = 10_000; // 10 s

type Answered = Extract<Outcome, { kind: 'answered' }>;

async function connectionLoss(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const store = await openTestStore(ctx, ctx.tmpDir(), 'unused.db');
  const admin = new pg.Client({ connectionString: ctx.postgres! });
  const name = new URL(store.db).pathname.slice(1);
  let serve: ServeHandle | undefined;
  const acks = new AckLog();
  let load: LoadGenerator | undefined;
  let away = false;
  try {
    await admin.connect();
    await hookbucket(['--db', store.db, 'bucket', 'create', 'conn', '--destination', 'http://127.0.0.1:9/never']);
    serve = await startServe({ db: store.db, flags: [...store.serveFlags, '--no-worker', '--lock-timeout', `${LOCK_TIMEOUT_MS}ms`] });
    load = new LoadGenerator({ url: serve.url, bucket: 'conn', connections: 8, random: ctx.random, ackLog: acks, maxBody: 64 * 1024 });
    const l = load;
    const terminate = async () =>
      Number(
        (
          await admin.query({
            text: 'select count(pg_terminate_backend(pid)) from pg_stat_activity where datname = $1 and pid <> pg_backend_pid()',
            values: [name],
            rowMode: 'array',
          })
        ).rows[0]?.[0] ?? 0,
      );
    /** ms from `t` to the first 2xx of a request sent after `t`, or undefined past the bound. */
    const recoveredAfter = async (t: number) => {
      const first = await until(
        () => l.outcomes.find((o): o is Answered => o.kind === 'answered' && o.sentAt >= t && o.status < 300),
        RECOVERY_BOUND_MS,
        10,
      );
      return first ? first.answeredAt - t : undefined;
    };

    l.start();
    await sleep(1500);
    const recoveries: number[] = [];
    let killed = 0;
    for (let round = 1; round <= TERMINATE_ROUNDS && !ctx.signal.aborted; round++) {
      const t = performance.now();
      const n = await terminate();
      killed += n;
      const rec = await recoveredAfter(t);
      if (rec === undefined) r.fail(`round ${round}: no 2xx within ${secs(RECOVERY_BOUND_MS)} of terminating ${n} backend(s)`);
      else recoveries.push(rec);
      ctx.log(`terminated ${n} backend(s); first 2xx after ${rec === undefined ? 'never' : secs(rec)}; ${acks.size} acked so far`);
      await sleep(1000);
    }

    // The server away: no connection to the database at all for AWAY_MS, then back.
    await admin.query(`alter database ${name} allow_connections false`);
    away = true;
    const awayAt = performance.now();
    killed += await terminate();
    await sleep(AWAY_MS / 2);
    const health = await fetch(`${serve.url}/healthz`, { signal: AbortSignal.timeout(5000) }).then(async (res) => ({
      status: res.status,
      body: (await res.json()) as { status?: string },
    }));
    await sleep(AWAY_MS / 2);
    const acksBeforeBack = acks.size;
    await admin.query(`alter database ${name} allow_connections true`);
    away = false;
    const backAt = performance.now();
    const back = await recoveredAfter(backAt);
    if (back === undefined) r.fail(`no 2xx within ${secs(RECOVERY_BOUND_MS)} of the database accepting connections again`);
    const awayOutcomes = l.outcomes.filter(
      (o): o is Answered => o.kind === 'answered' && o.sentAt >= awayAt + 200 && o.answeredAt <= backAt,
    );
    const awayOk = awayOutcomes.filter((o) => o.status < 300);
    if (awayOk.length > 0) r.fail(`${awayOk.length} request(s) acknowledged while the database refused every connection`);
    if (health.status !== 503 || health.body.status !== 'degraded')
      r.fail(`/healthz while the database was away: ${health.status} ${JSON.stringify(health.body)}`);
    ctx.log(
      `database away ${secs(backAt - awayAt)}: ${awayOutcomes.length} answered (all 503: ${awayOk.length === 0}), /healthz ${health.status} ${health.body.status}; first 2xx ${back === undefined ? 'never' : secs(back)} after it was back`,
    );
    await sleep(1500);
    await l.stop(10_000);
    const healthAfter = await fetch(`${serve.url}/healthz`, { signal: AbortSignal.timeout(5000) }).then((res) => res.status);
    if (healthAfter !== 200) r.fail(`/healthz after recovery: ${healthAfter}`);
    const term = await serve.proc.term();
    if (term.code !== 0) r.fail(`SIGTERM: exit ${term.code ?? term.signal}; last log: ${serve.proc.tail(8)}`);
    serve = undefined;

    const seqs = new Map<number, string>();
    const inv = await store.check({ acks: acks.all(), sent: l.sent, seqs, expectDeliveries: true });
    if (!inv.ok) r.fail(`invariant: ${inv.problems.join('; ')}`);
    const answered = l.outcomes.filter((o): o is Answered => o.kind === 'answered');
    const other = answered.filter((o) => o.status >= 300 && o.status !== 503);
    if (other.length > 0) r.fail(`answers other than 2xx/503: ${[...new Set(other.map((o) => o.status))].join(', ')}`);
    const noRetryAfter = answered.filter((o) => o.status === 503 && !o.retryAfter).length;
    if (noRetryAfter > 0) r.fail(`${noRetryAfter} 503s without Retry-After`);
    // A 503 after a COMMIT whose outcome was unknown may stand for a stored request (documented:
    // the sender's retry then stores a duplicate); reported, not failed.
    const refusedStored = answered.filter((o) => o.status >= 300 && seqs.has(o.seq)).length;
    r.sent = l.stats.sent;
    r.acked = l.stats.acked;
    r.verified = inv.verified;
    r.lostAcked = inv.lost.length;
    const codes =
      Object.entries(l.stats.byCode)
        .map(([k, n]) => `${k}: ${n}`)
        .join(', ') || 'none';
    r.figure('backends terminated', `${killed} in ${TERMINATE_ROUNDS} rounds + 1 away phase`);
    r.figure('terminate → first 2xx, per round', recoveries.map(secs).join(', '), `≤ ${secs(RECOVERY_BOUND_MS)}`);
    r.figure(
      'database away (connections refused)',
      `${secs(backAt - awayAt)}; ${awayOutcomes.length} answered, all 503: ${awayOk.length === 0}; /healthz ${health.status} ${health.body.status ?? ''}`,
    );
    r.figure('database back → first 2xx', back === undefined ? 'never' : secs(back), `≤ ${secs(RECOVERY_BOUND_MS)}`);
    r.figure('503 answers (codes)', `${l.stats.byStatus[503] ?? 0} (${codes})`);
    r.figure('503 answers that were stored (unknown COMMIT outcome)', String(refusedStored));
    r.figure('resets', String(l.stats.resets));
    r.figure('acked before the away phase ended', String(acksBeforeBack));
  } catch (e) {
    r.fail(e instanceof Error ? (e.stack ?? e.message) : String(e));
    if (serve)
      r.fail(
        `serve ${serve.proc.exit ? `exited ${serve.proc.exit.code ?? serve.proc.exit.signal}` : 'still running'}; last log: ${serve.proc.tail(5)}`,
      );
    // A crash prints its stack as plain lines (not the JSON log): keep them whole.
    const plain = serve?.proc.logs.filter((l) => Object.keys(l).length === 1).map((l) => String(l.msg)) ?? [];
    if (plain.length > 0) r.note(`serve's non-JSON output: ${plain.slice(0, 40).join(' | ')}`);
  } finally {
    if (away) await admin.query(`alter database ${name} allow_connections true`).catch(() => undefined);
    await load?.stop();
    await serve?.proc.kill9();
    await admin.end().catch(() => undefined);
    await store.dispose();
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// 3p. kill -9 one of several drain workers under load

const WORKERS = 3;
/** Load before the kill, and after it. */
const LOAD_BEFORE_KILL_MS = 2_500;
const LOAD_AFTER_KILL_MS = 2_500;
/** From the end of the load until every acked request has reached the consumer (the dead worker's 2 s leases, then the rest). */
const SETTLE_BOUND_MS = 60_000;

/**
 * Several `worker`s (`--standby --lease 2s`) drain one bucket on PostgreSQL while a receiver
 * takes load; one worker that has made attempts (the one with open attempts, from
 * attempts.worker_id) is killed with -9 mid-load.
 * Every acked request must be stored intact (the invariant) and reach the consumer, and the
 * consumer sees a request twice only for the dead worker's attempts closed as lease_expired.
 */
async function workerKilledAmongMany(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const store = await openTestStore(ctx, ctx.tmpDir(), 'unused.db');
  // Each answer after 0-20 ms, so attempts are in flight when the worker dies.
  const consumer: Consumer = await startConsumer((_req, res) => {
    const t = setTimeout(() => res.writeHead(200).end('ok'), randomInt(ctx.random, 0, 20));
    res.on('close', () => clearTimeout(t));
  });
  const acks = new AckLog();
  let serve: ServeHandle | undefined;
  const workers: HookbucketProcess[] = [];
  let load: LoadGenerator | undefined;
  try {
    await hookbucket(['--db', store.db, 'bucket', 'create', 'many', '--destination', `${consumer.url}/hook`, '--timeout', '1s']);
    serve = await startServe({ db: store.db, flags: [...store.serveFlags, '--no-worker'] });
    for (let i = 0; i < WORKERS; i++) workers.push(await startWorkerProcess({ db: store.db, flags: ['--lease', '2s', '--standby'] }));
    const activeAtStart = workers.filter(wasActive).length;
    load = new LoadGenerator({ url: serve.url, bucket: 'many', connections: 4, random: ctx.random, ackLog: acks, maxBody: 16 * 1024 });
    load.start();
    await sleep(LOAD_BEFORE_KILL_MS);

    const rows = await store.all<{ worker_id: string; open: number; n: number }>(
      `select worker_id, count(*) filter (where outcome is null)::int as open, count(*)::int as n from attempts where worker_id is not null group by worker_id order by 2 desc, 3 desc`,
    );
    const byId = new Map(workers.map((w) => [workerIdOf(w), w]));
    const victim = rows.map((x) => byId.get(x.worker_id)).find((w) => w !== undefined);
    if (!victim) throw new Error('no worker has made attempts');
    const victimId = workerIdOf(victim);
    const seenAtKill = consumer.received.length;
    await victim.kill9();
    const killedAt = performance.now();
    ctx.log(
      `killed worker ${victimId} (pid ${victim.pid}) after ${seenAtKill} arrivals; ${activeAtStart} of ${WORKERS} workers were active`,
    );
    await sleep(LOAD_AFTER_KILL_MS);
    await load.stop(10_000);
    const loadEnd = performance.now();

    const settled = await until(
      async () => {
        const seen = countByRequestId(consumer.received);
        const open = await store.scalar(`select count(*) from deliveries where state in ('pending', 'retrying', 'delivering')`);
        return open === 0 && acks.all().every((a) => seen.has(a.id)) ? true : undefined;
      },
      SETTLE_BOUND_MS,
      200,
    );
    const settleMs = performance.now() - loadEnd;
    if (!settled) r.fail(`not every acked request reached the consumer within ${secs(SETTLE_BOUND_MS)} of the load's end`);
    for (const w of workers.filter((x) => x !== victim)) {
      const term = await w.term();
      if (term.code !== 0) r.fail(`${w.describe()}: exit ${term.code ?? term.signal} on SIGTERM`);
    }
    const serveTerm = await serve.proc.term();
    if (serveTerm.code !== 0) r.fail(`serve: exit ${serveTerm.code ?? serveTerm.signal} on SIGTERM`);
    serve = undefined;

    const seen = countByRequestId(consumer.received);
    const notArrived = acks.all().filter((a) => !seen.has(a.id));
    if (notArrived.length > 0) r.fail(`${notArrived.length} acked request(s) never reached the consumer`);
    const expired = await store.all<{ worker_id: string | null }>(`select worker_id from attempts where outcome = 'lease_expired'`);
    const duplicates = duplicatesIn(consumer.received);
    if (duplicates > expired.length) r.fail(`${duplicates} duplicate deliveries, only ${expired.length} attempts closed as lease_expired`);
    if (expired.some((e) => e.worker_id !== victimId))
      r.fail(`lease_expired attempts of workers other than the killed one: ${expired.map((e) => e.worker_id).join(', ')}`);
    const open = await store.scalar('select count(*) from attempts where outcome is null');
    if (open > 0) r.fail(`${open} attempts still open`);
    const inv = await store.check({ acks: acks.all(), sent: load.sent, expectDeliveries: true });
    if (!inv.ok) r.fail(`invariant: ${inv.problems.join('; ')}`);
    r.sent = load.stats.sent;
    r.acked = load.stats.acked;
    r.verified = inv.verified;
    r.lostAcked = inv.lost.length + notArrived.length;
    r.duplicates = duplicates;
    r.figure('workers (active at start)', `${WORKERS} (${activeAtStart})`);
    r.figure('attempts closed as lease_expired', String(expired.length), `≥ duplicates (${duplicates})`);
    r.figure(
      'kill → load end → all delivered',
      `${secs(loadEnd - killedAt)} + ${secs(settleMs)}`,
      `≤ ${secs(SETTLE_BOUND_MS)} after the load`,
    );
  } catch (e) {
    r.fail(e instanceof Error ? (e.stack ?? e.message) : String(e));
  } finally {
    await load?.stop();
    for (const w of workers) await w.kill9();
    await serve?.proc.kill9();
    await consumer.close();
    await store.dispose();
  }
  return r;
}

/** Printed once by the runner when these cases do not run. */
export const skipped = server
  ? undefined
  : 'PostgreSQL cases (1p, 2p, 3p, 7p, 7q, 10p, 12p, 13p, 18p, 19p) skipped: set HOOKBUCKET_TEST_PG (e.g. postgres://postgres@127.0.0.1:5432/test) to run them';

export const cases: ReliabilityCase[] = server
  ? [
      onPostgres('1p', `kill -9 the receiver under load, ${PG_KILL_ROUNDS} times`, 4 * 60_000, (ctx) => killUnderLoad(ctx, PG_KILL_ROUNDS)),
      onPostgres('2p', 'SIGTERM under load', 2 * 60_000, sigtermUnderLoad),
      onPostgres('3p', `kill -9 one of ${WORKERS} drain workers under load`, 2 * 60_000, workerKilledAmongMany),
      onPostgres('7p', 'another connection holds LOCK TABLE requests IN EXCLUSIVE MODE for 10 s', 2 * 60_000, writeLockHeld),
      onPostgres(
        '7q',
        'the receiver loses its connections mid-load (pg_terminate_backend ×3, then 3 s refused)',
        2 * 60_000,
        connectionLoss,
      ),
      twinOf(10),
      twinOf(12),
      twinOf(13),
      twinOf(18),
      twinOf(19),
    ]
  : [];

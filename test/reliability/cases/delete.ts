/**
 * Reliability cases 28 and 29 (issue 10, points 1 and 2): bucket changes from the CLI while a real
 * serve takes ingest load and drains.
 *
 * 28. A bucket holding 200,000 imported requests is deleted with `bucket delete --force` while
 *     ingest load goes to another bucket. The delete is killed (-9) part-way; the bucket must stay
 *     a `deleting` tombstone (shown so, ingest 404, `bucket create` refused with bucket_deleting),
 *     and re-running `bucket delete` finishes it. Then the name is created again with a new
 *     destination: none of the old requests may reach it. Ingest to the other bucket must never
 *     answer 5xx (each purge batch holds the write lock a few ms against ingest's 2 s
 *     --lock-timeout), and no acknowledged request may be lost.
 * 29. `bucket pause`, `resume` and `update`, 20 rounds of each, under ingest and drain load: every
 *     call exits 0 (each read-then-write transaction is BEGIN IMMEDIATE and the CLI waits up to
 *     10 s for the lock), ingest never answers 5xx, and every acknowledged request is delivered.
 *
 * Sizes come from the mechanism, not one run: 200,000 rows import in about 18 s and purge in
 * about 11 s on this 2-core machine without load (400 batches of 500, one fsync each), so the case
 * stays well under its 4-minute bound even at three times that under load.
 */
import { createWriteStream } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { AckLog } from '../lib/ack-log.js';
import { countByRequestId, duplicatesIn, startConsumer, type Consumer } from '../lib/consumer.js';
import { checkInvariant, openForCheck } from '../lib/invariant.js';
import { LoadGenerator, sleep, type Outcome } from '../lib/load.js';
import { newResult, secs, until } from '../lib/result.js';
import { hookbucket, HookbucketProcess, runHookbucket, startServe, type CliRun, type ServeHandle } from '../lib/serve-process.js';
import type { CaseContext, CaseResult, ReliabilityCase } from '../lib/types.js';

type Result = ReturnType<typeof newResult>;
type Answered = Extract<Outcome, { kind: 'answered' }>;

/** Requests in the bucket that is deleted (the issue's reproduction used 300,000). */
const OLD_ROWS = 200_000;
/** The delete is killed once this share of the rows is gone. */
const KILL_AT_SHARE = 0.25;
/** Requests sent to the recreated bucket. */
const NEW_ROWS = 50;
/** Rounds of pause, resume and update in case 29. */
const ROUNDS = 20;
/** The load never sends more than this, whatever else happens. */
const LOAD_BOUND = 200_000;

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))]!;
}

/** Writes an NDJSON import of `n` small JSON requests, each marked `"old":<i>`. */
async function writeOldRequests(path: string, n: number): Promise<void> {
  const out = createWriteStream(path);
  let chunk = '';
  for (let i = 0; i < n; i++) {
    const body = JSON.stringify({ old: i, pad: 'x'.repeat(200) });
    chunk += `${JSON.stringify({ method: 'POST', path: `/old/${i}`, query: null, headers: [['Content-Type', 'application/json']], body })}\n`;
    if (chunk.length > 1 << 20) {
      if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
      chunk = '';
    }
  }
  await new Promise<void>((resolve, reject) => out.once('error', reject).end(chunk, () => resolve()));
}

function rowsIn(db: string, bucket: string): number {
  const c = openForCheck(db);
  try {
    return Number(c.prepare('select count(*) from requests where bucket = ?').pluck().get(bucket));
  } finally {
    c.close();
  }
}

/** Ingest answers other than 2xx to the loaded bucket fail the case: none is expected. */
function checkIngest(r: Result, load: LoadGenerator, what: string): void {
  const answered = load.outcomes.filter((o): o is Answered => o.kind === 'answered');
  const bad = answered.filter((o) => o.status >= 300);
  if (bad.length > 0) {
    const by = new Map<string, number>();
    for (const o of bad) by.set(`${o.status} ${o.code ?? ''}`.trim(), (by.get(`${o.status} ${o.code ?? ''}`.trim()) ?? 0) + 1);
    r.fail(`${what}: ${bad.length} answers other than 2xx (${[...by].map(([k, n]) => `${k}: ${n}`).join(', ')})`);
  }
  if (load.stats.resets > 0) r.fail(`${what}: ${load.stats.resets} connections reset`);
  const lat = answered.filter((o) => o.status < 300).map((o) => o.answeredAt - o.sentAt);
  r.figure(`${what}: ack latency p99 / max`, `${secs(pct(lat, 0.99))} / ${secs(Math.max(0, ...lat))}`);
  r.figure(`${what}: answers other than 2xx`, String(bad.length), '0');
}

async function checkAcks(r: Result, db: string, acks: AckLog, load: LoadGenerator, buckets: string[]): Promise<void> {
  const inv = await checkInvariant({ db, acks: acks.all(), sent: load.sent, buckets, expectDeliveries: true });
  if (!inv.ok) r.fail(inv.problems.join('; '));
  r.sent = load.stats.sent;
  r.acked = load.stats.acked;
  r.verified = inv.verified;
  r.lostAcked = inv.lost.length;
}

// ---------------------------------------------------------------------------------------------
// 28. delete a large bucket under load (killed part-way, then finished), recreate the name

async function deleteUnderLoad(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const dir = ctx.tmpDir();
  const db = join(dir, 'delete.db');
  const file = join(dir, 'old.ndjson');
  const oldC = await startConsumer();
  const newC = await startConsumer();
  const otherC = await startConsumer();
  let serve: ServeHandle | undefined;
  let load: LoadGenerator | undefined;
  let deleting: HookbucketProcess | undefined;
  try {
    await writeOldRequests(file, OLD_ROWS);
    await hookbucket(['--db', db, 'bucket', 'create', 'big', '--destination', `${oldC.url}/old`]);
    // Paused, as in the issue: its deliveries are held, pending, when the delete starts.
    await hookbucket(['--db', db, 'bucket', 'pause', 'big']);
    await hookbucket(['--db', db, 'bucket', 'create', 'other', '--destination', `${otherC.url}/other`]);
    let t0 = performance.now();
    await hookbucket(['--db', db, 'requests', 'import', 'big', file, '--deliver'], { timeoutMs: 120_000 });
    r.figure('import', `${OLD_ROWS} requests in ${secs(performance.now() - t0)}`);

    serve = await startServe({ db });
    const acks = new AckLog();
    load = new LoadGenerator({
      url: serve.url,
      bucket: 'other',
      connections: 8,
      random: ctx.random,
      ackLog: acks,
      maxBody: 16 * 1024,
      maxRequests: LOAD_BOUND,
    });
    load.start();
    await sleep(1000);

    // The first delete, killed once a quarter of the rows is gone.
    t0 = performance.now();
    deleting = new HookbucketProcess(['--db', db, 'bucket', 'delete', 'big', '--force', '--yes']);
    const killAt = Math.floor(OLD_ROWS * (1 - KILL_AT_SHARE));
    const reached = await until(() => (deleting!.exit ? 'exited' : rowsIn(db, 'big') <= killAt ? 'reached' : undefined), 120_000, 100);
    if (reached !== 'reached') {
      r.fail(
        `the first delete ${reached === 'exited' ? `exited (${deleting.exit?.code}) before` : 'did not get'} to ${killAt} rows left: ${deleting.tail(5)}`,
      );
      return r;
    }
    await deleting.kill9();
    const left = rowsIn(db, 'big');
    r.figure('first delete killed after', `${secs(performance.now() - t0)}, ${left} rows left`);

    // The tombstone stands: shown as deleting, refused by ingest and by create.
    const show = await runHookbucket(['--db', db, 'bucket', 'show', 'big', '--json']);
    const shown = show.code === 0 ? (JSON.parse(show.stdout) as { deleting?: boolean; requests?: number }) : undefined;
    if (shown?.deleting !== true)
      r.fail(
        `after the kill, bucket show does not say deleting: exit ${show.code}, ${show.stdout.slice(0, 200)} ${show.stderr.slice(0, 200)}`,
      );
    if (shown && shown.requests !== left) r.fail(`bucket show says ${shown.requests} requests left, the file has ${left}`);
    const late = await fetch(`${serve.url}/b/big`, { method: 'POST', body: 'late', signal: AbortSignal.timeout(10_000) });
    if (late.status !== 404) r.fail(`ingest to the deleting bucket answered ${late.status}, not 404`);
    const early = await runHookbucket(['--db', db, 'bucket', 'create', 'big', '--destination', `${newC.url}/new`]);
    if (early.code !== 1 || !/bucket_deleting/.test(early.stderr))
      r.fail(`bucket create during the delete: exit ${early.code}, ${early.stderr.slice(0, 200)}`);

    // Re-run without --force: it finishes.
    t0 = performance.now();
    const finish = await runHookbucket(['--db', db, 'bucket', 'delete', 'big'], { timeoutMs: 150_000 });
    if (finish.code !== 0) r.fail(`the second delete: exit ${finish.code ?? finish.signal}: ${finish.stderr.slice(0, 300)}`);
    r.figure('second delete', `${secs(performance.now() - t0)}: ${finish.stdout.trim()}`);
    if (rowsIn(db, 'big') !== 0) r.fail(`${rowsIn(db, 'big')} rows of the old bucket left after the delete`);

    // The name again, with a new destination: only new requests may arrive there.
    const created = await runHookbucket(['--db', db, 'bucket', 'create', 'big', '--destination', `${newC.url}/new`]);
    if (created.code !== 0) r.fail(`bucket create after the delete: exit ${created.code}: ${created.stderr.slice(0, 200)}`);
    for (let i = 0; i < NEW_ROWS; i++) {
      const res = await fetch(`${serve.url}/b/big/new/${i}`, {
        method: 'POST',
        body: JSON.stringify({ new: i }),
        signal: AbortSignal.timeout(10_000),
      });
      if (res.status !== 200) r.fail(`new request ${i} answered ${res.status}`);
    }
    try {
      await newC.waitFor(NEW_ROWS, 30_000);
    } catch (e) {
      r.fail(`the recreated bucket's consumer: ${(e as Error).message}`);
    }
    await sleep(2000); // anything else the worker would send arrives well within this
    await load.stop(10_000);
    const oldToNew = newC.received.filter((x) => x.body.toString().includes('"old":') || x.url.startsWith('/new/old/')).length;
    if (oldToNew > 0) r.fail(`${oldToNew} old requests delivered to the new destination`);
    if (oldC.received.length > 0) r.fail(`${oldC.received.length} old requests delivered to the old destination (the bucket was paused)`);
    r.figure('old requests delivered to the new destination', String(oldToNew), '0');
    r.figure('new destination received', `${newC.received.length} (${countByRequestId(newC.received).size} distinct)`, `${NEW_ROWS}`);
    if (countByRequestId(newC.received).size !== NEW_ROWS)
      r.fail(`the new destination got ${countByRequestId(newC.received).size} distinct requests, not ${NEW_ROWS}`);

    checkIngest(r, load, 'ingest to other');
    await checkAcks(r, db, acks, load, ['other']);
    r.duplicates = duplicatesIn(otherC.received);
    const term = await serve.proc.term();
    if (term.code !== 0) r.fail(`SIGTERM: exit ${term.code ?? term.signal}`);
  } finally {
    await deleting?.kill9();
    await load?.stop();
    await serve?.proc.kill9();
    await Promise.all([oldC.close(), newC.close(), otherC.close()]);
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// 29. pause, resume and update, 20 rounds each, under ingest and drain load

async function changesUnderLoad(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const db = join(ctx.tmpDir(), 'changes.db');
  const consumer: Consumer = await startConsumer();
  let serve: ServeHandle | undefined;
  let load: LoadGenerator | undefined;
  try {
    await hookbucket(['--db', db, 'bucket', 'create', 'hot', '--destination', `${consumer.url}/hot`]);
    serve = await startServe({ db });
    const acks = new AckLog();
    load = new LoadGenerator({
      url: serve.url,
      bucket: 'hot',
      connections: 8,
      random: ctx.random,
      ackLog: acks,
      maxBody: 16 * 1024,
      maxRequests: LOAD_BOUND,
    });
    load.start();
    await sleep(1000);
    const runs: Array<{ args: string; run: CliRun }> = [];
    const cmd = async (...args: string[]) => runs.push({ args: args.join(' '), run: await runHookbucket(['--db', db, ...args]) });
    for (let i = 0; i < ROUNDS; i++) {
      if (ctx.signal.aborted) break;
      await cmd('bucket', 'pause', 'hot');
      await cmd('bucket', 'resume', 'hot');
      await cmd('bucket', 'update', 'hot', '--timeout', i % 2 === 0 ? '5s' : '10s');
    }
    await load.stop(10_000);
    const failed = runs.filter((x) => x.run.code !== 0);
    for (const f of failed.slice(0, 5)) r.fail(`${f.args}: exit ${f.run.code ?? f.run.signal}: ${f.run.stderr.slice(0, 200)}`);
    const ms = runs.map((x) => x.run.ms);
    r.figure('commands exiting 0', `${runs.length - failed.length} of ${runs.length}`, `${3 * ROUNDS} of ${3 * ROUNDS}`);
    r.figure('command time p50 / max', `${secs(pct(ms, 0.5))} / ${secs(Math.max(...ms))}`, '≤ 10 s lock wait each');

    // Every acknowledged request is delivered once the bucket runs again: pauses lose nothing.
    const delivered = await until(
      () => {
        const seen = countByRequestId(consumer.received);
        return acks.all().every((a) => seen.has(a.id)) ? true : undefined;
      },
      120_000,
      250,
    );
    if (!delivered) {
      const seen = countByRequestId(consumer.received);
      r.fail(`${acks.all().filter((a) => !seen.has(a.id)).length} of ${acks.size} acknowledged requests not delivered within 120 s`);
    }
    checkIngest(r, load, 'ingest');
    await checkAcks(r, db, acks, load, ['hot']);
    r.duplicates = duplicatesIn(consumer.received);
    const term = await serve.proc.term();
    if (term.code !== 0) r.fail(`SIGTERM: exit ${term.code ?? term.signal}`);
  } finally {
    await load?.stop();
    await serve?.proc.kill9();
    await consumer.close();
  }
  return r;
}

export const cases: ReliabilityCase[] = [
  {
    id: 28,
    title: 'bucket delete of 200,000 requests under ingest load, killed and re-run; the name recreated gets none of them',
    timeoutMs: 4 * 60_000,
    run: deleteUnderLoad,
  },
  {
    id: 29,
    title: 'bucket pause, resume and update, 20 rounds each, under ingest and drain load: all exit 0',
    // From the mechanism, not from a quiet run: 3 × ROUNDS commands one after another, each allowed
    // its 10 s lock wait (the figure's bound), plus a minute for start and stop. 4 min was a quiet
    // machine's margin: at load average ~10 the commands took 4.7 s each (p50) and the case ran out.
    timeoutMs: 3 * ROUNDS * 10_000 + 60_000,
    run: changesUnderLoad,
  },
];

/**
 * Storage faults (issue 5, cases 6–9): a full disk, a write lock held by another process, a
 * second `serve` on the same file, and a long reader while ingest goes on. Every case checks the
 * invariant on the file, and that a 503 never stands for a request that was in fact stored.
 */
import { execFileSync, spawn } from 'node:child_process';
import { closeSync, mkdirSync, openSync, statSync, statfsSync, unlinkSync, writeSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { AckLog } from '../lib/ack-log.js';
import { duplicatesIn, startConsumer } from '../lib/consumer.js';
import { checkInvariant, openForCheck, type InvariantReport } from '../lib/invariant.js';
import { LoadGenerator, sleep, type LoadOptions, type Outcome } from '../lib/load.js';
import { mib, newResult, secs, until } from '../lib/result.js';
import { BIN, holdLock, hookbucket, type HookbucketProcess, runHookbucket, startServe, type ServeHandle } from '../lib/serve-process.js';
import { openTestStore } from '../lib/test-store.js';
import type { CaseContext, CaseResult, ReliabilityCase } from '../lib/types.js';

type Result = ReturnType<typeof newResult>;
type Answered = Extract<Outcome, { kind: 'answered' }>;

function addInvariant(r: Result, inv: InvariantReport, where: string): void {
  if (!inv.ok) r.fail(`${where}: ${inv.problems.join('; ')}`);
}

/** A 503 tells the sender to send again: it must never stand for a request that was stored. */
function refusedButStored(outcomes: readonly Outcome[], seqs: ReadonlyMap<number, string>): number {
  return outcomes.filter((o) => o.kind === 'answered' && o.status >= 300 && seqs.has(o.seq)).length;
}

function pct(xs: number[], p: number): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.min(s.length - 1, Math.max(0, Math.ceil(p * s.length) - 1))]!;
}

async function healthz(url: string): Promise<{ status: number; body: { status?: string; reason?: string; code?: string } }> {
  const res = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(5000) });
  return { status: res.status, body: (await res.json()) as { status?: string; reason?: string; code?: string } };
}

/** Runs a load until `stopWhen` holds or `maxMs` passes, then stops it (in-flight requests get drainMs to finish). */
async function runLoad(load: LoadGenerator, maxMs: number, stopWhen: () => boolean = () => false, drainMs = 5000): Promise<void> {
  load.start();
  const end = performance.now() + maxMs;
  while (performance.now() < end && !stopWhen()) await sleep(20);
  await load.stop(drainMs);
}

function loadOf(ctx: CaseContext, url: string, bucket: string, acks: AckLog, extra: Partial<LoadOptions> = {}): LoadGenerator {
  return new LoadGenerator({ url, bucket, connections: 8, random: ctx.random, ackLog: acks, ...extra });
}

// ---------------------------------------------------------------------------------------------
// 6. disk full

const TMPFS_SIZE = '24m';
/** Left free by the filler: above the floor, so the first refusals are SQLite's own SQLITE_FULL. */
const LEAVE_FREE = 4 * 1024 * 1024; // 4 MiB
const FLOOR = '1MiB';

async function diskFull(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const mnt = join(ctx.tmpDir(), 'tmpfs');
  mkdirSync(mnt);
  try {
    execFileSync('mount', ['-t', 'tmpfs', '-o', `size=${TMPFS_SIZE}`, 'tmpfs', mnt], { stdio: 'pipe' });
  } catch (e) {
    const err = e as { stderr?: Buffer; message: string };
    r.fail(`cannot mount a ${TMPFS_SIZE} tmpfs (this case needs root): ${err.stderr?.toString().trim() || err.message}`);
    return r;
  }
  let serve: ServeHandle | undefined;
  const filler = join(mnt, 'filler');
  try {
    const db = join(mnt, 'full.db');
    await hookbucket(['--db', db, 'bucket', 'create', 'full']);
    serve = await startServe({ db, flags: ['--no-worker', '--min-free-disk', FLOOR] });
    const acks = new AckLog();
    const all: Outcome[] = [];
    const onOutcome = (o: Outcome) => void all.push(o);

    const before = loadOf(ctx, serve.url, 'full', acks, { maxRequests: 20, maxBody: 64 * 1024, onOutcome });
    await runLoad(before, 20_000, () => before.stats.sent >= 20);
    if (before.stats.acked !== 20) r.fail(`before filling: ${before.stats.acked} of 20 acked`);

    // Fill the disk up to LEAVE_FREE, then send large bodies until SQLite itself runs out of room.
    const free0 = freeBytes(mnt);
    const filled = fill(filler, free0 - LEAVE_FREE);
    ctx.log(`tmpfs ${TMPFS_SIZE}: ${mib(free0)} free; filler ${mib(filled)}, leaving ${mib(freeBytes(mnt))}`);
    const full = loadOf(ctx, serve.url, 'full', acks, { maxRequests: 3000, onOutcome, sent: before.sent });
    const fullStart = performance.now();
    await runLoad(full, 10_000, () => (full.stats.byStatus[503] ?? 0) >= 200 && performance.now() - fullStart > 3000);
    const health = await healthz(serve.url);
    const fullOutcomes = all.slice(before.stats.sent);
    const refusals = fullOutcomes.filter((o): o is Answered => o.kind === 'answered' && o.status >= 300);
    const codes: Record<string, number> = {};
    for (const o of refusals) codes[`${o.status} ${o.code ?? '?'}`] = (codes[`${o.status} ${o.code ?? '?'}`] ?? 0) + 1;
    const bad = refusals.filter((o) => o.status !== 503 || (o.code !== 'storage_full' && o.code !== 'storage_error') || !o.retryAfter);
    if (refusals.length === 0) r.fail('the disk never filled: no 503 while full');
    if (bad.length > 0) r.fail(`refusals other than 503 storage_full/storage_error with Retry-After: ${JSON.stringify(codes)}`);
    if (health.status !== 503 || health.body.status !== 'degraded')
      r.fail(`/healthz while full: ${health.status} ${JSON.stringify(health.body)}`);
    const storedWhileFull = fullOutcomes.filter((o) => o.kind === 'answered' && o.status < 300).length;

    // Free the space: ingest must come back by itself, same process.
    unlinkSync(filler);
    const freedAt = performance.now();
    const probe = loadOf(ctx, serve.url, 'full', acks, { connections: 1, maxBody: 4096, onOutcome, sent: before.sent });
    probe.start();
    const ok = await until(() => (probe.stats.acked > 0 ? true : undefined), 30_000, 20);
    const recovered = ok ? performance.now() - freedAt : undefined;
    await probe.stop(5000);
    const healthAfter = await until(
      async () => {
        const h = await healthz(serve!.url);
        return h.status === 200 ? h : undefined;
      },
      10_000,
      100,
    );
    if (recovered === undefined) r.fail('ingest did not recover within 30 s of freeing space');
    if (!healthAfter) r.fail('/healthz still degraded 10 s after ingest recovered');
    if (serve.proc.exit) r.fail(`the receiver exited: ${serve.proc.exit.code ?? serve.proc.exit.signal}`);
    const after = loadOf(ctx, serve.url, 'full', acks, { maxRequests: 100, maxBody: 32 * 1024, onOutcome, sent: before.sent });
    await runLoad(after, 20_000, () => after.stats.sent >= 100);
    if (after.stats.acked !== after.stats.sent) r.fail(`after recovery: ${after.stats.acked} of ${after.stats.sent} acked`);

    const term = await serve.proc.term();
    serve = undefined;
    if (term.code !== 0) r.fail(`SIGTERM: exit ${term.code ?? term.signal}`);
    const seqs = new Map<number, string>();
    const inv = await checkInvariant({ db, acks: acks.all(), sent: before.sent, seqs });
    addInvariant(r, inv, 'after recovery');
    const lying = refusedButStored(all, seqs);
    if (lying > 0) r.fail(`${lying} requests answered 503 were stored`);
    const loads = [before, full, probe, after];
    r.sent = loads.reduce((n, l) => n + l.stats.sent, 0);
    r.acked = acks.size;
    r.verified = inv.verified;
    r.lostAcked = inv.lost.length;
    r.figure('while full: stored (2xx) / refused', `${storedWhileFull} / ${refusals.length}`);
    r.figure(
      'refusals by status and code',
      Object.entries(codes)
        .map(([k, n]) => `${k}: ${n}`)
        .join(', ') || 'none',
    );
    r.figure('/healthz while full', `${health.status} ${health.body.code ?? ''}: ${health.body.reason ?? ''}`.trim());
    r.figure('space freed → first 2xx (no restart)', recovered === undefined ? 'never' : secs(recovered), '≤ 30 s');
    r.figure('unanswered while full (resets)', String(fullOutcomes.filter((o) => o.kind === 'reset').length));
  } finally {
    await serve?.proc.kill9();
    try {
      unlinkSync(filler);
    } catch {
      // already gone
    }
    try {
      execFileSync('umount', [mnt], { stdio: 'pipe' });
    } catch {
      execFileSync('umount', ['-l', mnt], { stdio: 'pipe' });
    }
  }
  return r;
}

function freeBytes(dir: string): number {
  const s = statfsSync(dir);
  return s.bavail * s.bsize;
}

/** Writes up to `bytes` of zeros (stopping early at ENOSPC); returns what was written. */
function fill(path: string, bytes: number): number {
  const fd = openSync(path, 'w');
  const chunk = Buffer.alloc(1024 * 1024);
  let written = 0;
  try {
    while (written < bytes) {
      try {
        written += writeSync(fd, chunk, 0, Math.min(chunk.length, bytes - written));
      } catch (e) {
        if ((e as { code?: string }).code === 'ENOSPC') break;
        throw e;
      }
    }
  } finally {
    closeSync(fd);
  }
  return written;
}

// ---------------------------------------------------------------------------------------------
// 7. another process holds the write lock

const LOCK_HOLD_MS = 10_000; // 10 s
const LOCK_TIMEOUT_MS = 2_000; // serve's --lock-timeout (the default)

export async function writeLockHeld(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const store = await openTestStore(ctx, ctx.tmpDir(), 'lock.db');
  const db = store.db;
  await hookbucket(['--db', db, 'bucket', 'create', 'locked', '--destination', 'http://127.0.0.1:9/never']);
  const serve = await startServe({ db, flags: [...store.serveFlags, '--no-worker', '--lock-timeout', `${LOCK_TIMEOUT_MS}ms`] });
  const acks = new AckLog();
  const load = loadOf(ctx, serve.url, 'locked', acks, { connections: 8, maxBody: 64 * 1024 });
  let holder: HookbucketProcess | undefined;
  try {
    load.start();
    await sleep(1000);
    holder = await store.holdWriteLock(LOCK_HOLD_MS);
    const heldAt = performance.now();
    await Promise.race([holder.exited, sleep(LOCK_HOLD_MS + 10_000)]);
    const releasedAt = performance.now();
    await sleep(1500);
    await load.stop(10_000);
    const term = await serve.proc.term();
    if (term.code !== 0) r.fail(`SIGTERM: exit ${term.code ?? term.signal}`);

    const answered = load.outcomes.filter((o): o is Answered => o.kind === 'answered');
    const latency = (o: Answered) => o.answeredAt - o.sentAt;
    const busy = answered.filter((o) => o.status === 503);
    const during = answered.filter((o) => o.sentAt >= heldAt + 50 && o.sentAt < releasedAt - LOCK_TIMEOUT_MS - 200);
    const duringOk = during.filter((o) => o.status < 300);
    const other = answered.filter((o) => o.status >= 300 && o.status !== 503);
    const busyWrong = busy.filter((o) => o.code !== 'store_busy' || !o.retryAfter);
    const slowAcks = answered.filter((o) => o.status < 300 && latency(o) > LOCK_TIMEOUT_MS + 1000);
    const busyLat = busy.map(latency);
    if (other.length > 0) r.fail(`answers other than 2xx/503: ${[...new Set(other.map((o) => o.status))].join(', ')}`);
    if (busy.length === 0) r.fail('no 503 while the write lock was held');
    if (busyWrong.length > 0) r.fail(`${busyWrong.length} 503s without code store_busy and Retry-After`);
    if (duringOk.length > 0) r.fail(`${duringOk.length} requests sent well inside the lock were acknowledged`);
    if (slowAcks.length > 0)
      r.fail(`${slowAcks.length} acks took longer than the lock timeout + 1 s (max ${secs(Math.max(...slowAcks.map(latency)))})`);
    if (busyLat.some((ms) => ms < LOCK_TIMEOUT_MS - 100 || ms > LOCK_TIMEOUT_MS + 1500)) {
      r.fail(
        `503 store_busy answered after ${secs(Math.min(...busyLat))}–${secs(Math.max(...busyLat))}, not about ${secs(LOCK_TIMEOUT_MS)}`,
      );
    }
    const afterRelease = answered.filter((o) => o.sentAt > releasedAt + 100);
    if (afterRelease.length === 0 || afterRelease.some((o) => o.status >= 300))
      r.fail('ingest did not answer 2xx again after the lock was released');
    const seqs = new Map<number, string>();
    const inv = await store.check({ acks: acks.all(), sent: load.sent, seqs, expectDeliveries: true });
    addInvariant(r, inv, 'after the lock');
    const lying = refusedButStored(load.outcomes, seqs);
    if (lying > 0) r.fail(`${lying} requests answered 503 were stored`);
    r.sent = load.stats.sent;
    r.acked = load.stats.acked;
    r.verified = inv.verified;
    r.lostAcked = inv.lost.length;
    r.figure('lock held', secs(releasedAt - heldAt), `${secs(LOCK_HOLD_MS)}`);
    r.figure(
      '503 store_busy',
      `${busy.length}, answered after p50 ${secs(pct(busyLat, 0.5))}, max ${secs(Math.max(...busyLat))}`,
      `about ${secs(LOCK_TIMEOUT_MS)} (--lock-timeout)`,
    );
    r.figure(
      'ack latency p99 / max (whole run)',
      `${secs(pct(answered.filter((o) => o.status < 300).map(latency), 0.99))} / ${secs(Math.max(...answered.filter((o) => o.status < 300).map(latency)))}`,
      `≤ ${secs(LOCK_TIMEOUT_MS + 1000)}`,
    );
    r.figure('500 answers', String(load.stats.byStatus[500] ?? 0), '0');
    r.figure('resets', String(load.stats.resets));
  } finally {
    await holder?.kill9();
    await serve.proc.kill9();
    await load.stop();
    await store.dispose();
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// 8. a second serve on the same database

async function secondServe(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const db = join(ctx.tmpDir(), 'shared.db');
  // Tracks how many attempts of one request are at the consumer at once (must never pass 1).
  const inflight = new Map<string, number>();
  let overlaps = 0;
  const consumer = await startConsumer((req, res) => {
    const id = String(req.headers['x-hookbucket-request-id']);
    const n = (inflight.get(id) ?? 0) + 1;
    inflight.set(id, n);
    if (n > 1) overlaps++;
    setTimeout(
      () => {
        inflight.set(id, (inflight.get(id) ?? 1) - 1);
        res.writeHead(200).end('ok');
      },
      5 + Math.floor(Math.random() * 25),
    );
  });
  await hookbucket(['--db', db, 'bucket', 'create', 'shared', '--destination', `${consumer.url}/hook`, '--timeout', '5s']);
  let a: ServeHandle | undefined;
  let b: ServeHandle | undefined;
  try {
    a = await startServe({ db });
    await a.proc.waitForLog(/^drain worker active$/, 10_000);
    b = await startServe({ db });
    const standby = await b.proc.waitForLog(/^drain worker standing by/, 10_000);
    const standbyMsg = String(standby.msg);
    if (!standbyMsg.includes(`pid ${a.proc.pid} `)) r.fail(`B's standby message does not name A (pid ${a.proc.pid}): ${standbyMsg}`);
    ctx.log(`A pid ${a.proc.pid} active; B pid ${b.proc.pid}: ${standbyMsg.slice(0, 90)}…`);

    // A third worker refuses, naming the holder.
    const third = await runHookbucket(['--db', db, 'worker'], { timeoutMs: 20_000 });
    if (third.code !== 1 || !/worker_active/.test(third.stderr) || !third.stderr.includes(`pid ${a.proc.pid} `)) {
      r.fail(`a third worker: exit ${third.code ?? third.signal}, ${third.stderr.slice(0, 200)}`);
    }

    // Both receivers store, at once.
    const acks = new AckLog();
    const la = loadOf(ctx, a.url, 'shared', acks, { connections: 10, maxBody: 64 * 1024 });
    const lb = loadOf(ctx, b.url, 'shared', acks, { connections: 10, maxBody: 64 * 1024, sent: la.sent });
    la.start();
    lb.start();
    await sleep(3000);
    await Promise.all([la.stop(5000), lb.stop(5000)]);
    const delivered = await until(() => (countDelivered(db) >= acks.size ? true : undefined), 60_000, 200);
    if (!delivered) r.fail(`only ${countDelivered(db)} of ${acks.size} delivered within 60 s`);
    const lease = leaseRows(db);
    if (lease.length !== 1 || !lease[0]!.info.includes(`"pid":${a.proc.pid}`)) r.fail(`worker_lease: ${JSON.stringify(lease)}`);
    if (b.proc.logs.some((l) => /drain worker (active|took over)/.test(String(l.msg)))) r.fail('B became active while A held the lease');
    const firstRound = acks.size;
    const leasePid = /"pid":(\d+)/.exec(lease[0]?.info ?? '')?.[1];
    const aPid = a.proc.pid;

    // A dies: B's worker takes over when A's lease lapses (15 s), and delivers what B receives.
    await a.proc.kill9();
    const killedAt = performance.now();
    a = undefined;
    const lc = loadOf(ctx, b.url, 'shared', acks, { connections: 4, maxRequests: 50, maxBody: 16 * 1024, sent: la.sent });
    await runLoad(lc, 20_000, () => lc.stats.sent >= 50);
    await b.proc.waitForLog(/took over the lease: active/, 30_000);
    const tookOver = performance.now() - killedAt;
    const all = await until(() => (countDelivered(db) >= acks.size ? true : undefined), 60_000, 200);
    if (!all) r.fail(`after the takeover only ${countDelivered(db)} of ${acks.size} delivered within 60 s`);
    const term = await b.proc.term();
    b = undefined;
    if (term.code !== 0) r.fail(`B on SIGTERM: exit ${term.code ?? term.signal}`);

    const attempts = attemptsPerDelivery(db);
    const inv = await checkInvariant({ db, acks: acks.all(), sent: la.sent, expectDeliveries: true });
    addInvariant(r, inv, 'at the end');
    const dups = duplicatesIn(consumer.received);
    if (overlaps > 0) r.fail(`${overlaps} times the consumer had two attempts of one request at once`);
    if (dups > 0) r.fail(`${dups} requests delivered twice with no crash in flight`);
    if (attempts.max > 1) r.fail(`a delivery has ${attempts.max} attempts against a consumer that always answers 200`);
    r.sent = la.stats.sent + lb.stats.sent + lc.stats.sent;
    r.acked = acks.size;
    r.verified = inv.verified;
    r.lostAcked = inv.lost.length;
    r.duplicates = dups;
    r.figure('acked through A / through B', `${la.stats.acked} / ${lb.stats.acked + lc.stats.acked}`);
    r.figure('delivered with A active', `${firstRound}, each once`);
    r.figure('worker_lease rows while A ran', `${lease.length} (holder pid ${leasePid ?? '?'}, A is pid ${aPid})`, '1, A');
    r.figure('concurrent attempts of one request', String(overlaps), '0');
    r.figure('A killed → B active', secs(tookOver), '≤ 30 s (worker lease 15 s)');
  } finally {
    await a?.proc.kill9();
    await b?.proc.kill9();
    await consumer.close();
  }
  return r;
}

function countDelivered(db: string): number {
  const c = openForCheck(db);
  try {
    return c.prepare(`select count(*) from deliveries where state = 'delivered'`).pluck().get() as number;
  } finally {
    c.close();
  }
}

function leaseRows(db: string): Array<{ holder: string; info: string }> {
  const c = openForCheck(db);
  try {
    return c.prepare('select holder, info from worker_lease').all() as Array<{ holder: string; info: string }>;
  } finally {
    c.close();
  }
}

function attemptsPerDelivery(db: string): { max: number } {
  const c = openForCheck(db);
  try {
    return {
      max:
        (c.prepare('select coalesce(max(n), 0) from (select count(*) as n from attempts group by delivery_id)').pluck().get() as number) ??
        0,
    };
  } finally {
    c.close();
  }
}

// ---------------------------------------------------------------------------------------------
// 9. a long reader during ingest

/** SQLite truncates a WAL larger than this when it restarts it (src/store/sqlite/open.ts). */
const JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024; // 64 MiB
/**
 * The WAL with no long reader: the limit, plus what lands between two catch-up checkpoints
 * (100 ms of ingest) and a missed one or two: generous, it catches unbounded growth.
 */
const WAL_BOUND = JOURNAL_SIZE_LIMIT + 64 * 1024 * 1024; // 128 MiB
const READ_HOLD_MS = 10_000; // 10 s
/** The bucket the export reads: about this many bytes of bodies (or 10 s of ingest). */
const FILL_BYTES = 150 * 1024 * 1024; // 150 MiB
/** The export is read at this pace, so it lasts long enough to matter (about 10 s here). */
const EXPORT_READ_BYTES_PER_S = 48 * 1024 * 1024; // 48 MiB/s

class WalSampler {
  readonly #path: string;
  readonly #timer: NodeJS.Timeout;
  #peak = 0;
  last = 0;
  constructor(db: string) {
    this.#path = `${db}-wal`;
    this.#timer = setInterval(() => this.sample(), 25);
  }
  sample(): number {
    try {
      this.last = statSync(this.#path).size;
    } catch {
      this.last = 0;
    }
    if (this.last > this.#peak) this.#peak = this.last;
    return this.last;
  }
  /** The peak since the last call. */
  takePeak(): number {
    const p = Math.max(this.#peak, this.sample());
    this.#peak = 0;
    return p;
  }
  stop(): void {
    clearInterval(this.#timer);
  }
}

async function longReader(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const db = join(ctx.tmpDir(), 'reader.db');
  await hookbucket(['--db', db, 'bucket', 'create', 'big']);
  const serve = await startServe({ db, flags: ['--no-worker'] });
  const wal = new WalSampler(db);
  const acks = new AckLog();
  const loads: LoadGenerator[] = [];
  const newLoad = (connections: number) => {
    const l = loadOf(ctx, serve.url, 'big', acks, { connections, ...(loads[0] ? { sent: loads[0].sent } : {}) });
    loads.push(l);
    return l;
  };
  let holder: HookbucketProcess | undefined;
  let ingest: LoadGenerator | undefined;
  try {
    // A large bucket to export: about 6 s of ingest.
    const fillLoad = newLoad(20);
    await runLoad(fillLoad, 10_000, () => ingestedBytes(acks, 0) >= FILL_BYTES);
    const bucketBytes = fileBytes(db) + wal.sample();
    ctx.log(`bucket filled: ${fillLoad.stats.acked} requests, database ${mib(bucketBytes)}`);
    await sleep(1500);
    const quietBefore = wal.sample();

    // Baseline: the same ingest with no reader.
    ingest = newLoad(6);
    ingest.start();
    wal.takePeak();
    await sleep(4000);
    const baselinePeak = wal.takePeak();
    const rate0 = acks.size;

    // An export of the whole bucket, read slowly, while ingest goes on.
    const exportStart = performance.now();
    const exported = await slowExport(db, 'big', EXPORT_READ_BYTES_PER_S, 120_000);
    const exportMs = performance.now() - exportStart;
    const exportPeak = wal.takePeak();
    if (exported.code !== 0) r.fail(`export exit ${exported.code}: ${exported.stderr.slice(0, 200)}`);
    if (exported.lines < fillLoad.stats.acked) r.fail(`export wrote ${exported.lines} lines for ${fillLoad.stats.acked}+ requests`);
    ctx.log(`export: ${exported.lines} requests, ${mib(exported.bytes)} in ${secs(exportMs)}; WAL peak ${mib(exportPeak)}`);

    // A reader that holds one snapshot for 10 s (another tool's long transaction).
    const heldFrom = acks.size;
    const bytesAt = ingestedBytes(acks, heldFrom);
    holder = await holdLock(db, 'read', READ_HOLD_MS);
    await holder.exited;
    holder = undefined;
    const releasedAt = performance.now();
    const heldPeak = wal.takePeak();
    const writtenWhileHeld = ingestedBytes(acks, heldFrom) - bytesAt;
    // After the reader: under the same ingest, the WAL goes back under the journal size limit.
    const shrunk = await until(() => (wal.sample() <= JOURNAL_SIZE_LIMIT ? performance.now() : undefined), 15_000, 25);
    const underLoad = wal.sample();
    wal.takePeak();
    await sleep(2000);
    const afterPeak = wal.takePeak();
    await ingest.stop(5000);
    ingest = undefined;
    // Quiet: the checkpointer truncates it to nothing after 1 s without writes.
    const emptied = await until(() => (wal.sample() === 0 ? true : undefined), 10_000, 50);
    const ingestRate = acks.size - rate0;

    if (baselinePeak > WAL_BOUND) r.fail(`the WAL grew to ${mib(baselinePeak)} under ingest with no reader`);
    if (exportPeak > WAL_BOUND) {
      r.fail(`the WAL grew to ${mib(exportPeak)} during the export (no reader: ${mib(baselinePeak)})`);
    }
    if (heldPeak > writtenWhileHeld * 2 + JOURNAL_SIZE_LIMIT)
      r.fail(`the WAL grew to ${mib(heldPeak)} while ${mib(writtenWhileHeld)} was ingested`);
    if (shrunk === undefined)
      r.fail(`the WAL stayed over ${mib(JOURNAL_SIZE_LIMIT)} for 15 s after the reader ended (${mib(wal.sample())})`);
    if (afterPeak > WAL_BOUND) r.fail(`after the reader, the WAL peaked at ${mib(afterPeak)} under load`);
    if (!emptied) r.fail(`the WAL was still ${mib(wal.sample())} 10 s after ingest stopped`);
    const term = await serve.proc.term();
    if (term.code !== 0) r.fail(`SIGTERM: exit ${term.code ?? term.signal}`);
    const inv = await checkInvariant({ db, acks: acks.all(), sent: loads[0]!.sent });
    addInvariant(r, inv, 'at the end');
    r.sent = loads.reduce((n, l) => n + l.stats.sent, 0);
    r.acked = acks.size;
    r.verified = inv.verified;
    r.lostAcked = inv.lost.length;
    r.figure(
      'bucket exported',
      `${exported.lines} requests, ${mib(bucketBytes)} database, ${secs(exportMs)} at ${mib(EXPORT_READ_BYTES_PER_S)}/s`,
    );
    r.figure('WAL peak, ingest with no reader', mib(baselinePeak), `≤ ${mib(WAL_BOUND)}`);
    r.figure('WAL peak during the export', mib(exportPeak), `≤ ${mib(WAL_BOUND)}`);
    r.figure(
      'WAL peak with a 10 s read snapshot held',
      `${mib(heldPeak)} (${mib(writtenWhileHeld)} of bodies ingested meanwhile)`,
      `≤ 2× ingested + ${mib(JOURNAL_SIZE_LIMIT)}`,
    );
    r.figure('reader ended → WAL ≤ 64 MiB, under load', shrunk === undefined ? 'never' : secs(shrunk - releasedAt), '≤ 15 s');
    r.figure('WAL under load after the reader: now / peak over 2 s', `${mib(underLoad)} / ${mib(afterPeak)}`, `≤ ${mib(WAL_BOUND)}`);
    r.figure('WAL after ingest stopped', emptied ? '0 (truncated)' : mib(wal.sample()), '0 within 10 s');
    r.figure('WAL before the run, quiet', mib(quietBefore));
    r.figure('requests ingested during the reader phases', String(ingestRate));
    const refused: Record<string, number> = {};
    for (const l of loads) {
      for (const [k, n] of Object.entries(l.stats.byCode)) refused[k] = (refused[k] ?? 0) + n;
      if (l.stats.resets > 0) refused.reset = (refused.reset ?? 0) + l.stats.resets;
    }
    r.figure(
      'answers other than 2xx',
      Object.entries(refused)
        .map(([k, n]) => `${k}: ${n}`)
        .join(', ') || 'none',
    );
  } finally {
    wal.stop();
    await holder?.kill9();
    await ingest?.stop();
    await serve.proc.kill9();
  }
  return r;
}

function fileBytes(path: string): number {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
}

function ingestedBytes(acks: AckLog, from: number): number {
  let n = 0;
  for (const a of acks.since(from)) n += a.size;
  return n;
}

/** `hookbucket requests export <bucket>` to a pipe read at `bytesPerS`; counts lines and bytes. */
function slowExport(
  db: string,
  bucket: string,
  bytesPerS: number,
  timeoutMs: number,
): Promise<{ code: number | null; lines: number; bytes: number; stderr: string }> {
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [BIN, '--db', db, 'requests', 'export', bucket], { stdio: ['ignore', 'pipe', 'pipe'] });
    let lines = 0;
    let bytes = 0;
    let stderr = '';
    const started = performance.now();
    const killer = setTimeout(() => child.kill('SIGKILL'), timeoutMs);
    child.stderr.setEncoding('utf8').on('data', (d: string) => (stderr += d));
    child.stdout.on('data', (d: Buffer) => {
      bytes += d.length;
      for (let i = d.indexOf(10); i !== -1; i = d.indexOf(10, i + 1)) lines++;
      // Pause until the reading pace catches up with what has been read.
      const due = (bytes / bytesPerS) * 1000 - (performance.now() - started);
      if (due > 5) {
        child.stdout.pause();
        setTimeout(() => child.stdout.resume(), due);
      }
    });
    child.on('close', (code) => {
      clearTimeout(killer);
      resolve({ code, lines, bytes, stderr });
    });
  });
}

export const cases: ReliabilityCase[] = [
  { id: 6, title: 'disk full on a small tmpfs, then freed', timeoutMs: 3 * 60_000, run: diskFull },
  { id: 7, title: 'another process holds the write lock for 10 s', timeoutMs: 2 * 60_000, run: writeLockHeld },
  { id: 8, title: 'a second serve on the same database', timeoutMs: 3 * 60_000, run: secondServe },
  { id: 9, title: 'a long reader during ingest: the WAL stays bounded', timeoutMs: 4 * 60_000, run: longReader },
];

/**
 * Process crashes (issue 5, cases 1–5): the receiver killed with -9 under load, SIGTERM under
 * load, the drain worker killed mid-forward and right after a consumer's 2xx, and a lease that
 * cannot cover a bucket's timeout refused at start. Every case checks the invariant on the file.
 */
import { connect } from 'node:net';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { AckLog } from '../lib/ack-log.js';
import { countByRequestId, duplicatesIn, startConsumer, type Consumer } from '../lib/consumer.js';
import { checkInvariant, openForCheck, type InvariantReport } from '../lib/invariant.js';
import { framedBody, LoadGenerator, sleep, type Outcome } from '../lib/load.js';
import { mib, newResult, secs, until } from '../lib/result.js';
import { openTestStore } from '../lib/test-store.js';
import {
  freePort,
  hookbucket,
  HookbucketProcess,
  runHookbucket,
  startServe,
  startWorkerProcess,
  type ServeHandle,
} from '../lib/serve-process.js';
import { randomInt } from '../lib/seed.js';
import type { CaseContext, CaseResult, ReliabilityCase } from '../lib/types.js';

/** Restart (kill to listening again) must stay under this, or the case fails. */
const RESTART_BOUND_MS = 10_000; // 10 s
const KILL_ROUNDS = 20;

type Result = ReturnType<typeof newResult>;

function addInvariant(r: Result, inv: InvariantReport, where: string): void {
  if (!inv.ok) r.fail(`${where}: ${inv.problems.join('; ')}`);
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[Math.floor((s.length - 1) / 2)]!;
}

/** Statuses a receiver may answer under these faults: 2xx (stored) or 503 (not stored, retry). */
function unexpectedStatuses(byStatus: Record<number, number>): string[] {
  return Object.entries(byStatus)
    .filter(([s]) => Number(s) !== 503)
    .map(([s, n]) => `${n}× ${s}`);
}

// ---------------------------------------------------------------------------------------------
// 1. kill -9 under load

export async function killUnderLoad(ctx: CaseContext, rounds = KILL_ROUNDS): Promise<CaseResult> {
  const r = newResult();
  const dir = ctx.tmpDir();
  const store = await openTestStore(ctx, dir, 'crash.db');
  const db = store.db;
  const serveFlags = [...store.serveFlags, '--no-worker'];
  // A destination, so every request also writes its first delivery in the same commit (the worker
  // is off, so nothing is forwarded): a request without its delivery would be a half-written commit.
  await hookbucket(['--db', db, 'bucket', 'create', 'crash', '--destination', 'http://127.0.0.1:9/never']);
  const port = await freePort();
  const acks = new AckLog(join(dir, 'acks.ndjson'));
  const load = new LoadGenerator({ url: `http://127.0.0.1:${port}`, bucket: 'crash', connections: 20, random: ctx.random, ackLog: acks });
  const scanned = new Set<string>();
  const seqs = new Map<number, string>();
  const restarts: number[] = [];
  const checks: number[] = [];
  let checkedUpTo = 0;
  let unansweredStored = 0;
  let unansweredAbsent = 0;
  let afterAckKills = 0;
  let serve: ServeHandle | undefined;

  /** Checks what the last round acked (bodies re-hashed) and that earlier acks are still there. */
  const check = async (where: string, full: boolean) => {
    const fresh = acks.since(checkedUpTo);
    const inv = await store.check({
      acks: full ? acks.all() : fresh,
      stillPresent: full ? [] : acks.all().slice(0, checkedUpTo),
      sent: load.sent,
      buckets: ['crash'],
      scanned,
      seqs,
      expectDeliveries: true,
    });
    checks.push(inv.ms);
    checkedUpTo = acks.size;
    addInvariant(r, inv, where);
    return inv;
  };

  try {
    serve = await startServe({ db, port, flags: serveFlags });
    ctx.log(`receiver (${store.dialect}) up in ${secs(serve.startMs)}; ${rounds} kill rounds, 20 connections, bodies 0–256 KiB`);
    for (let round = 1; round <= rounds && !ctx.signal.aborted; round++) {
      const before = load.outcomes.length;
      load.start();
      // Half the kills land at a random time; half follow an ack by 0–2 ms, when the next group
      // commit (insert + fsync on the writer thread) is most likely under way.
      const afterAck = round % 2 === 0;
      if (afterAck) {
        const target = acks.size + randomInt(ctx.random, 20, 400);
        await until(() => (acks.size >= target ? true : undefined), 5000, 1);
        await sleep(randomInt(ctx.random, 0, 2));
        afterAckKills++;
      } else {
        await sleep(randomInt(ctx.random, 200, 2500));
      }
      const inflight = load.inflight;
      const killedAt = performance.now();
      await serve.proc.kill9();
      await load.stop();
      const resets = load.outcomes.slice(before).filter((o): o is Extract<Outcome, { kind: 'reset' }> => o.kind === 'reset');
      serve = await startServe({ db, port, flags: serveFlags });
      const restartMs = performance.now() - killedAt;
      restarts.push(restartMs);
      if (restartMs > RESTART_BOUND_MS) r.fail(`round ${round}: restart took ${secs(restartMs)}`);
      const inv = await check(`after kill ${round}`, false);
      // Requests cut off by the kill: stored (committed, ack not yet sent) or absent; never partial.
      for (const o of resets) {
        if (seqs.has(o.seq)) unansweredStored++;
        else unansweredAbsent++;
      }
      ctx.log(
        `kill ${String(round).padStart(2)} ${afterAck ? 'after an ack' : 'at random  '}: ${inflight} in flight, ${resets.length} cut off ` +
          `(${resets.filter((o) => seqs.has(o.seq)).length} committed before the kill); restart ${secs(restartMs)}; ` +
          `${acks.size} acked so far, check ${inv.ok ? 'ok' : 'FAILED'} (${secs(inv.ms)})`,
      );
    }
    // Two kills during start-up (opening, migrating, spawning the writer thread).
    for (const delay of [randomInt(ctx.random, 5, 60), randomInt(ctx.random, 60, 200)]) {
      await serve.proc.kill9();
      const p = new HookbucketProcess([
        '--db',
        db,
        'serve',
        '--host',
        '127.0.0.1',
        '--port',
        String(port),
        '--admin-port',
        '0',
        '--min-free-disk',
        '0',
        ...serveFlags,
      ]);
      await sleep(delay);
      await p.kill9();
      serve = await startServe({ db, port, flags: serveFlags });
      ctx.log(`killed a start-up after ${delay} ms; restarted in ${secs(serve.startMs)}`);
    }
    const final = await check('final check (every acked body re-hashed)', true);
    const term = await serve.proc.term();
    serve = undefined;
    if (term.code !== 0) r.fail(`final SIGTERM: exit ${term.code ?? term.signal}`);
    r.verified = final.verified;
    r.lostAcked = final.lost.length;
  } finally {
    await serve?.proc.kill9();
    await load.stop();
  }
  const dbBytes = await store.sizeBytes();
  await store.dispose();
  const s = load.stats;
  r.sent = s.sent;
  r.acked = s.acked;
  const odd = unexpectedStatuses(s.byStatus);
  if (odd.length > 0) r.fail(`answers other than 2xx/503: ${odd.join(', ')}`);
  if (acks.duplicateIds > 0) r.fail(`${acks.duplicateIds} ids acknowledged twice`);
  r.figure('kills under load', `${restarts.length} (${afterAckKills} right after an ack)`, `≥ ${rounds}`);
  r.figure(
    'restart time (kill → listening) median / max',
    `${secs(median(restarts))} / ${secs(Math.max(...restarts))}`,
    `≤ ${secs(RESTART_BOUND_MS)}`,
  );
  r.figure('requests cut off by a kill: committed / not stored', `${unansweredStored} / ${unansweredAbsent}`);
  r.figure('503 answers', String(s.byStatus[503] ?? 0));
  r.figure('invariant check time median / max', `${secs(median(checks))} / ${secs(Math.max(...checks))}`);
  r.figure('database size', mib(dbBytes));
  return r;
}

// ---------------------------------------------------------------------------------------------
// 2. SIGTERM under load

/** Clients that drip a body slower than the shutdown grace (10 s), so SIGTERM finds them mid-body. */
const DRIP_KIB = [64, 32, 8];

export async function sigtermUnderLoad(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const dir = ctx.tmpDir();
  const store = await openTestStore(ctx, dir, 'term.db');
  const db = store.db;
  await hookbucket(['--db', db, 'bucket', 'create', 'term', '--destination', 'http://127.0.0.1:9/never']);
  const acks = new AckLog(join(dir, 'acks.ndjson'));
  const serve = await startServe({ db, flags: [...store.serveFlags, '--no-worker'] });
  const url = new URL(serve.url);
  const load = new LoadGenerator({ url: serve.url, bucket: 'term', connections: 20, random: ctx.random, ackLog: acks });
  const drips: Array<Promise<{ seq: number; size: number; status: number | 'reset' }>> = [];
  let termAt = Infinity;
  const dripAbort = new AbortController();
  try {
    load.start();
    // Slow clients: headers at once, then 1 KiB every 200 ms: 64 KiB takes about 13 s (past the
    // 10 s grace), 32 KiB about 6.5 s and 8 KiB under 2 s (both within it).
    for (const kib of DRIP_KIB) {
      const b = load.build(kib * 1024);
      const bytes = Buffer.concat([b.head, framedBody(b)]);
      drips.push(drip(url, bytes, b.head.length, dripAbort.signal).then((status) => ({ seq: b.meta.seq, size: b.meta.size, status })));
    }
    await sleep(randomInt(ctx.random, 800, 2000));
    const inflightAtTerm = load.inflight;
    termAt = performance.now();
    const term = serve.proc.term(30_000);
    // Accepting stops: fresh connections are refused once the listener closes.
    const probe = probeAccepting(url, termAt, serve.proc);
    const exit = await term;
    const probed = await probe;
    await load.stop();
    dripAbort.abort();
    const dripResults = await Promise.all(drips);

    const afterTerm = load.outcomes.filter((o) => o.sentAt >= termAt);
    const inflight = load.outcomes.filter((o) => o.sentAt < termAt && (o.kind === 'reset' ? o.at >= termAt : o.answeredAt >= termAt));
    const resets = load.outcomes.filter((o): o is Extract<Outcome, { kind: 'reset' }> => o.kind === 'reset');
    const no503RetryAfter = load.outcomes.filter((o) => o.kind === 'answered' && o.status === 503 && !o.retryAfter).length;
    if (exit.code !== 0 || exit.forced) r.fail(`SIGTERM: exit ${exit.code ?? exit.signal}${exit.forced ? ' (killed after 30 s)' : ''}`);
    if (probed.acceptedAfterRefusal > 0) r.fail(`${probed.acceptedAfterRefusal} connection(s) accepted after the listener had refused one`);
    if (no503RetryAfter > 0) r.fail(`${no503RetryAfter} 503 answers without Retry-After`);
    const odd = unexpectedStatuses(load.stats.byStatus);
    if (odd.length > 0) r.fail(`answers other than 2xx/503: ${odd.join(', ')}`);

    const seqs = new Map<number, string>();
    const inv = await store.check({ acks: acks.all(), sent: load.sent, buckets: ['term'], seqs, expectDeliveries: true });
    addInvariant(r, inv, 'after SIGTERM');
    // A reset is allowed only when nothing of that request is half-stored: it is absent or whole
    // (the invariant compared every stored row carrying a seq with what was sent).
    const resetStored = resets.filter((o) => seqs.has(o.seq)).length;
    for (const d of dripResults) {
      if (d.status !== 'reset' && d.status !== 503 && !(d.status >= 200 && d.status < 300)) r.fail(`a slow client got ${d.status}`);
      if (d.status === 'reset' && seqs.has(d.seq)) r.note(`slow client seq ${d.seq}: reset but stored whole`);
    }
    r.sent = load.stats.sent;
    r.acked = load.stats.acked;
    r.verified = inv.verified;
    r.lostAcked = inv.lost.length;
    r.figure('in flight at SIGTERM', `${inflightAtTerm} requests + ${DRIP_KIB.length} slow bodies`);
    r.figure(
      'requests in flight at SIGTERM: 2xx / 503 / reset (of which stored whole)',
      `${inflight.filter((o) => o.kind === 'answered' && o.status < 300).length} / ${inflight.filter((o) => o.kind === 'answered' && o.status === 503).length} / ` +
        `${inflight.filter((o) => o.kind === 'reset').length} (${inflight.filter((o) => o.kind === 'reset' && seqs.has(o.seq)).length})`,
    );
    r.figure(
      'requests started after SIGTERM on open connections',
      `${afterTerm.length} (${afterTerm.filter((o) => o.kind === 'answered').length} answered)`,
    );
    r.figure(
      'slow bodies at 1 KiB per 200 ms (grace 10 s)',
      dripResults
        .map(
          (d) =>
            `${(d.size / 1024).toFixed(0)} KiB: ${d.status === 'reset' ? 'reset at the grace' : d.status}${seqs.has(d.seq) ? ' stored' : ''}`,
        )
        .join(', '),
    );
    r.figure('SIGTERM → first refused connection', probed.firstRefusedMs === undefined ? 'exited first' : secs(probed.firstRefusedMs));
    r.figure('SIGTERM → exit', secs(exit.ms), '≤ 30 s');
    r.figure('resets in all (stored whole / absent)', `${resets.length} (${resetStored} / ${resets.length - resetStored})`);
  } finally {
    dripAbort.abort();
    await serve.proc.kill9();
    await load.stop();
    await store.dispose();
  }
  return r;
}

/** Sends the head at once, then the rest 1 KiB every 200 ms; the answer's status, or 'reset'. */
function drip(url: URL, bytes: Buffer, headLength: number, signal: AbortSignal): Promise<number | 'reset'> {
  return new Promise((resolve) => {
    const s = connect(Number(url.port), url.hostname);
    let got = Buffer.alloc(0);
    let off = 0;
    let timer: NodeJS.Timeout | undefined;
    const done = (v: number | 'reset') => {
      clearInterval(timer);
      s.destroy();
      resolve(v);
    };
    signal.addEventListener('abort', () => done('reset'), { once: true });
    s.on('error', () => done('reset'));
    s.on('close', () => done(statusOf(got) ?? 'reset'));
    s.on('data', (d: Buffer) => {
      got = Buffer.concat([got, d]);
      const st = statusOf(got);
      if (st !== undefined && st >= 200) done(st);
    });
    s.on('connect', () => {
      s.write(bytes.subarray(0, headLength));
      off = headLength;
      timer = setInterval(() => {
        if (off >= bytes.length || s.destroyed) return clearInterval(timer);
        s.write(bytes.subarray(off, off + 1024));
        off += 1024;
      }, 200);
    });
  });
}

function statusOf(b: Buffer): number | undefined {
  const m = /^HTTP\/1\.1 (\d{3})/.exec(b.subarray(0, 16).toString('latin1'));
  return m ? Number(m[1]) : undefined;
}

/** Connects every 20 ms from SIGTERM until the process exits: when was one first refused, and was one accepted after that? */
async function probeAccepting(
  url: URL,
  termAt: number,
  proc: HookbucketProcess,
): Promise<{ firstRefusedMs?: number; acceptedAfterRefusal: number }> {
  let firstRefusedMs: number | undefined;
  let acceptedAfterRefusal = 0;
  while (!proc.exit && performance.now() - termAt < 30_000) {
    const ok = await new Promise<boolean>((resolve) => {
      const s = connect(Number(url.port), url.hostname);
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(false));
    });
    if (!ok && firstRefusedMs === undefined) firstRefusedMs = performance.now() - termAt;
    if (ok && firstRefusedMs !== undefined && !proc.exit) acceptedAfterRefusal++;
    await sleep(20);
  }
  return firstRefusedMs === undefined ? { acceptedAfterRefusal } : { firstRefusedMs, acceptedAfterRefusal };
}

// ---------------------------------------------------------------------------------------------
// 3 and 4: the drain worker killed mid-forward, and right after the consumer's 2xx

interface AttemptRow {
  delivery_id: string;
  request_id: string;
  number: number;
  outcome: string | null;
  error_class: string | null;
  status: number | null;
}

function deliveryRows(db: string): { states: Map<string, string>; attempts: AttemptRow[] } {
  const c = openForCheck(db);
  try {
    const states = new Map(
      (c.prepare('select request_id, state from deliveries').all() as Array<{ request_id: string; state: string }>).map((d) => [
        d.request_id,
        d.state,
      ]),
    );
    const attempts = c
      .prepare('select delivery_id, request_id, number, outcome, error_class, status from attempts order by request_id, number')
      .all() as AttemptRow[];
    return { states, attempts };
  } finally {
    c.close();
  }
}

/** Ingests n requests through a `serve --no-worker` and returns their acks. */
async function ingest(ctx: CaseContext, url: string, bucket: string, n: number, acks: AckLog): Promise<LoadGenerator> {
  const load = new LoadGenerator({
    url,
    bucket,
    connections: Math.min(n, 5),
    random: ctx.random,
    ackLog: acks,
    maxRequests: n,
    maxBody: 64 * 1024,
  });
  load.start();
  await until(() => (load.stats.sent >= n && load.inflight === 0 ? true : undefined), 20_000);
  await load.stop();
  return load;
}

/**
 * After a worker died (cases 3 and 4): starts a normal standby worker, waits until every delivery
 * is delivered, stops it, and checks that each acked request reached the consumer, that the
 * `inFlight` attempts the dead worker left were closed as lease_expired, and the invariant.
 */
async function recoverDeliveries(
  r: ReturnType<typeof newResult>,
  o: { db: string; acks: AckLog; load: LoadGenerator; consumer: Consumer; inFlight: number; what: string },
): Promise<{ expired: AttemptRow[]; open: number; seen: Map<string, number> }> {
  const { db, acks, load, consumer } = o;
  const worker = await startWorkerProcess({ db, flags: ['--lease', '2s', '--standby'] });
  let settled: ReturnType<typeof deliveryRows> | undefined;
  try {
    settled = await until(
      () => {
        const d = deliveryRows(db);
        return [...d.states.values()].every((s) => s === 'delivered') && d.states.size === WORKER_REQUESTS ? d : undefined;
      },
      60_000,
      200,
    );
  } finally {
    const term = await worker.term();
    if (term.code !== 0) r.fail(`recovering worker: exit ${term.code ?? term.signal} on SIGTERM`);
  }
  const final = deliveryRows(db);
  if (!settled) r.fail(`not all delivered within 60 s: ${[...final.states.values()].join(', ')}`);
  const seen = countByRequestId(consumer.received);
  for (const a of acks.all()) if ((seen.get(a.id) ?? 0) < 1) r.fail(`request ${a.id} never reached the consumer`);
  const expired = final.attempts.filter((a) => a.outcome === 'lease_expired');
  if (expired.length !== o.inFlight)
    r.fail(`${o.inFlight} deliveries were in flight at the ${o.what}, ${expired.length} attempts closed as lease_expired`);
  const inv = await checkInvariant({ db, acks: acks.all(), sent: load.sent, expectDeliveries: true });
  addInvariant(r, inv, 'after recovery');
  r.sent = load.stats.sent;
  r.acked = load.stats.acked;
  r.verified = inv.verified;
  r.lostAcked = inv.lost.length;
  r.duplicates = duplicatesIn(consumer.received);
  return { expired, open: final.attempts.filter((a) => a.outcome === null).length, seen };
}

const WORKER_REQUESTS = 5;

async function workerKilledMidForward(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const dir = ctx.tmpDir();
  const db = join(dir, 'lease.db');
  const firstSeen = new Set<string>();
  let holding = 0;
  // The first attempt of each request is held for 20 s (the worker dies meanwhile); later ones get 200.
  const consumer = await startConsumer((req, res) => {
    const id = String(req.headers['x-hookbucket-request-id']);
    if (!firstSeen.has(id)) {
      firstSeen.add(id);
      holding++;
      const t = setTimeout(() => res.writeHead(200).end('late'), 20_000);
      res.on('close', () => clearTimeout(t));
      return;
    }
    res.writeHead(200).end('ok');
  });
  await hookbucket(['--db', db, 'bucket', 'create', 'lease', '--destination', `${consumer.url}/hook`, '--timeout', '1s']);
  const acks = new AckLog();
  const serve = await startServe({ db, flags: ['--no-worker'] });
  let worker: HookbucketProcess | undefined;
  try {
    const load = await ingest(ctx, serve.url, 'lease', WORKER_REQUESTS, acks);
    worker = await startWorkerProcess({ db, flags: ['--lease', '2s'] });
    // Kill once a random number of first attempts are being held, after a random 0–300 ms.
    const k = randomInt(ctx.random, 1, WORKER_REQUESTS);
    await until(() => (holding >= k ? true : undefined), 10_000, 5);
    await sleep(randomInt(ctx.random, 0, 300));
    const inflight = holding;
    await worker.kill9();
    const killedAt = performance.now();
    ctx.log(`worker killed with ${inflight} of ${WORKER_REQUESTS} first attempts held by the consumer`);
    const stuck = deliveryRows(db);
    const delivering = [...stuck.states.values()].filter((s) => s === 'delivering').length;
    // A new worker stands by until the dead one's worker lease (15 s) lapses, then recovers the
    // expired delivery leases (2 s) and sends them again.
    const rec = await recoverDeliveries(r, { db, acks, load, consumer, inFlight: delivering, what: 'kill' });
    worker = undefined;
    if (rec.open > 0) r.fail(`${rec.open} attempts still open`);
    if (rec.expired.some((a) => a.error_class !== 'lease_expired')) r.fail('a lease_expired attempt has another error class');
    const recoveredMs = performance.now() - killedAt;
    const { expired, seen } = rec;
    r.figure('deliveries in flight at the kill', String(delivering));
    r.figure('attempts closed as lease_expired', String(expired.length));
    r.figure('kill → all delivered', secs(recoveredMs), '≤ 60 s (worker lease 15 s + delivery lease 2 s)');
    r.figure('consumer saw each request (times)', [...acks.all()].map((a) => seen.get(a.id) ?? 0).join(', '));
  } finally {
    await worker?.kill9();
    await serve.proc.kill9();
    await consumer.close();
  }
  return r;
}

async function crashAfterResponse(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const dir = ctx.tmpDir();
  const db = join(dir, 'fault.db');
  const consumer: Consumer = await startConsumer({ status: 200, body: 'ok' });
  await hookbucket(['--db', db, 'bucket', 'create', 'fault', '--destination', `${consumer.url}/hook`, '--timeout', '1s']);
  const acks = new AckLog();
  const serve = await startServe({ db, flags: ['--no-worker'] });
  let worker: HookbucketProcess | undefined;
  try {
    const load = await ingest(ctx, serve.url, 'fault', WORKER_REQUESTS, acks);
    // The fault hook: the worker SIGKILLs itself the moment a response has arrived, before the
    // outcome is written (src/main.ts startWorker).
    worker = new HookbucketProcess(['--db', db, 'worker', '--lease', '2s'], { HOOKBUCKET_FAULT: 'crash-after-response' });
    const exit = await Promise.race([worker.exited, sleep(30_000).then(() => undefined)]);
    if (!exit) throw new Error('the faulty worker did not crash within 30 s');
    worker = undefined;
    if (exit.signal !== 'SIGKILL') r.fail(`the faulty worker ended with ${exit.code ?? exit.signal}, not SIGKILL`);
    const seenAtCrash = consumer.received.length;
    const atCrash = deliveryRows(db);
    const delivering = [...atCrash.states.values()].filter((s) => s === 'delivering').length;
    const delivered = [...atCrash.states.values()].filter((s) => s === 'delivered').length;
    ctx.log(
      `worker killed itself after a 2xx: consumer had ${seenAtCrash} request(s); ${delivering} delivering, ${delivered} delivered in the file`,
    );
    if (delivered > 0) r.note(`${delivered} delivered before the crash (their completions were written first)`);
    const t0 = performance.now();
    const { seen } = await recoverDeliveries(r, { db, acks, load, consumer, inFlight: delivering, what: 'crash' });
    const ms = performance.now() - t0;
    r.figure('consumer 2xx answers unrecorded at the crash', String(delivering));
    r.figure('restart → all delivered', secs(ms), '≤ 60 s');
    r.figure('consumer saw each request (times)', [...acks.all()].map((a) => seen.get(a.id) ?? 0).join(', '));
  } finally {
    await worker?.kill9();
    await serve.proc.kill9();
    await consumer.close();
  }
  return r;
}

// ---------------------------------------------------------------------------------------------
// 5. a lease that cannot cover a bucket's timeout: the worker starts, skips that bucket, warns

async function leaseShorterThanTimeout(ctx: CaseContext): Promise<CaseResult> {
  const r = newResult();
  const db = join(ctx.tmpDir(), 'config.db');
  // A longer HOOKBUCKET_LEASE lets the timeout in; the workers below run with shorter ones.
  await hookbucket(['--db', db, 'bucket', 'create', 'slow', '--destination', 'http://127.0.0.1:9/never', '--timeout', '10s'], {
    env: { HOOKBUCKET_LEASE: '1m' },
  });
  const skipped: Array<[string, string[]]> = [
    ['worker --once --lease 5s', ['worker', '--once', '--lease', '5s']],
    ['worker --once --lease 10s (equal)', ['worker', '--once', '--lease', '10s']],
  ];
  for (const [name, args] of skipped) {
    const run = await runHookbucket(['--db', db, ...args], { timeoutMs: 20_000 });
    const ok = run.code === 0 && /bucket slow: attempt timeout 10s is not shorter than the running worker's lease/.test(run.stderr);
    if (!ok) r.fail(`${name}: exit ${run.code ?? run.signal}, stderr ${JSON.stringify(run.stderr.slice(0, 300))}`);
    r.figure(name, `exit ${run.code ?? run.signal} in ${secs(run.ms)}${ok ? ', a warning naming the bucket' : ''}`, 'exit 0, warned');
  }
  // A lease longer than every timeout starts, and stops cleanly.
  const w = await startWorkerProcess({ db, flags: ['--lease', '11s'] });
  const term = await w.term();
  if (term.code !== 0) r.fail(`worker --lease 11s: exit ${term.code ?? term.signal}`);
  r.figure('worker --lease 11s', `started, SIGTERM exit ${term.code}`, 'exit 0');
  return r;
}

export const cases: ReliabilityCase[] = [
  { id: 1, title: 'kill -9 the receiver under load, 20 times', timeoutMs: 6 * 60_000, run: killUnderLoad },
  { id: 2, title: 'SIGTERM under load', timeoutMs: 2 * 60_000, run: sigtermUnderLoad },
  { id: 3, title: 'kill -9 the drain worker mid-forward (slow consumer)', timeoutMs: 2 * 60_000, run: workerKilledMidForward },
  { id: 4, title: 'worker crash after the 2xx, before recording it', timeoutMs: 2 * 60_000, run: crashAfterResponse },
  {
    id: 5,
    title: 'a lease not longer than a bucket timeout: the worker starts, skips it and warns',
    timeoutMs: 60_000,
    run: leaseShorterThanTimeout,
  },
];

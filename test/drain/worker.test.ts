import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';

// The worker against a real SQLite file and a real consumer on loopback, driven one pass at a time
// (runOnce) with a manual clock: no sleeps, no wall-clock assertions.

describe('drain worker', () => {
  let b: DrainBench;
  let consumer: Consumer;
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
  });
  afterEach(async () => {
    await b.close();
    await consumer.close();
  });

  const create = (name: string, drain: Record<string, unknown> = {}, destination = `${consumer.url}/hooks`) =>
    b.store.createBucket({ name, destination, drain });

  it('delivers a stored request and records the attempt as evidence', async () => {
    await create('s');
    const [id] = b.ingest('s', { path: '/evt', query: 'a=1', body: '{"x":1}' });
    const w = b.worker();
    const pass = await w.runOnce();
    assert.equal(pass.started, 1);
    assert.equal(consumer.received.length, 1);
    assert.equal(consumer.received[0]!.url, '/hooks/evt?a=1');
    const d = b.delivery(id!);
    assert.equal(d.state, 'delivered');
    assert.equal(d.attempts, 1);
    assert.equal(d.last_status, 200);
    assert.equal(d.settled_at, b.clock.now());
    const [a] = b.attempts(id!);
    assert.equal(a!.number, 1);
    assert.equal(a!.status, 200);
    assert.equal(a!.outcome, 'delivered');
    assert.equal(a!.url, `${consumer.url}/hooks/evt?a=1`);
    assert.equal(a!.response_body.toString(), 'ok');
    assert.ok((JSON.parse(a!.response_headers) as string[]).includes('keep-alive'));
    // Nothing is due any more: a second pass starts nothing.
    assert.equal((await w.runOnce()).started, 0);
  });

  it('retries a 503 on the jittered schedule, then delivers', async () => {
    await create('s', { schedule: { baseMs: 30_000, multiplier: 3, capMs: 10_800_000, maxAttempts: 14, jitter: 'upper' } });
    const [id] = b.ingest('s', {});
    consumer.script({ status: 503 });
    const w = b.worker({ random: () => 0 });
    await w.runOnce();
    const t0 = b.clock.now();
    let d = b.delivery(id!);
    assert.equal(d.state, 'retrying');
    // upper jitter with random 0 is the low end: half the 30 s gap.
    assert.equal(d.next_attempt_at, t0 + 15_000);
    assert.equal(b.attempts(id!)[0]!.next_why, 'schedule');
    b.clock.advance(14_999);
    assert.equal((await w.runOnce()).started, 0, 'not due yet');
    b.clock.advance(1);
    assert.equal((await w.runOnce()).started, 1);
    d = b.delivery(id!);
    assert.equal(d.state, 'delivered');
    assert.equal(d.attempts, 2);
    assert.deepEqual(
      consumer.received.map((r) => r.rawHeaders[r.rawHeaders.indexOf('x-hookbucket-attempt') + 1]),
      ['1', '2'],
    );
  });

  it('honours Retry-After as a floor for the delivery and as a bucket-wide block', async () => {
    await create('s');
    const [first, second] = b.ingest('s', {}, {});
    consumer.script({ status: 429, headers: { 'retry-after': '120' } });
    // Concurrency 1: the first attempt runs alone and its 429 blocks the bucket.
    await b.store.updateBucket('s', { drain: { concurrency: 1 } });
    const w = b.worker();
    await w.runOnce();
    const t0 = b.clock.now();
    const a = b.attempts(first!)[0]!;
    assert.equal(a.status, 429);
    assert.equal(a.next_attempt_at, t0 + 120_000);
    assert.equal(a.next_why, 'retry_after');
    // The second request is due, but the bucket is blocked: deferred, not attempted.
    b.clock.advance(1000);
    const pass = await w.runOnce();
    assert.equal(pass.started, 0);
    assert.equal(pass.deferred.retry_after, 1);
    assert.equal(pass.wakeAt, t0 + 120_000);
    const d2 = b.delivery(second!);
    assert.equal(d2.state, 'pending');
    assert.equal(d2.deferrals, 1);
    assert.equal(d2.last_deferral_reason, 'retry_after');
    assert.equal(b.attempts(second!).length, 0);
    b.clock.set(t0 + 120_000);
    await w.runOnce();
    assert.equal(b.delivery(second!).state, 'delivered');
  });

  it('ignores Retry-After on statuses other than 429 and 503: the schedule decides, the bucket is not blocked', async () => {
    await create('s', { schedule: { baseMs: 1000, multiplier: 2, capMs: 60_000, maxAttempts: 5, jitter: 'none' } });
    const [first, second] = b.ingest('s', {}, {});
    consumer.script({ status: 500, headers: { 'retry-after': '120' } });
    await b.store.updateBucket('s', { drain: { concurrency: 1 } });
    const w = b.worker();
    await w.runOnce();
    const t0 = b.clock.now();
    const a = b.attempts(first!)[0]!;
    assert.equal(a.status, 500);
    assert.equal(a.next_attempt_at, t0 + 1000);
    assert.equal(a.next_why, 'schedule');
    // No bucket-wide block: the second request goes at once.
    const pass = await w.runOnce();
    assert.equal(pass.started, 1);
    assert.equal(pass.deferred.retry_after, undefined);
    assert.equal(b.delivery(second!).state, 'delivered');
  });

  it('reads an HTTP-date Retry-After and clamps a hostile one to the cap', async () => {
    await create('s', { schedule: { baseMs: 1000, multiplier: 2, capMs: 60_000, maxAttempts: 5, jitter: 'none' } });
    const [a, c] = b.ingest('s', {}, {});
    const at = new Date(b.clock.now() + 45_000).toUTCString();
    consumer.script({ status: 503, headers: { 'retry-after': at } }, { status: 503, headers: { 'retry-after': '31536000' } });
    await b.store.updateBucket('s', { drain: { concurrency: 1 } });
    const w = b.worker();
    await w.runOnce();
    const t0 = b.clock.now();
    assert.equal(b.delivery(a!).next_attempt_at, t0 + 45_000);
    b.clock.set(t0 + 45_000);
    await w.runOnce();
    // a's second try went first (due earlier than c? both due; one slot) — whichever went, a year became the 60 s cap.
    const rows = b.raw
      .prepare(`select next_attempt_at - started_at gap, next_why from attempts where status = 503 order by started_at`)
      .all() as Array<{ gap: number; next_why: string }>;
    assert.equal(rows.length, 2);
    assert.deepEqual(rows[1], { gap: 60_000, next_why: 'retry_after' });
    void c;
  });

  it('keeps an exhausted delivery visible with all its attempts', async () => {
    await create('s', { schedule: { baseMs: 1000, multiplier: 1, capMs: 1000, maxAttempts: 3, jitter: 'none' } });
    const [id] = b.ingest('s', {});
    consumer.fallback = { status: 500, body: 'boom' };
    const w = b.worker();
    for (let i = 0; i < 3; i++) {
      await w.runOnce();
      b.clock.advance(1000);
    }
    const d = b.delivery(id!);
    assert.equal(d.state, 'exhausted');
    assert.equal(d.attempts, 3);
    assert.equal(d.last_status, 500);
    const rows = b.attempts(id!);
    assert.deepEqual(
      rows.map((r) => r.outcome),
      ['retry', 'retry', 'exhausted'],
    );
    assert.equal(rows[2]!.response_body.toString(), 'boom');
    assert.equal((await w.runOnce()).started, 0);
  });

  it('fails a 404 and a 3xx for good, without following the redirect', async () => {
    await create('s');
    const [notFound, moved] = b.ingest('s', {}, {});
    consumer.script({ status: 404 }, { status: 301, headers: { location: `${consumer.url}/elsewhere` } });
    await b.store.updateBucket('s', { drain: { concurrency: 1 } });
    const w = b.worker();
    await w.runOnce();
    await w.runOnce();
    assert.equal(b.delivery(notFound!).state, 'failed');
    assert.equal(b.attempts(notFound!)[0]!.reason, 'status_404');
    assert.equal(b.delivery(moved!).state, 'failed');
    assert.equal(b.attempts(moved!)[0]!.reason, 'redirect_not_followed');
    assert.equal(consumer.received.length, 2, 'the Location was never requested');
  });

  it('classifies a refused connection as retryable network failure', async () => {
    const dead = await startConsumer();
    const url = dead.url;
    await dead.close();
    await create('s', {}, url);
    const [id] = b.ingest('s', {});
    await b.worker().runOnce();
    const a = b.attempts(id!)[0]!;
    assert.equal(a.error_class, 'refused');
    assert.equal(a.outcome, 'retry');
    assert.equal(b.delivery(id!).last_error, 'refused');
  });

  it('holds a paused bucket without burning attempts, then drains on resume', async () => {
    await create('s');
    await b.store.pauseBucket('s');
    const ids = b.ingest('s', {}, {}, {});
    const w = b.worker();
    assert.equal((await w.runOnce()).started, 0);
    assert.equal(consumer.received.length, 0);
    const states = await b.store.bucketCounts('s');
    assert.equal(states.states.held, 3);
    await b.store.resumeBucket('s');
    await w.runOnce();
    assert.equal(consumer.received.length, 3);
    for (const id of ids) assert.equal(b.delivery(id).attempts, 1);
  });

  it('does not count paused time toward --give-up', async () => {
    await create('s', { schedule: { baseMs: 30_000, multiplier: 1, capMs: 30_000, giveUpMs: 100_000, jitter: 'none' } });
    const [id] = b.ingest('s', {});
    consumer.fallback = { status: 503 };
    const w = b.worker();
    await w.runOnce();
    b.clock.advance(1000);
    await b.store.pauseBucket('s');
    b.clock.advance(999_000);
    await b.store.resumeBucket('s');
    // 1,000 s since the first attempt, 999 s of them paused: 1 s active, so the schedule goes on.
    await w.runOnce();
    const d = b.delivery(id!);
    assert.equal(d.attempts, 2);
    assert.equal(d.state, 'retrying');
  });

  it('bounds attempts by the rate and records the deferral on the head of the line', async () => {
    await create('s', { rate: { count: 2, perMs: 1000 }, burst: 1 });
    const ids = b.ingest('s', {}, {}, {}, {});
    const w = b.worker();
    const p1 = await w.runOnce();
    assert.equal(p1.started, 1);
    assert.equal(p1.deferred.rate, 1);
    assert.equal(p1.wakeAt, b.clock.now() + 500);
    assert.equal(b.delivery(ids[1]!).last_deferral_reason, 'rate');
    b.clock.advance(499);
    assert.equal((await w.runOnce()).started, 0);
    b.clock.advance(1);
    assert.equal((await w.runOnce()).started, 1);
    b.clock.advance(1500);
    // A full bucket holds one token (burst 1): 1.5 s later, still one attempt, not three.
    assert.equal((await w.runOnce()).started, 1);
    assert.equal(consumer.received.length, 3);
  });

  it('defers retries over the budget while first attempts still go', async () => {
    // fraction 0 and a floor of 1/60 per second: one retry per 60 s window.
    await create('s', {
      retryBudget: { fraction: 0, floorPerSecond: 1 / 60 },
      schedule: { baseMs: 1000, multiplier: 1, capMs: 1000, maxAttempts: 10, jitter: 'none' },
    });
    const [r1, r2] = b.ingest('s', {}, {});
    consumer.script({ status: 500 }, { status: 500 });
    const w = b.worker();
    await w.runOnce();
    assert.equal(b.delivery(r1!).state, 'retrying');
    assert.equal(b.delivery(r2!).state, 'retrying');
    b.clock.advance(1000);
    const [fresh] = b.ingest('s', {});
    const pass = await w.runOnce();
    assert.equal(pass.started, 2, 'one retry fits the budget, and the first attempt goes');
    assert.equal(pass.deferred.retry_budget, 1);
    const states = [b.delivery(r1!), b.delivery(r2!)];
    assert.deepEqual(states.map((d) => d.attempts).sort(), [1, 2]);
    const held = states.find((d) => d.attempts === 1)!;
    assert.equal(held.deferrals, 1);
    assert.equal(held.last_deferral_reason, 'retry_budget');
    assert.equal(b.delivery(fresh!).state, 'delivered');
  });

  it('takes over a lease whose worker died, closing its attempt as lease_expired', async () => {
    await create('s', { timeoutMs: 5000 });
    const [id] = b.ingest('s', {});
    // The first worker's attempt hangs (the consumer never answers), as if the worker had died.
    consumer.script(() => undefined);
    const dead = b.worker({ leaseMs: 10_000 });
    await dead.drainOnce();
    await consumer.waitFor(1);
    assert.equal(b.delivery(id!).state, 'delivering');
    b.clock.advance(10_000);
    const heir = b.worker({ leaseMs: 10_000 });
    await heir.runOnce();
    const rows = b.attempts(id!);
    assert.equal(rows.length, 2);
    assert.equal(rows[0]!.outcome, 'lease_expired');
    assert.equal(rows[0]!.error_class, 'lease_expired');
    assert.equal(rows[1]!.outcome, 'delivered');
    const d = b.delivery(id!);
    assert.equal(d.state, 'delivered');
    assert.equal(d.attempts, 2, 'the expired attempt counts');
    // The dead worker's late result changes nothing: its lease is gone.
    await dead.stop(0);
    assert.equal(b.delivery(id!).state, 'delivered');
    assert.equal(b.attempts(id!)[0]!.outcome, 'lease_expired');
  });

  it('exhausts a delivery whose expired attempt was its last', async () => {
    await create('s', { timeoutMs: 5000, schedule: { baseMs: 1000, multiplier: 1, capMs: 1000, maxAttempts: 1, jitter: 'none' } });
    const [id] = b.ingest('s', {});
    consumer.script(() => undefined);
    const dead = b.worker({ leaseMs: 10_000 });
    await dead.drainOnce();
    await consumer.waitFor(1);
    b.clock.advance(10_000);
    const heir = b.worker({ leaseMs: 10_000 });
    await heir.drainOnce(); // lists buckets first, so the schedule is known when the lease is recovered
    assert.equal(b.delivery(id!).state, 'exhausted');
    await dead.stop(0);
  });

  it('lets one worker be active per database: a second refuses naming the holder, or stands by and takes over', async () => {
    const a = b.worker({ workerLeaseTtlMs: 300 });
    await a.start('refuse', { loop: false });
    assert.equal(a.active, true);
    const refused = b.worker({ workerLeaseTtlMs: 300 });
    await assert.rejects(refused.start('refuse', { loop: false }), (e: Error & { code?: string }) => {
      assert.equal(e.code, 'worker_active');
      assert.match(e.message, new RegExp(`pid ${process.pid}`));
      assert.match(e.message, new RegExp(a.holder));
      return true;
    });
    const standby = b.worker({ workerLeaseTtlMs: 300 });
    await standby.start('standby', { loop: false });
    assert.equal(standby.active, false);
    await a.stop(0);
    // The standby renews every ttl/3 (100 ms): bounded wait for it to notice the released lease.
    for (let i = 0; i < 100 && !standby.active; i++) await new Promise((r) => setTimeout(r, 20));
    assert.equal(standby.active, true);
  });

  it('on stop, lets an in-flight attempt finish within the grace period', async () => {
    await create('s');
    const [id] = b.ingest('s', {});
    let answer: (() => void) | undefined;
    consumer.script((_req, res) => {
      answer = () => res.end('late but fine');
    });
    const w = b.worker();
    await w.drainOnce();
    await consumer.waitFor(1);
    const stopping = w.stop(10_000);
    answer!();
    await stopping;
    assert.equal(b.delivery(id!).state, 'delivered');
  });

  it('on stop, releases an attempt that outlives the grace period, without counting it', async () => {
    await create('s');
    const [id] = b.ingest('s', {});
    consumer.script(() => undefined);
    const w = b.worker();
    await w.drainOnce();
    await consumer.waitFor(1);
    await w.stop(50);
    const d = b.delivery(id!);
    assert.equal(d.state, 'pending');
    assert.equal(d.attempts, 0);
    assert.equal(d.lease_attempt, null);
    const [a] = b.attempts(id!);
    assert.equal(a!.outcome, 'released');
    assert.equal(a!.error_class, 'shutdown');
    // The next worker delivers it.
    await b.worker().runOnce();
    assert.equal(b.delivery(id!).state, 'delivered');
  });

  it('follows the bucket destination as it is now', async () => {
    await create('s');
    const [id] = b.ingest('s', {});
    const other = await startConsumer();
    try {
      await b.store.updateBucket('s', { destination: `${other.url}/new` });
      await b.worker().runOnce();
      assert.equal(consumer.received.length, 0);
      assert.equal(other.received.length, 1);
      assert.equal(b.attempts(id!)[0]!.url, `${other.url}/new`);
    } finally {
      await other.close();
    }
  });

  it('bounds attempts in flight by the bucket concurrency', async () => {
    await create('s', { concurrency: 2 });
    b.ingest('s', {}, {}, {}, {}, {});
    const answers: Array<() => void> = [];
    consumer.fallback = (_req, res) => answers.push(() => res.end('ok'));
    const w = b.worker();
    const p = await w.drainOnce();
    assert.equal(p.started, 2);
    await consumer.waitFor(2);
    assert.equal((await w.drainOnce()).started, 0, 'both slots busy');
    for (const f of answers.splice(0)) f();
    await w.settle();
    assert.equal((await w.drainOnce()).started, 2);
    await consumer.waitFor(4);
    for (const f of answers.splice(0)) f();
    await w.settle();
  });
});

import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { timelineLines } from '../../src/cli/timeline.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';
import { until } from '../helpers/until.js';

// The running loop (start()) claims up to another `concurrency` ahead of its free slots for a
// bucket without a rate cap, so a finished attempt's slot is refilled without a claim round trip.
// What was claimed ahead and never sent is released (not counted) on pause and on stop.

describe('drain worker: claiming ahead in the running loop', () => {
  let b: DrainBench;
  let consumer: Consumer;
  let held: ServerResponse[];
  let inflight: number;
  let maxInflight: number;
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
    held = [];
    inflight = 0;
    maxInflight = 0;
    // Holds every answer until the test lets it go; counts requests in flight at the consumer.
    consumer.fallback = (_req, res) => {
      inflight++;
      maxInflight = Math.max(maxInflight, inflight);
      res.on('finish', () => inflight--);
      held.push(res);
    };
  });
  afterEach(async () => {
    await b.close();
    await consumer.close();
  });

  const states = () =>
    Object.fromEntries(
      (b.raw.prepare('select state, count(*) n from deliveries group by state').all() as Array<{ state: string; n: number }>).map((r) => [r.state, r.n]),
    );
  const answerAll = () => held.splice(0).forEach((r) => r.end('ok'));

  it('keeps at most `concurrency` requests in flight, claims up to as many ahead, and delivers all', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2 } });
    const ids = b.ingest('s', {}, {}, {}, {}, {}, {}, {});
    const w = b.worker();
    await w.start('refuse');
    try {
      await consumer.waitFor(2);
      // Two in flight at the consumer, two more claimed ahead (delivering, attempt rows open).
      await until(() => states().delivering === 4, 'four claimed');
      assert.equal(states().pending, 3);
      while (consumer.received.length < ids.length || held.length > 0) {
        answerAll();
        await new Promise((r) => setTimeout(r, 10));
      }
      await until(() => states().delivered === ids.length, 'all delivered');
      assert.equal(maxInflight, 2);
      for (const id of ids) assert.deepEqual(b.attempts(id).map((a) => a.outcome), ['delivered']);
    } finally {
      answerAll();
      await w.stop(1000);
    }
  });

  it('stop releases what was claimed ahead: not sent, not counted, due again', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2 } });
    const ids = b.ingest('s', {}, {}, {}, {}, {});
    const w = b.worker();
    await w.start('refuse');
    await consumer.waitFor(2);
    await until(() => states().delivering === 4, 'four claimed');
    const stopping = w.stop(5000);
    answerAll();
    await stopping;
    assert.equal(consumer.received.length, 2, 'nothing claimed ahead was sent');
    assert.deepEqual(states(), { delivered: 2, pending: 3 });
    const released = ids.flatMap((id) => b.attempts(id)).filter((a) => a.outcome === 'released');
    assert.equal(released.length, 2);
    for (const a of released) {
      assert.equal(a.reason, 'released_on_shutdown');
      assert.equal(a.status, null);
    }
    for (const id of ids) {
      const d = b.delivery(id);
      if (d.state === 'pending') assert.equal(d.attempts, 0);
    }
  });

  it('a pause releases what was claimed ahead; only the attempts already sent finish', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2 } });
    const ids = b.ingest('s', {}, {}, {}, {}, {});
    const w = b.worker();
    await w.start('refuse');
    try {
      await consumer.waitFor(2);
      await until(() => states().delivering === 4, 'four claimed');
      await b.store.pauseBucket('s');
      w.wake();
      await until(() => states().delivering === 2, 'the two claimed ahead released');
      answerAll();
      await until(() => states().delivered === 2, 'the two sent delivered');
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(consumer.received.length, 2);
      assert.deepEqual(states(), { delivered: 2, pending: 3 });
      const reasons = ids.flatMap((id) => b.attempts(id)).filter((a) => a.outcome === 'released').map((a) => a.reason);
      assert.deepEqual(reasons, ['released_on_pause', 'released_on_pause']);
      // requests show says what happened to them.
      const releasedId = ids.find((id) => b.attempts(id).some((a) => a.outcome === 'released'))!;
      const lines = timelineLines(await b.store.requestHistory(releasedId), `${consumer.url}/h`).join('\n');
      assert.match(lines, /released unsent: the bucket was paused \(not counted\)/);
    } finally {
      answerAll();
      await w.stop(1000);
    }
  });

  it('a bucket with a rate cap never claims ahead', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2, rate: { count: 1000, perMs: 1000 }, burst: 10 } });
    b.ingest('s', {}, {}, {}, {}, {});
    const w = b.worker();
    await w.start('refuse');
    try {
      await consumer.waitFor(2);
      // Give the loop time to claim more if it would.
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(states().delivering, 2);
      assert.equal(states().pending, 3);
    } finally {
      answerAll();
      await w.stop(1000);
    }
  });

  it('claims nothing ahead when the lease could not cover a wait for a slot plus the attempt', async () => {
    // Lease 3 s, timeout 1 s: a queued attempt could wait 1 s and run 1 s, too close to 3 s.
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2, timeoutMs: 1000 } });
    b.ingest('s', {}, {}, {}, {}, {});
    const w = b.worker({ leaseMs: 3000 });
    await w.start('refuse');
    try {
      await consumer.waitFor(2);
      await new Promise((r) => setTimeout(r, 200));
      assert.equal(states().delivering, 2);
    } finally {
      answerAll();
      await w.stop(1000);
    }
  });

  it('a queued attempt its lease can no longer cover (the worker fell behind) is released unsent', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2, timeoutMs: 1000 } });
    const ids = b.ingest('s', {}, {}, {}, {});
    const w = b.worker();
    await w.start('refuse');
    try {
      await consumer.waitFor(2);
      await until(() => states().delivering === 4, 'four claimed');
      // 58.5 s of the worker's (manual) clock later, a 1 s attempt would end past the 60 s lease
      // (less its 1 s margin): the two still queued go back instead of out.
      b.clock.advance(58_500);
      answerAll();
      const released = () => ids.flatMap((id) => b.attempts(id)).filter((a) => a.outcome === 'released');
      await until(() => released().length >= 2, 'two released');
      assert.deepEqual(released().map((a) => a.reason), ['released_on_lease', 'released_on_lease']);
      assert.ok(released().every((a) => a.status === null));
      // They are claimed again and delivered.
      while (states().delivered !== ids.length) {
        answerAll();
        await new Promise((r) => setTimeout(r, 10));
      }
      assert.equal(consumer.received.length, ids.length);
    } finally {
      answerAll();
      await w.stop(1000);
    }
  });

  it("a bucket-wide Retry-After releases what waits in the queue, unsent", async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2 } });
    const ids = b.ingest('s', {}, {}, {}, {}, {});
    const w = b.worker();
    await w.start('refuse');
    try {
      await consumer.waitFor(2);
      await until(() => states().delivering === 4, 'four claimed');
      const [first] = held.splice(0, 1);
      first!.writeHead(429, { 'retry-after': '30' }).end('slow down');
      const released = () => ids.flatMap((id) => b.attempts(id)).filter((a) => a.outcome === 'released');
      await until(() => released().length === 2, 'the two queued released');
      assert.deepEqual(released().map((a) => a.reason), ['released_on_retry_after', 'released_on_retry_after']);
      answerAll();
      await until(() => states().delivered === 1, 'the other in-flight one delivered');
      await new Promise((r) => setTimeout(r, 100));
      assert.equal(consumer.received.length, 2, 'nothing more went out during the block');
      assert.deepEqual(states(), { delivered: 1, retrying: 1, pending: 3 });
    } finally {
      answerAll();
      await w.stop(1000);
    }
  });

  it('a worker that loses its lease to another releases its queue unsent', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2 } });
    const ids = b.ingest('s', {}, {}, {}, {}, {});
    const w = b.worker({ workerLeaseTtlMs: 300 });
    await w.start('refuse');
    try {
      await consumer.waitFor(2);
      await until(() => states().delivering === 4, 'four claimed');
      // Another holder takes the lease row; the next renewal (every 100 ms here) finds it lost.
      b.raw.prepare(`update worker_lease set holder = 'someone-else', expires_at = ? where name = 'drain'`).run(Date.now() + 3_600_000);
      await until(() => !w.active, 'the lease lost');
      answerAll();
      const released = () => ids.flatMap((id) => b.attempts(id)).filter((a) => a.outcome === 'released');
      await until(() => released().length === 2, 'the two queued released');
      assert.deepEqual(released().map((a) => a.reason), ['released_on_standby', 'released_on_standby']);
      await until(() => states().delivered === 2, 'the two sent recorded');
      assert.equal(consumer.received.length, 2);
    } finally {
      answerAll();
      await w.stop(1000);
    }
  });
});

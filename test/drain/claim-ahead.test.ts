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
      assert.match(lines, /released unsent on pause \(not counted\)/);
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

  it('a queued attempt whose lease can no longer cover it (timeout raised) is released unsent', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2, timeoutMs: 1000 } });
    const ids = b.ingest('s', {}, {}, {}, {});
    const w = b.worker();
    await w.start('refuse');
    try {
      await consumer.waitFor(2);
      await until(() => states().delivering === 4, 'four claimed');
      // The default lease is 60 s: a 59.5 s timeout leaves the queued two no room.
      await b.store.updateBucket('s', { drain: { timeoutMs: 59_500 } });
      w.wake();
      await until(() => (w as unknown as { inflight: number }).inflight === 2 && states().delivering === 4, 'the loop ran');
      // Queued for 400 ms of the worker's (manual) clock, more than half the 500 ms between the
      // timeout and the lease: no longer covered.
      b.clock.advance(400);
      answerAll();
      const reasons = () => ids.flatMap((id) => b.attempts(id)).filter((a) => a.outcome === 'released').map((a) => a.reason);
      await until(() => reasons().length >= 2, 'two released');
      assert.deepEqual(reasons(), ['released_on_lease', 'released_on_lease']);
      // They are claimed again, one slot at a time now, and delivered.
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
});

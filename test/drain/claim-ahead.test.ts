import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { timelineLines } from '../../src/cli/timeline.js';
import type { DrainWorker, DrainWorkerDeps } from '../../src/drain/worker.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';
import { until } from '../helpers/until.js';

// The running loop (start()) claims up to another `concurrency` ahead of its free slots for a
// bucket without a rate cap, so a finished attempt's slot is refilled without a claim round trip.
// What was claimed ahead and never sent is released (not counted): on pause, stop, a Retry-After
// block, a lost worker lease, or a lease that can no longer cover the attempt.

const pause = (ms: number) => new Promise((r) => setTimeout(r, ms));

describe('drain worker: claiming ahead in the running loop', () => {
  let b: DrainBench;
  let consumer: Consumer;
  let worker: DrainWorker | undefined;
  let held: ServerResponse[];
  let inflight: number;
  let maxInflight: number;
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
    worker = undefined;
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
    answerAll();
    await worker?.stop(1000);
    await b.close();
    await consumer.close();
  });

  const states = () =>
    Object.fromEntries(
      (b.raw.prepare('select state, count(*) n from deliveries group by state').all() as Array<{ state: string; n: number }>).map((r) => [
        r.state,
        r.n,
      ]),
    );
  const answerAll = () => {
    for (const r of held.splice(0)) r.end('ok');
  };
  const released = (ids: string[]) => ids.flatMap((id) => b.attempts(id)).filter((a) => a.outcome === 'released');

  /**
   * Bucket `s` (concurrency 2 unless `drain` says otherwise) with `n` stored requests and the
   * running worker on it; resolves once two requests are held at the consumer and, with
   * `claimedAhead`, two more are claimed ahead.
   */
  async function running(n: number, o: { drain?: Record<string, unknown>; deps?: Partial<DrainWorkerDeps>; claimedAhead?: boolean } = {}) {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/h`, drain: { concurrency: 2, ...o.drain } });
    const ids = b.ingest('s', ...Array.from({ length: n }, () => ({})));
    const w = b.worker(o.deps);
    worker = w;
    await w.start('refuse');
    await consumer.waitFor(2);
    if (o.claimedAhead !== false) await until(() => states().delivering === 4, 'four claimed');
    return { ids, w };
  }

  /** Answers everything the consumer holds until every delivery is delivered. */
  async function deliverAll(ids: string[]) {
    while (states().delivered !== ids.length) {
      answerAll();
      await pause(10);
    }
  }

  it('keeps at most `concurrency` requests in flight, claims up to as many ahead, and delivers all', async () => {
    const { ids } = await running(7);
    // Two in flight at the consumer, two more claimed ahead (delivering, attempt rows open).
    assert.equal(states().pending, 3);
    await deliverAll(ids);
    assert.equal(maxInflight, 2);
    assert.equal(consumer.received.length, ids.length);
    for (const id of ids)
      assert.deepEqual(
        b.attempts(id).map((a) => a.outcome),
        ['delivered'],
      );
  });

  it('stop releases what was claimed ahead: not sent, not counted, due again', async () => {
    const { ids, w } = await running(5);
    const stopping = w.stop(5000);
    answerAll();
    await stopping;
    assert.equal(consumer.received.length, 2, 'nothing claimed ahead was sent');
    assert.deepEqual(states(), { delivered: 2, pending: 3 });
    const r = released(ids);
    assert.deepEqual(
      r.map((a) => [a.reason, a.status]),
      [
        ['released_on_shutdown', null],
        ['released_on_shutdown', null],
      ],
    );
    for (const id of ids) {
      const d = b.delivery(id);
      if (d.state === 'pending') assert.equal(d.attempts, 0);
    }
  });

  it('a pause releases what was claimed ahead; only the attempts already sent finish', async () => {
    const { ids, w } = await running(5);
    await b.store.pauseBucket('s');
    w.wake();
    await until(() => states().delivering === 2, 'the two claimed ahead released');
    answerAll();
    await until(() => states().delivered === 2, 'the two sent delivered');
    await pause(100);
    assert.equal(consumer.received.length, 2);
    assert.deepEqual(states(), { delivered: 2, pending: 3 });
    assert.deepEqual(
      released(ids).map((a) => a.reason),
      ['released_on_pause', 'released_on_pause'],
    );
    // requests show says what happened to them.
    const lines = timelineLines(await b.store.requestHistory(released(ids)[0]!.request_id), `${consumer.url}/h`).join('\n');
    assert.match(lines, /released unsent: the bucket was paused \(not counted\)/);
  });

  for (const [what, change] of [
    ["a delete's tombstone", `update buckets set deleting_at = 1 where name = 's'`],
    ['a pause', `update buckets set paused = 1, paused_at = 1 where name = 's'`],
  ] as const) {
    it(`${what} committed by another connection stops the queue even before the next pass: a freed slot takes nothing`, async () => {
      await running(5);
      // As the CLI commits it: the bucket row and the epoch, in one transaction of another
      // connection. No wake(): the finished attempts' own refill must notice.
      b.raw
        .transaction(() => {
          b.raw.prepare(change).run();
          b.raw.prepare(`update meta set value = value + 1 where key = 'bucket_epoch'`).run();
        })
        .immediate();
      answerAll();
      await until(() => (states().delivered ?? 0) === 2, 'the two sent delivered');
      await pause(200);
      answerAll();
      await pause(100);
      assert.equal(consumer.received.length, 2, 'nothing claimed ahead was sent after the change');
    });
  }

  it('a bucket with a rate cap never claims ahead', async () => {
    await running(5, { drain: { rate: { count: 1000, perMs: 1000 }, burst: 10 }, claimedAhead: false });
    // Give the loop time to claim more if it would.
    await pause(200);
    assert.deepEqual(states(), { delivering: 2, pending: 3 });
  });

  it('claims nothing ahead when the lease could not cover a wait for a slot plus the attempt', async () => {
    // Lease 3 s, timeout 1 s: a queued attempt could wait 1 s and run 1 s, too close to 3 s.
    await running(5, { drain: { timeoutMs: 1000 }, deps: { leaseMs: 3000 }, claimedAhead: false });
    await pause(200);
    assert.deepEqual(states(), { delivering: 2, pending: 3 });
  });

  it('a queued attempt its lease can no longer cover (the worker fell behind) is released unsent', async () => {
    const { ids } = await running(4, { drain: { timeoutMs: 1000 } });
    // 58.5 s of the worker's (manual) clock later, a 1 s attempt would end past the 60 s lease
    // (less its 1 s margin): the two still queued go back instead of out.
    b.clock.advance(58_500);
    answerAll();
    await until(() => released(ids).length >= 2, 'two released');
    assert.deepEqual(
      released(ids).map((a) => [a.reason, a.status]),
      [
        ['released_on_lease', null],
        ['released_on_lease', null],
      ],
    );
    // They are claimed again and delivered.
    await deliverAll(ids);
    assert.equal(consumer.received.length, ids.length);
  });

  it('a bucket-wide Retry-After releases what waits in the queue, unsent', async () => {
    const { ids } = await running(5);
    held.shift()!.writeHead(429, { 'retry-after': '30' }).end('slow down');
    await until(() => released(ids).length === 2, 'the two queued released');
    assert.deepEqual(
      released(ids).map((a) => a.reason),
      ['released_on_retry_after', 'released_on_retry_after'],
    );
    answerAll();
    await until(() => states().delivered === 1, 'the other in-flight one delivered');
    await pause(100);
    assert.equal(consumer.received.length, 2, 'nothing more went out during the block');
    assert.deepEqual(states(), { delivered: 1, retrying: 1, pending: 3 });
  });

  it('a worker that loses its lease to another releases its queue unsent and still records what it sent', async () => {
    const { ids, w } = await running(5, { deps: { workerLeaseTtlMs: 300 } });
    // Another holder takes the lease row; the next renewal (every 100 ms here) finds it lost.
    b.raw.prepare(`update worker_lease set holder = 'someone-else', expires_at = ? where name = 'drain'`).run(Date.now() + 3_600_000);
    await until(() => !w.active, 'the lease lost');
    answerAll();
    await until(() => released(ids).length === 2, 'the two queued released');
    assert.deepEqual(
      released(ids).map((a) => a.reason),
      ['released_on_standby', 'released_on_standby'],
    );
    await until(() => states().delivered === 2, 'the two sent recorded');
    assert.equal(consumer.received.length, 2);
  });

  it('a rate set while attempts wait in the queue sends them back, to go out under its tokens', async () => {
    const { ids, w } = await running(5);
    await b.store.updateBucket('s', { drain: { rate: { count: 1000, perMs: 1000 }, burst: 10 } });
    w.wake();
    await pause(100); // the next pass reads the new settings
    answerAll();
    await until(() => released(ids).length === 2, 'the two queued released');
    assert.deepEqual(
      released(ids).map((a) => a.reason),
      ['released_on_rate', 'released_on_rate'],
    );
    await deliverAll(ids);
    assert.equal(consumer.received.length, ids.length);
  });
});

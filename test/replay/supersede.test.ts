import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { confirmation, pace, replayExitCode, scopeProblem } from '../../src/replay/replay.js';
import { newId } from '../../src/shared/ids.js';
import type { ReplayProgress } from '../../src/store/store.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';

// The replay state machine against a real SQLite file, the real worker and a consumer on loopback.

describe('replay: new generations and superseding', () => {
  let b: DrainBench;
  let consumer: Consumer;
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
    await b.store.createBucket({
      name: 's',
      destination: `${consumer.url}/in`,
      drain: { schedule: { baseMs: 1000, multiplier: 1, capMs: 1000, maxAttempts: 2, jitter: 'none' } },
    });
  });
  afterEach(async () => {
    await b.close();
    await consumer.close();
  });

  const replay = (ids: string[], destination: string | null = null, rate: { count: number; perMs: number } | null = null) =>
    b.store.createReplay({ id: newId(), bucket: 's', requestIds: ids, selection: { test: true }, destination, rate, nowMs: b.clock.now() });
  const generations = (id: string) =>
    b.raw
      .prepare('select generation, state, latest, destination, trigger from deliveries where request_id = ? order by generation')
      .all(id) as Array<Record<string, unknown>>;

  it('starts a new generation and keeps the exhausted one with its attempts', async () => {
    const [id] = b.ingest('s', {});
    consumer.fallback = { status: 500 };
    const w = b.worker();
    await w.runOnce();
    b.clock.advance(1000);
    await w.runOnce();
    assert.equal(b.delivery(id!).state, 'exhausted');
    consumer.fallback = { status: 200 };
    const r = await replay([id!]);
    assert.equal(r.total, 1);
    assert.equal(r.superseded, 0, 'a settled delivery is not superseded');
    await w.runOnce();
    assert.deepEqual(generations(id!), [
      { generation: 1, state: 'exhausted', latest: 0, destination: null, trigger: 'initial' },
      { generation: 2, state: 'delivered', latest: 1, destination: null, trigger: 'replay' },
    ]);
    const history = await b.store.requestHistory(id!);
    assert.deepEqual(
      history.map((d) => d.attemptLog.map((a) => a.status)),
      [[500, 500], [200]],
    );
    // The new generation's attempts are numbered afresh and say which generation they are.
    const last = consumer.received.at(-1)!.rawHeaders;
    assert.equal(last[last.indexOf('x-hookbucket-delivery-generation') + 1], '2');
    assert.equal(last[last.indexOf('x-hookbucket-attempt') + 1], '1');
    assert.equal((await b.store.getRequest(id!))!.state, 'delivered');
    assert.deepEqual(await b.store.replayProgress(r.id), {
      total: 1,
      pending: 0,
      retrying: 0,
      delivering: 0,
      held: 0,
      delivered: 1,
      failed: 0,
      exhausted: 0,
      superseded: 0,
      settled: 1,
      paused: false,
      lastSettledAt: b.clock.now(),
    });
  });

  it('supersedes a pending or retrying delivery at once', async () => {
    const [pending, retrying] = b.ingest('s', {}, {});
    consumer.script({ status: 503 });
    await b.store.updateBucket('s', { drain: { concurrency: 1 } });
    await b.worker().runOnce(); // the first one fails once and is retrying
    assert.equal(b.delivery(pending!).state, 'retrying');
    assert.equal(b.delivery(retrying!).state, 'pending');
    const r = await replay([pending!, retrying!]);
    assert.equal(r.superseded, 2);
    for (const id of [pending!, retrying!]) {
      const g = generations(id);
      assert.equal(g[0]!.state, 'superseded');
      assert.equal(g[1]!.state, 'pending');
      assert.equal(g[1]!.latest, 1);
    }
    // Generation numbers are per request: one more than that request's highest.
    await replay([pending!]);
    assert.deepEqual(
      generations(pending!).map((g) => [g.generation, g.state]),
      [
        [1, 'superseded'],
        [2, 'superseded'],
        [3, 'pending'],
      ],
    );
  });

  it('lets an in-flight attempt finish, records it, then supersedes; the new generation waits for it', async () => {
    const [id] = b.ingest('s', {});
    let answer: (() => void) | undefined;
    consumer.script((_req, res) => (answer = () => res.end('ok from the old generation')));
    const w = b.worker();
    await w.drainOnce();
    await consumer.waitFor(1);
    assert.equal(b.delivery(id!).state, 'delivering');
    const r = await replay([id!]);
    assert.equal(r.superseded, 1);
    // While generation 1 is in flight, generation 2 is not claimed: never two attempts in flight.
    assert.equal((await w.drainOnce()).started, 0);
    assert.equal(consumer.received.length, 1);
    answer!();
    await w.settle();
    const g = generations(id!);
    assert.equal(g[0]!.state, 'superseded', 'superseded whatever the outcome, here a 200');
    assert.equal(b.attempts(id!)[0]!.status, 200, 'its attempt is recorded');
    assert.equal(b.attempts(id!)[0]!.outcome, 'delivered');
    // Generation 2 is still sent: the operator asked for a replay.
    await w.runOnce();
    assert.equal(consumer.received.length, 2);
    assert.deepEqual(
      generations(id!).map((x) => x.state),
      ['superseded', 'delivered'],
    );
  });

  it('replays --to another URL without superseding anything or changing the state', async () => {
    const staging = await startConsumer();
    try {
      await b.store.pauseBucket('s');
      const [id] = b.ingest('s', {});
      const r = await replay([id!], `${staging.url}/staging`);
      assert.equal(r.superseded, 0);
      assert.deepEqual(
        generations(id!).map((g) => [g.generation, g.state, g.latest, g.destination]),
        [
          [1, 'pending', 1, null],
          [2, 'pending', 0, `${staging.url}/staging`],
        ],
      );
      assert.equal((await b.store.getRequest(id!))!.state, 'held');
      // A paused bucket holds replay deliveries like the rest.
      assert.equal((await b.worker().runOnce()).started, 0);
      assert.equal((await b.store.replayProgress(r.id)).held, 1);
      await b.store.resumeBucket('s');
      await b.worker().runOnce();
      assert.equal(staging.received.length, 1);
      assert.equal(staging.received[0]!.url, '/staging');
      assert.equal(consumer.received.length, 1, 'generation 1 went to the bucket destination');
      assert.equal((await b.store.getRequest(id!))!.state, 'delivered');
    } finally {
      await staging.close();
    }
  });

  it("paces a replay with its own --rate below the bucket's", async () => {
    const ids = b.ingest('s', {}, {}, {});
    consumer.fallback = { status: 500 };
    const w = b.worker();
    await w.runOnce();
    b.clock.advance(1000);
    await w.runOnce();
    consumer.fallback = { status: 200 };
    await replay(ids, null, { count: 1, perMs: 10_000 }); // one every 10 s
    const p1 = await w.runOnce();
    assert.equal(p1.started, 1);
    assert.equal(p1.deferred.replay_rate, 1);
    b.clock.advance(9_999);
    assert.equal((await w.runOnce()).started, 0);
    b.clock.advance(1);
    assert.equal((await w.runOnce()).started, 1);
  });
});

describe('replay policy (pure)', () => {
  it('needs an explicit scope', () => {
    assert.match(scopeProblem({ all: false, ids: [], filtered: false })!, /--state exhausted,failed/);
    assert.equal(scopeProblem({ all: true, ids: [], filtered: false }), undefined);
    assert.equal(scopeProblem({ all: false, ids: ['x'], filtered: false }), undefined);
    assert.equal(scopeProblem({ all: false, ids: [], filtered: true }), undefined);
    assert.match(scopeProblem({ all: true, ids: [], filtered: true })!, /--all/);
  });

  it('asks a TTY and refuses a pipe only above 100', () => {
    const table: Array<[number, boolean, boolean, string]> = [
      [100, false, false, 'not_needed'],
      [101, false, false, 'refuse'],
      [101, false, true, 'ask'],
      [101, true, false, 'not_needed'],
      [5000, true, true, 'not_needed'],
    ];
    for (const [n, yes, tty, want] of table) assert.equal(confirmation(n, yes, tty), want, `${n} yes=${yes} tty=${tty}`);
  });

  const progress = (p: Partial<ReplayProgress>): ReplayProgress => ({
    total: 0,
    pending: 0,
    retrying: 0,
    delivering: 0,
    held: 0,
    delivered: 0,
    failed: 0,
    exhausted: 0,
    superseded: 0,
    settled: 0,
    paused: false,
    lastSettledAt: null,
    ...p,
  });

  it('exits 0 only when every delivery was delivered', () => {
    assert.equal(replayExitCode(progress({ total: 3, delivered: 3, settled: 3 }), false), 0);
    assert.equal(replayExitCode(progress({ total: 3, delivered: 2, failed: 1, settled: 3 }), false), 3);
    assert.equal(replayExitCode(progress({ total: 3, delivered: 2, superseded: 1, settled: 3 }), false), 3);
    assert.equal(replayExitCode(progress({ total: 3, delivered: 2, pending: 1, settled: 2 }), true), 3);
  });

  it('computes the pace and ETA from what settled since the wait began', () => {
    assert.deepEqual(pace(progress({ total: 100, settled: 30 }), 10, 0, 10_000), { perSecond: 2, etaMs: 35_000 });
    assert.deepEqual(pace(progress({ total: 100, settled: 10 }), 10, 0, 10_000), { perSecond: 0, etaMs: null });
  });
});

import assert from 'node:assert/strict';
import type { ServerResponse } from 'node:http';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { newId } from '../../src/shared/ids.js';
import { migrate } from '../../src/store/sqlite/sqlite-store.js';
import type { DrainStore } from '../../src/store/store.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';

// Idle buckets must cost a drain pass nothing (issue 11). The work is counted through the store:
// a DrainStore wrapper counts claim transactions and due queries per pass, with a manual clock and
// passes driven one at a time (no sleeps, no wall-clock assertions).

interface PassCounts {
  claims: number;
  dueQueries: number;
  /** At most one: the next due time is read at most once a pass (and cached while nothing changed). */
  nextDueQueries: number;
}

function counting(inner: DrainStore): { store: DrainStore; take: () => PassCounts } {
  let c: PassCounts = { claims: 0, dueQueries: 0, nextDueQueries: 0 };
  const store: DrainStore = {
    sharedClaims: inner.sharedClaims,
    heartbeat: (p, nowMs, ttlMs) => inner.heartbeat(p, nowMs, ttlMs),
    markStopped: (id, nowMs) => inner.markStopped(id, nowMs),
    listBuckets: () => inner.listBuckets(),
    getSettings: () => inner.getSettings(),
    claim: (bucket, options, policy) => {
      c.claims++;
      return inner.claim(bucket, options, policy);
    },
    complete: (results) => inner.complete(results),
    recoverExpired: (nowMs, buckets) => inner.recoverExpired(nowMs, buckets),
    dueBuckets: (nowMs) => {
      c.dueQueries++;
      return inner.dueBuckets(nowMs);
    },
    nextDueAt: (nowMs) => {
      c.nextDueQueries++;
      return inner.nextDueAt(nowMs);
    },
    acquireWorkerLease: (holder, info, nowMs, ttlMs) => inner.acquireWorkerLease(holder, info, nowMs, ttlMs),
    releaseWorkerLease: (holder) => inner.releaseWorkerLease(holder),
    takeChanges: () => inner.takeChanges(),
    onChange: (listener) => inner.onChange(listener),
    close: () => inner.close(),
  };
  return {
    store,
    take: () => {
      const out = c;
      c = { claims: 0, dueQueries: 0, nextDueQueries: 0 };
      return out;
    },
  };
}

describe('drain cost follows due work, not the number of buckets', () => {
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

  /**
   * Idle buckets: half with a destination, half without; some delivered a request before the
   * counting starts, one is paused with a request waiting, one without a destination holds stored
   * requests (no deliveries).
   */
  async function addIdle(n: number): Promise<void> {
    for (let i = 0; i < n; i++) {
      await b.store.createBucket({ name: `idle-${String(i).padStart(4, '0')}`, destination: i % 2 === 0 ? `${consumer.url}/idle` : null });
    }
    if (n === 0) return;
    for (let i = 0; i < Math.min(n, 20); i += 2) b.ingest(`idle-${String(i).padStart(4, '0')}`, {});
    await b.worker().runOnce();
    b.ingest('idle-0001', {}, {});
    b.ingest('idle-0020', {});
    await b.store.pauseBucket('idle-0020');
  }

  /** The per-pass counts of a fixed scenario on bucket `busy`: a first attempt, a 503, its retry. */
  async function busyScenario(): Promise<PassCounts[]> {
    await b.store.createBucket({ name: 'busy', destination: `${consumer.url}/busy` });
    const { store, take } = counting(b.drain);
    const w = b.worker({ store });
    const out: PassCounts[] = [];
    const pass = async () => {
      take();
      await w.runOnce();
      out.push(take());
    };
    await pass(); // nothing stored yet
    consumer.script({ status: 503 });
    b.ingest('busy', {}, {});
    await pass(); // two first attempts: one delivered, one to retry
    await pass(); // the retry is not due yet
    b.clock.advance(3_600_000);
    await pass(); // the retry
    await pass(); // nothing left
    return out;
  }

  it('idle buckets add no claim transaction and no due query to a pass', async () => {
    const expected = [
      { claims: 0, dueQueries: 1 },
      { claims: 1, dueQueries: 1 },
      { claims: 0, dueQueries: 1 },
      { claims: 1, dueQueries: 1 },
      { claims: 0, dueQueries: 1 },
    ];
    const alone = await busyScenario();
    assert.deepEqual(
      alone.map(({ claims, dueQueries }) => ({ claims, dueQueries })),
      expected,
    );
    assert.ok(alone.every((p) => p.nextDueQueries <= 1));
    assert.equal(consumer.received.filter((r) => r.url === '/busy').length, 3);
    await b.close();
    await consumer.close();

    b = await drainBench();
    consumer = await startConsumer();
    await addIdle(300);
    const crowded = await busyScenario();
    assert.deepEqual(crowded, alone, 'the same passes cost the same with 300 idle buckets');
    assert.equal(consumer.received.filter((r) => r.url === '/busy').length, 3);
    // The paused bucket's request waits; the one without a destination stored without a delivery.
    assert.equal(b.raw.prepare(`select state from deliveries where bucket = 'idle-0020'`).pluck().get(), 'pending');
  });

  it('a request to bucket B starts within one pass of its commit while A holds a large due backlog behind a slow consumer', async () => {
    // A: 3,000 due deliveries, concurrency 2, a consumer that never answers until the test ends.
    const held: ServerResponse[] = [];
    const slow = await startConsumer((_req, res) => void held.push(res));
    try {
      await b.store.createBucket({ name: 'a', destination: `${slow.url}/a`, drain: { concurrency: 2 } });
      await b.store.createBucket({ name: 'b', destination: `${consumer.url}/b` });
      for (let i = 0; i < 30; i++) b.ingest('a', ...Array.from({ length: 100 }, () => ({})));
      for (let i = 0; i < 50; i++) await b.store.createBucket({ name: `idle-${i}`, destination: i % 2 === 0 ? consumer.url : null });
      const { store, take } = counting(b.drain);
      const w = b.worker({ store });
      // Pass 1: A takes its two slots; its other 2,998 deliveries stay due.
      assert.equal((await w.drainOnce()).started, 2);
      await slow.waitFor(2);
      take();
      b.clock.advance(1);
      const [idB] = b.ingest('b', {});
      // Pass 2, the first after B's commit: B's first attempt starts; A, at its limit, costs no claim.
      const pass = await w.drainOnce();
      assert.equal(pass.started, 1);
      assert.equal(b.delivery(idB!).state, 'delivering');
      assert.deepEqual(take(), { claims: 1, dueQueries: 1, nextDueQueries: 1 });
      await consumer.waitFor(1);
      assert.equal(consumer.received[0]!.url, '/b');
    } finally {
      for (const res of held) res.end();
      await slow.close();
    }
  });

  it('with more buckets due than a pass takes, passes take them in turn and the next pass is at once', async () => {
    const names = ['a', 'b', 'c', 'd', 'e'];
    for (const name of names) await b.store.createBucket({ name, destination: `${consumer.url}/${name}` });
    for (const name of names) b.ingest(name, {});
    const { store, take } = counting(b.drain);
    const w = b.worker({ store, bucketsPerPass: 2 });
    const urls: string[][] = [];
    for (let pass = 0; pass < 3; pass++) {
      const seen = consumer.received.length;
      const r = await w.runOnce();
      urls.push(
        consumer.received
          .slice(seen)
          .map((x) => x.url)
          .sort(),
      );
      assert.equal(take().claims, r.started);
      // Passes that left due buckets behind ask for the next one at once.
      if (pass < 2) assert.equal(r.wakeAt, b.clock.now());
    }
    assert.deepEqual(urls, [['/a', '/b'], ['/c', '/d'], ['/e']]);
  });

  it('a bucket is due again after a retry, a release, lease recovery, a replay or a destination set; not while paused', async () => {
    await b.store.createBucket({ name: 's', destination: null });
    const [id] = b.ingest('s', {});
    const w = b.worker();
    const due = () => b.drain.dueBuckets(b.clock.now());
    assert.deepEqual(await due(), [], 'stored without a destination: nothing to deliver');
    // A replay --to of a bucket without a destination is due at once.
    await b.store.createReplay({
      id: newId(),
      bucket: 's',
      requestIds: [id!],
      selection: {},
      destination: `${consumer.url}/to`,
      rate: null,
      nowMs: b.clock.now(),
    });
    assert.deepEqual(await due(), ['s']);
    await w.runOnce();
    assert.equal(consumer.received.at(-1)!.url, '/to');
    assert.deepEqual(await due(), [], 'claimed and delivered: not due');
    // Setting a destination makes the bucket due from the next pass (no delivery yet: none was made).
    await b.store.updateBucket('s', { destination: `${consumer.url}/d` });
    assert.deepEqual(await due(), ['s']);
    await w.runOnce();
    assert.deepEqual(await due(), []);
    // A retry: due at its time, not before.
    consumer.script({ status: 500 });
    b.ingest('s', {});
    await w.runOnce();
    const retryAt = Number(b.raw.prepare(`select next_attempt_at from deliveries where bucket = 's' and state = 'retrying'`).pluck().get());
    assert.ok(retryAt > b.clock.now());
    assert.deepEqual(await due(), []);
    assert.equal(await b.drain.nextDueAt(b.clock.now()), retryAt);
    b.clock.set(retryAt);
    assert.deepEqual(await due(), ['s']);
    // Paused: not due, and not the next due time either; resumed: due again.
    await b.store.pauseBucket('s');
    assert.deepEqual(await due(), []);
    assert.equal(await b.drain.nextDueAt(b.clock.now() - 1), null);
    await b.store.resumeBucket('s');
    assert.deepEqual(await due(), ['s']);
    await w.runOnce();
    assert.deepEqual(await due(), []);
    // Lease recovery: a delivery whose worker died is due again once its lease expired.
    b.ingest('s', {});
    const held: ServerResponse[] = [];
    consumer.script((_req, res) => void held.push(res));
    const seen = consumer.received.length;
    await b.worker({ leaseMs: 60_000 }).drainOnce();
    await consumer.waitFor(seen + 1);
    assert.deepEqual(await due(), [], 'claimed: not due while in flight');
    b.clock.advance(60_000);
    const expired = await b.drain.recoverExpired(b.clock.now(), await b.drain.listBuckets());
    assert.equal(expired.length, 1);
    assert.deepEqual(await due(), ['s'], 'recovered: due again');
    for (const res of held) res.end();
  });

  it('a pass that claims the last due delivery wakes for the retry the bucket still holds', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/s`, drain: { concurrency: 1 } });
    consumer.script({ status: 500 });
    b.ingest('s', {});
    const w = b.worker();
    await w.runOnce();
    const retryAt = Number(b.raw.prepare(`select next_attempt_at from deliveries where bucket = 's' and state = 'retrying'`).pluck().get());
    assert.ok(retryAt > b.clock.now());
    b.ingest('s', {}, {});
    // Concurrency 1: the first pass takes one of the two (the other keeps the bucket due now)...
    assert.equal((await w.runOnce()).started, 1);
    // ...the next takes the other; nothing else committed, yet the retry must be its wake-up time.
    const last = await w.runOnce();
    assert.equal(last.started, 1);
    assert.equal(last.wakeAt, retryAt);
  });

  it('the migration backfills each bucket from the deliveries waiting now', async () => {
    await b.store.createBucket({ name: 'p', destination: `${consumer.url}/p` });
    const failing = await startConsumer({ status: 503 });
    await b.store.createBucket({ name: 'r', destination: `${failing.url}/r` });
    await b.store.createBucket({ name: 'idle', destination: `${consumer.url}/i` });
    b.ingest('p', {});
    const t0 = b.clock.now();
    b.ingest('r', {});
    b.clock.advance(5);
    b.ingest('p', {});
    await b.worker().runOnce();
    await failing.close();
    // p: delivered both; r: retrying. Store one more in p, then rebuild the table as a fresh migration would.
    b.ingest('p', {});
    const retryAt = Number(b.raw.prepare(`select next_attempt_at from deliveries where bucket = 'r'`).pluck().get());
    // The migrator runs only migrations named after the last one run: the later ones go too (each
    // is safe to run again, once 2026-12-05T00's and 2026-12-07T02's tables are dropped and
    // 2026-12-07T00's columns, index and table are undone).
    const providerBucketColumns = ['verify_scheme', 'verify_secrets', 'verify_tolerance_ms', 'handshakes', 'verify_token']
      .concat(['graph_client_state', 'methods', 'dedup_key', 'dedup_window_ms', 'sign_scheme', 'sign_secrets', 'on_invalid'])
      .map((c) => `alter table buckets drop column ${c};`)
      .join(' ');
    const providerRequestColumns = ['disposition', 'verify_scheme', 'verify_result', 'verify_reason', 'dedup_key', 'duplicate_of']
      .map((c) => `alter table requests drop column ${c};`)
      .join(' ');
    b.raw.exec(`drop table bucket_due; drop table bucket_pacer; drop table replay_pacer; drop table workers; drop table settings;
                alter table attempts drop column worker_id;
                drop index requests_by_disposition; drop table dedup_keys; ${providerBucketColumns} ${providerRequestColumns}
                delete from hookbucket_migration where name >= '2026-12-03T03-bucket-due'`);
    await migrate(b.raw);
    const rows = b.raw.prepare('select bucket, next_due_at from bucket_due order by bucket').all();
    assert.deepEqual(rows, [
      { bucket: 'idle', next_due_at: null },
      { bucket: 'p', next_due_at: t0 + 5 },
      { bucket: 'r', next_due_at: retryAt },
    ]);
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { systemClock } from '../../src/shared/clock.js';
import { setSetting } from '../../src/settings/settings.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { until } from '../helpers/until.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('serve runs the drain worker', () => {
  let server: TestServer;
  let consumer: Consumer;
  before(async () => {
    consumer = await startConsumer();
    server = await startTestServer({ worker: true });
  });
  after(async () => {
    await server.stop();
    await consumer.close();
  });

  it('forwards a request that arrives while it runs', async () => {
    await server.store.createBucket({ name: 'live', destination: `${consumer.url}/in` });
    const res = await fetch(`${server.url}/b/live/path?q=1`, { method: 'POST', body: 'hello' });
    assert.equal(res.status, 200);
    const { id } = (await res.json()) as { id: string };
    await consumer.waitFor(1);
    assert.equal(consumer.received[0]!.url, '/in/path?q=1');
    assert.equal(consumer.received[0]!.body.toString(), 'hello');
    await until(async () => (await server.store.getRequest(id))?.state === 'delivered', 'delivered state');
  });

  it('makes a second worker on the same database refuse, naming the holder', async () => {
    const r = await runCli(['--db', server.db, 'worker', '--once']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /error \[worker_active\]: another drain worker is active on this database: pid \d+ on /);
  });
});

describe('hookbucket worker', () => {
  const t = tempDir();
  let consumer: Consumer;
  let store: SqliteStore;
  before(async () => {
    consumer = await startConsumer();
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
  });
  after(async () => {
    await store.close();
    await consumer.close();
    t.remove();
  });

  it('a lease not longer than a bucket timeout: the worker starts, skips that bucket and warns naming it', async () => {
    await store.createBucket({ name: 'slow', destination: consumer.url, drain: { timeoutMs: 60_000 } });
    const before = consumer.received.length;
    const r = await runCli(['--db', t.db, 'worker', '--once', '--lease', '30s', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.match(
      r.stderr,
      /bucket slow: attempt timeout 1m is not shorter than the running worker's lease 30s; its deliveries wait \(ingest keeps storing\)/,
    );
    assert.equal(consumer.received.length, before);
    await store.deleteBucket('slow', { force: true });
  });

  it('--once delivers what is due and prints a JSON summary', async () => {
    await store.createBucket({ name: 'w', destination: consumer.url });
    const server = await startTestServer({ db: t.db });
    try {
      for (let i = 0; i < 3; i++) assert.equal((await fetch(`${server.url}/b/w`, { method: 'POST', body: String(i) })).status, 200);
    } finally {
      await server.stop();
    }
    const before = consumer.received.length;
    const r = await runCli(['--db', t.db, 'worker', '--once', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json().started, 3);
    assert.equal(consumer.received.length - before, 3);
    const counts = await store.bucketCounts('w');
    assert.deepEqual(counts.states, { delivered: 3 });
  });

  // The composition root's wiring: the real binary reads the setting from the database and its
  // delivery agent refuses the connection; the consumer on 127.0.0.1 sees nothing. Last in this
  // describe: the setting is database-wide, and the delivery it leaves retrying stays due.
  it('destinations public: --once records a destination_refused attempt, retried on the schedule, and sends nothing', async () => {
    await store.createBucket({ name: 'd', destination: `${consumer.url}/hooks` });
    await setSetting(store, 'destinations', 'public');
    const server = await startTestServer({ db: t.db });
    let id: string;
    try {
      const res = await fetch(`${server.url}/b/d`, { method: 'POST', body: 'x' });
      assert.equal(res.status, 200);
      id = ((await res.json()) as { id: string }).id;
    } finally {
      await server.stop();
    }
    const before = consumer.received.length;
    const r = await runCli(['--db', t.db, 'worker', '--once', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json().started, 1);
    assert.equal(consumer.received.length, before);
    const [delivery] = await store.requestHistory(id);
    assert.equal(delivery!.state, 'retrying');
    const [attempt] = delivery!.attemptLog;
    assert.equal(attempt!.errorClass, 'destination_refused');
    assert.equal(attempt!.reason, 'error_destination_refused');
    assert.match(attempt!.errorMessage!, /destination refused: 127\.0\.0\.1 is a loopback address \(settings: destinations public\)/);
  });
});

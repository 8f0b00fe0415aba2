import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { systemClock } from '../../src/shared/clock.js';
import { setSetting } from '../../src/settings/settings.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { startTestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/temp-dir.js';

// The composition root's wiring: `hookbucket worker` (the real binary) reads the setting from the
// database and its delivery agent refuses the connection; the consumer on 127.0.0.1 sees nothing.

describe('hookbucket worker under the destinations setting', () => {
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

  it('public: --once records a destination_refused attempt, retried on the schedule, and sends nothing', async () => {
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
    const r = await runCli(['--db', t.db, 'worker', '--once', '--json'], { HOOKBUCKET_API: '' });
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json().started, 1);
    assert.equal(consumer.received.length, 0);
    const [delivery] = await store.requestHistory(id);
    assert.equal(delivery!.state, 'retrying');
    const [attempt] = delivery!.attemptLog;
    assert.equal(attempt!.errorClass, 'destination_refused');
    assert.equal(attempt!.reason, 'error_destination_refused');
    assert.match(attempt!.errorMessage!, /destination refused: 127\.0\.0\.1 is a loopback address \(settings: destinations public\)/);
  });
});

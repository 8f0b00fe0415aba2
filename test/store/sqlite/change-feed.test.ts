import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { drainBench, type DrainBench } from '../../helpers/drain.js';
import { until } from '../../helpers/until.js';

// The drain store's change feed on SQLite: takeChanges() from PRAGMA data_version and the bucket
// epoch, onChange() from a data_version poll that runs only while someone listens.
describe('SQLite change feed (takeChanges, onChange)', () => {
  let b: DrainBench;
  beforeEach(async () => {
    b = await drainBench();
  });
  afterEach(() => b.close());

  it('the first call reports everything; then only what other connections committed', async () => {
    assert.deepEqual(await b.drain.takeChanges(), { changed: true, bucketsChanged: true });
    assert.deepEqual(await b.drain.takeChanges(), { changed: false, bucketsChanged: false }, 'nothing committed since');
    await b.store.createBucket({ name: 'feed' });
    assert.deepEqual(await b.drain.takeChanges(), { changed: true, bucketsChanged: true }, 'a bucket created');
    b.ingest('feed', { body: 'x' });
    assert.deepEqual(await b.drain.takeChanges(), { changed: true, bucketsChanged: false }, 'a request stored: no bucket change');
    await b.store.pauseBucket('feed');
    await b.store.resumeBucket('feed');
    assert.deepEqual(await b.drain.takeChanges(), { changed: true, bucketsChanged: true }, 'two bucket writes, one report');
    assert.deepEqual(await b.drain.takeChanges(), { changed: false, bucketsChanged: false });
  });

  it("the drain store's own commits are not reported", async () => {
    await b.store.createBucket({ name: 'own' });
    await b.drain.takeChanges();
    await b.drain.acquireWorkerLease('w1', '{}', b.clock.now(), 15_000);
    assert.deepEqual(await b.drain.takeChanges(), { changed: false, bucketsChanged: false });
  });

  it('onChange calls a listener after another connection commits, until it unsubscribes; it does not consume takeChanges', async () => {
    await b.store.createBucket({ name: 'wake' });
    await b.drain.takeChanges();
    let calls = 0;
    const unsubscribe = b.drain.onChange(() => calls++);
    try {
      b.ingest('wake', { body: 'x' });
      await until(() => calls >= 1, 'the listener to hear the commit', 5_000);
    } finally {
      unsubscribe();
    }
    assert.deepEqual(await b.drain.takeChanges(), { changed: true, bucketsChanged: false }, 'the notice left the change for takeChanges');
    const heard = calls;
    b.ingest('wake', { body: 'y' });
    // Three poll periods (100 ms each) with nobody subscribed: no call.
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(calls, heard);
  });

  it('a listener subscribed after a commit is not called for it', async () => {
    await b.store.createBucket({ name: 'late' });
    b.ingest('late', { body: 'x' });
    let early = 0;
    let late = 0;
    const un1 = b.drain.onChange(() => early++);
    b.ingest('late', { body: 'y' });
    const un2 = b.drain.onChange(() => late++);
    try {
      await until(() => early >= 1, 'the first listener to hear the second commit', 5_000);
      await new Promise((r) => setTimeout(r, 250));
      assert.equal(late, 0);
    } finally {
      un1();
      un2();
    }
  });
});

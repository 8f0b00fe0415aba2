import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../../src/config/config.js';
import { systemClock } from '../../../src/shared/clock.js';
import { silentLogger } from '../../../src/shared/logger.js';
import { openStore } from '../../../src/store/open-store.js';
import { TAIL_ID_LOOKBACK_MS } from '../../../src/store/postgres/pg-history.js';
import type { IngestSink, Store, TailCursor } from '../../../src/store/store.js';
import { captured, idAt } from '../contract/harness.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases, type TestDatabase } from '../../helpers/pg-database.js';
import { tempDir } from '../../helpers/temp-dir.js';

// With several receivers, ids (UUIDv7 from each receiver's clock) are not in commit order: a
// request can commit after one with a newer id. `requests tail` must still give it, once.

const server = pgTestServer();

describe('requests tail on PostgreSQL with requests committed out of id order', {
  skip: server === undefined ? PG_SKIP_REASON : false,
}, () => {
  let tdb: TestDatabase;
  let store: Store;
  let sink: IngestSink;
  const spool = tempDir('hookbucket-pg-tail-');

  before(async () => {
    await sweepStaleTestDatabases(server!);
    tdb = await createTestDatabase(server!);
    const config = loadConfig(
      {},
      {},
      { db: tdb.url, durability: 'normal', minFreeDisk: '0', logLevel: 'silent', worker: false, spoolDir: spool.dir },
    );
    const opened = openStore(config, { clock: systemClock });
    store = await opened.store();
    sink = await opened.ingestSink({ logger: silentLogger });
    await store.createBucket({ name: 'b' });
  });
  after(async () => {
    await sink?.close();
    await store?.close();
    await tdb?.drop();
    spool.remove();
  });

  const commit = (at: number, id = idAt(at)) => sink.submit(captured('b', at, { id }), { createDelivery: false }).then(() => id);
  const requestIds = (events: Array<{ kind: string; request?: { id: string } }>) =>
    events.map((e) => (e.kind === 'request' ? e.request!.id : e.kind));

  it('gives a request committed after a newer one, exactly once, and only what is new since the start', async () => {
    const start = Date.now();
    // Stored before the tail starts, within the look-back of the newest id: not new.
    const before1 = await commit(start - 2000);
    const before2 = await commit(start - 1000);
    // As tail.ts starts: after the newest request, attempts from now.
    let cursor: TailCursor = { requestId: before2, sinceMs: start, seen: [] };
    let r = await store.tail('b', cursor);
    assert.deepEqual(r.events, [], 'requests stored before the tail started are not new');
    cursor = r.cursor;

    // Receiver X makes its id at +1 s but commits late; receiver Y's request at +2 s commits first.
    const newer = await commit(start + 2000);
    r = await store.tail('b', cursor);
    assert.deepEqual(requestIds(r.events), [newer]);
    cursor = r.cursor;
    assert.equal(cursor.requestId, newer);

    const older = await commit(start + 1000);
    r = await store.tail('b', cursor);
    assert.deepEqual(requestIds(r.events), [older], 'the late commit below the cursor');
    assert.equal(r.cursor.requestId, newer, 'the cursor stays at the newest id');
    cursor = r.cursor;
    for (let i = 0; i < 3; i++) {
      r = await store.tail('b', cursor);
      assert.deepEqual(r.events, [], 'each request once');
      cursor = r.cursor;
    }

    // A newer request and another late one in the same call: both, in id order.
    const late2 = await commit(start + 2500);
    const next = await commit(start + 3000);
    r = await store.tail('b', cursor);
    assert.deepEqual(requestIds(r.events), [late2, next]);
    cursor = r.cursor;
    assert.deepEqual(
      new Set(cursor.seen),
      new Set([before1, before2, newer, older, late2, next]),
      'seen holds the window of ids below the newest',
    );

    // Once the newest id is more than the look-back past them, they leave `seen`, which stays small.
    const far = await commit(start + 3000 + TAIL_ID_LOOKBACK_MS + 1000);
    r = await store.tail('b', cursor);
    assert.deepEqual(requestIds(r.events), [far]);
    assert.deepEqual(r.cursor.seen, [far]);
    assert.deepEqual((await store.tail('b', r.cursor)).events, []);
  });

  it('export reads every request committed before it started, whatever its id', async () => {
    // A request with an id below others, committed last: export still has it (the bound is the
    // newest id when it starts, and every page reads what is committed by then).
    const low = await commit(Date.now() - 60_000);
    const exported: string[] = [];
    for await (const req of store.iterateRequests('b', {})) exported.push(req.id);
    assert.ok(exported.includes(low));
    assert.equal(exported.length, 8);
    assert.deepEqual([...exported].sort(), exported, 'in id order');
  });
});

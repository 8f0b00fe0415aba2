import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { createMetrics } from '../../src/metrics/metrics.js';
import { ManualClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { openStore } from '../../src/store/open-store.js';
import type { Store } from '../../src/store/store.js';
import { parseExposition } from '../helpers/exposition.js';
import { createTestDatabase, PG_SKIP_REASON, pgTestServer, withPgClient, type TestDatabase } from '../helpers/pg-database.js';

// The database gauges on PostgreSQL: pg_database_size, no WAL gauge (the server's WAL is shared by
// every database on it), and the per-bucket figures through the same Store.statsSamples.

const server = pgTestServer();

describe('metrics on PostgreSQL', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
  let db: TestDatabase;
  let store: Store;
  before(async () => {
    db = await createTestDatabase(server!);
    store = await openStore(loadConfig({}, {}, { db: db.url }), { clock: new ManualClock() }).store();
  });
  after(async () => {
    await store?.close();
    await db?.drop();
  });

  it('reports pg_database_size and leaves the WAL gauge out', async () => {
    await store.createBucket({ name: 'pg', destination: 'http://127.0.0.1:9/in' });
    const size = await store.storageSize();
    const expected = await withPgClient(db.url, async (c) =>
      Number((await c.query('select pg_database_size(current_database()) as n')).rows[0].n),
    );
    assert.equal(size.walBytes, null);
    assert.ok(size.databaseBytes > 0);
    // Another connection's figure of the same database, a moment apart: equal unless a write came between (none here).
    assert.equal(size.databaseBytes, expected);
    const metrics = createMetrics({ source: store, clock: new ManualClock(), logger: silentLogger, processMetrics: false });
    const m = parseExposition((await metrics.render()).body);
    assert.equal(m.value('hookbucket_database_bytes'), size.databaseBytes);
    assert.equal(m.value('hookbucket_database_wal_bytes'), undefined);
    assert.equal(m.types.get('hookbucket_database_wal_bytes'), 'gauge');
    assert.equal(m.value('hookbucket_deliveries', { bucket: 'pg', state: 'pending' }), 0);
    assert.equal(m.value('hookbucket_oldest_waiting_age_seconds', { bucket: 'pg' }), 0);
  });
});

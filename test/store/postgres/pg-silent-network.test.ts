import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../../../src/config/config.js';
import { systemClock } from '../../../src/shared/clock.js';
import { AppError } from '../../../src/shared/errors.js';
import { silentLogger } from '../../../src/shared/logger.js';
import { openStore } from '../../../src/store/open-store.js';
import { storageErrorCode } from '../../../src/store/storage-error.js';
import type { PgStore } from '../../../src/store/postgres/pg-store.js';
import type { IngestSink, Store } from '../../../src/store/store.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases, type TestDatabase } from '../../helpers/pg-database.js';
import { Relay } from '../../helpers/tcp-relay.js';
import { tempDir } from '../../helpers/temp-dir.js';
import { until } from '../../helpers/until.js';

const server = pgTestServer();

/** "Answered at its deadline, not held until TCP gives up (minutes)": slack for a loaded machine. */
const NOT_HUNG_SLACK_MS = 5_000;

/**
 * A network to PostgreSQL that drops packets without a reset (a black hole): the receiver's bucket
 * lookup must not hang the request, and /healthz must say degraded without traffic finding it.
 */
describe('PostgreSQL behind a silent network', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
  let tdb: TestDatabase;
  const spool = tempDir('hookbucket-pg-silent-');
  before(async () => {
    await sweepStaleTestDatabases(server!);
    tdb = await createTestDatabase(server!);
  });
  after(async () => {
    await tdb?.drop();
    spool.remove();
  });

  test('a bucket lookup answers within the lock timeout: the cached bucket, or storage_error; the idle sink turns degraded', async () => {
    const u = new URL(tdb.url);
    const relay = new Relay({ host: u.hostname, port: Number(u.port || 5432) });
    await relay.start();
    const via = new URL(tdb.url);
    via.port = String(relay.port);
    const lockTimeoutMs = 600;
    const config = loadConfig(
      { HOOKBUCKET_DB: via.toString(), HOOKBUCKET_LOCK_TIMEOUT: `${lockTimeoutMs}ms`, HOOKBUCKET_SPOOL_DIR: spool.dir },
      {},
    );
    const opened = openStore(config, { clock: systemClock });
    let store: Store | undefined;
    let sink: IngestSink | undefined;
    try {
      store = await opened.store();
      await store.createBucket({ name: 'known' });
      sink = await opened.ingestSink({ logger: silentLogger });
      assert.ok((await store.resolveBucket('known')) !== undefined);
      // The first lookup opens the LISTEN connection, and its connect drops the cache (notices sent
      // before LISTEN are lost): wait for it, so that the lookup below is the one left cached.
      await until(() => (store as PgStore).listeningForBuckets, 'the bucket LISTEN connection', 15_000);
      assert.ok((await store.resolveBucket('known')) !== undefined);
      assert.deepEqual(sink.health(), { ok: true });

      relay.blackhole = true;
      // Past the epoch check interval (1 s), so the next lookup asks the database again.
      await new Promise((r) => setTimeout(r, 1_100));
      let t0 = Date.now();
      const cached = await store.resolveBucket('known');
      assert.equal(cached?.name, 'known', 'the cached bucket is served (the batch checks it again under its lock)');
      assert.ok(Date.now() - t0 <= lockTimeoutMs + NOT_HUNG_SLACK_MS, `answered in ${Date.now() - t0} ms`);

      t0 = Date.now();
      await assert.rejects(
        store.resolveBucket('never-seen'),
        (e: unknown) => e instanceof AppError && e.code === 'storage_error' && storageErrorCode(e) === 'storage_error',
      );
      assert.ok(Date.now() - t0 <= lockTimeoutMs + NOT_HUNG_SLACK_MS, `answered in ${Date.now() - t0} ms`);

      // No request reached the sink; its idle probe finds the silence.
      await until(() => !sink!.health().ok, 'the idle sink reporting degraded', 15_000);
      const h = sink.health();
      assert.equal(!h.ok && h.code, 'storage_error');

      relay.blackhole = false;
      await until(() => sink!.health().ok, 'health ok once the network answers again', 15_000);
    } finally {
      relay.blackhole = false;
      await sink?.close().catch(() => undefined);
      await relay.stop();
      await store?.close().catch(() => undefined);
    }
  });
});

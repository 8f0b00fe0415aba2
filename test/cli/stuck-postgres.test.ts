import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { startServer } from '../../src/main.js';
import { systemClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { runCli } from '../helpers/cli.js';
import { createTestDatabase, PG_SKIP_REASON, pgTestServer, sweepStaleTestDatabases, type TestDatabase } from '../helpers/pg-database.js';

const pgServer = pgTestServer();

describe('stuck buckets on PostgreSQL: the workers table gives the lease', {
  skip: pgServer === undefined ? PG_SKIP_REASON : false,
}, () => {
  let pgDb: TestDatabase;
  const cli = (...args: string[]) => runCli(['--db', pgDb.url, ...args], { HOOKBUCKET_API: '' });
  before(async () => {
    await sweepStaleTestDatabases(pgServer!);
    pgDb = await createTestDatabase(pgServer!);
  });
  after(async () => {
    await pgDb?.drop();
  });

  it("a running worker's --lease applies; once it stops, the default does, and the bucket is reported stuck", async () => {
    const config = loadConfig(
      {},
      {},
      { db: pgDb.url, port: 0, host: '127.0.0.1', minFreeDisk: '0', logLevel: 'silent', worker: true, admin: false, leaseMs: '5m' },
    );
    const running = await startServer(config, { clock: systemClock, logger: silentLogger });
    try {
      const created = await cli('bucket', 'create', 'slow', '--timeout', '2m');
      assert.equal(created.code, 0, created.stderr);
      const over = await cli('bucket', 'update', 'slow', '--timeout', '6m');
      assert.equal(over.code, 2);
      assert.match(over.stderr, /^error \[timeout_exceeds_lease\]: --timeout 6m must be shorter than the running worker's lease 5m/);
      assert.equal((await cli('bucket', 'show', 'slow', '--json')).json().stuck, null);
    } finally {
      await running.close(2000);
    }
    // The worker marked itself stopped: the configured default (60s) applies now.
    const json = (await cli('bucket', 'show', 'slow', '--json')).json();
    assert.deepEqual(json.stuck, { bucket: 'slow', timeout_ms: 120_000, lease_ms: 60_000, lease_source: 'default' });
    const stats = (await cli('stats', '--json')).json();
    assert.equal(stats.stuck_buckets, 1);
    const health = await cli('health', '--fail-on', 'exhausted > 0', '--json');
    assert.equal(health.code, 3);
    assert.deepEqual(health.json().stuck, [{ bucket: 'slow', timeout_ms: 120_000, lease_ms: 60_000, lease_source: 'default' }]);
    const refused = await cli('bucket', 'create', 'slow2', '--timeout', '1m');
    assert.equal(refused.code, 2);
    assert.match(refused.stderr, /no worker is running/);
  });
});

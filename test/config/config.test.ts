import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { loadConfig, settings } from '../../src/config/config.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';

describe('loadConfig', () => {
  it('uses the documented defaults', () => {
    const c = loadConfig({}, {});
    assert.equal(c.db, 'data/hookbucket.db');
    assert.equal(c.port, 8787);
    assert.equal(c.host, '0.0.0.0');
    assert.equal(c.durability, 'full');
    assert.equal(c.trustProxy, false);
    assert.equal(c.maxInflightBytes, 256 * 1024 * 1024);
    assert.equal(c.minFreeDisk, 1024 ** 3);
    assert.equal(c.lockTimeoutMs, 2000);
    assert.ok(Object.isFrozen(c));
  });

  it('orders precedence flags > environment > .env > defaults', () => {
    const env = { HOOKBUCKET_PORT: '9001', HOOKBUCKET_DURABILITY: 'normal' };
    const dotenv = { HOOKBUCKET_PORT: '9002', HOOKBUCKET_HOST: '127.0.0.1', HOOKBUCKET_DURABILITY: 'full' };
    const c = loadConfig(env, dotenv, { port: '9003' });
    assert.equal(c.port, 9003, 'flag wins');
    assert.equal(c.durability, 'normal', 'environment beats .env');
    assert.equal(c.host, '127.0.0.1', '.env beats the default');
  });

  it('rejects bad values with the variable named', () => {
    assert.throws(() => loadConfig({ HOOKBUCKET_DURABILITY: 'fast' }, {}), /HOOKBUCKET_DURABILITY/);
    assert.throws(() => loadConfig({}, { HOOKBUCKET_PORT: 'x' }), /HOOKBUCKET_PORT in \.env/);
    assert.throws(() => loadConfig({}, {}, { maxInflightBytes: '0' }), /--max-inflight-bytes/);
  });

  it('refuses a flag duration or size without a unit, with the fix', () => {
    assert.throws(() => loadConfig({}, {}, { leaseMs: '60000' }), /invalid --lease: "60000" has no unit: write 60000s or 60000ms/);
    assert.throws(() => loadConfig({}, {}, { adminQueryBudgetMs: '10' }), /--admin-query-budget.*write 10s or 10ms/);
    assert.throws(() => loadConfig({}, {}, { maxInflightBytes: '1000' }), /--max-inflight-bytes.*write 1000B/);
    assert.equal(loadConfig({}, {}, { minFreeDisk: '0' }).minFreeDisk, 0, 'a bare 0 needs no unit');
  });

  it('reads an environment duration or size without a unit the old way (ms, bytes), with a warning naming the variable and the fix', () => {
    const warnings: string[] = [];
    const c = loadConfig(
      { HOOKBUCKET_LEASE: '60000', HOOKBUCKET_MAX_INFLIGHT_BYTES: '1048576' },
      { HOOKBUCKET_SHUTDOWN_GRACE: '5000', HOOKBUCKET_LOCK_TIMEOUT: '3s' },
      {},
      (m) => warnings.push(m),
    );
    assert.equal(c.leaseMs, 60_000);
    assert.equal(c.shutdownGraceMs, 5000);
    assert.equal(c.maxInflightBytes, 1_048_576);
    assert.equal(c.lockTimeoutMs, 3000);
    assert.deepEqual(warnings, [
      'HOOKBUCKET_MAX_INFLIGHT_BYTES=1048576 has no unit: read as 1048576 bytes (1.0 MiB); write 1048576B or 1.0MiB. A future release will refuse a number without a unit',
      'HOOKBUCKET_LEASE=60000 has no unit: read as 60000 ms (1m); write 60000ms or 1m. A future release will refuse a number without a unit',
      'HOOKBUCKET_SHUTDOWN_GRACE=5000 in .env has no unit: read as 5000 ms (5s); write 5000ms or 5s. A future release will refuse a number without a unit',
    ]);
    // A flag given wins without a warning about the variable it overrides.
    const none: string[] = [];
    loadConfig({ HOOKBUCKET_LEASE: '60000' }, {}, { leaseMs: '1m' }, (m) => none.push(m));
    assert.deepEqual(none, []);
    assert.throws(() => loadConfig({ HOOKBUCKET_LEASE: '0' }, {}), /HOOKBUCKET_LEASE/, 'still positive');
  });

  it('documents every setting in .env.example with its default', () => {
    const example = readFileSync(new URL('../../../.env.example', import.meta.url), 'utf8');
    for (const s of settings) {
      assert.match(example, new RegExp(`^#?\\s*${s.env}=${s.default.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'), s.env);
    }
  });
});

describe('loadConfig: the database, its pool and the spool folder', () => {
  it('keeps the spool folder beside a SQLite file by default, as before --spool-dir', () => {
    assert.equal(loadConfig({}, {}).spoolDir, 'data/hookbucket.db-spool');
    assert.equal(loadConfig({ HOOKBUCKET_DB: '/var/lib/hb/hb.db' }, {}).spoolDir, '/var/lib/hb/hb.db-spool');
    assert.equal(
      loadConfig({ HOOKBUCKET_DB: '/var/lib/hb/hb.db' }, { HOOKBUCKET_SPOOL_DIR: '' }).spoolDir,
      '/var/lib/hb/hb.db-spool',
      'empty: the default',
    );
  });

  it('takes a postgres:// or postgresql:// URL as is, with data/spool as the default spool folder', () => {
    for (const url of [
      'postgres://app:s3cret@db.internal:5432/hookbucket',
      'postgresql://app@127.0.0.1/hb?sslmode=require',
      'POSTGRES://h/db',
    ]) {
      const c = loadConfig({ HOOKBUCKET_DB: url }, {});
      assert.equal(c.db, url);
      assert.equal(c.spoolDir, join('data', 'spool'));
    }
  });

  it('takes --spool-dir over the derived folder, for a path and for a URL', () => {
    assert.equal(loadConfig({}, {}, { spoolDir: '/srv/spool' }).spoolDir, '/srv/spool');
    assert.equal(loadConfig({ HOOKBUCKET_DB: 'postgres://h/db', HOOKBUCKET_SPOOL_DIR: '/srv/spool' }, {}).spoolDir, '/srv/spool');
  });

  it('bounds --db-pool (default 10)', () => {
    assert.equal(loadConfig({}, {}).dbPool, 10);
    assert.equal(loadConfig({ HOOKBUCKET_DB_POOL: '25' }, {}).dbPool, 25);
    assert.throws(() => loadConfig({}, {}, { dbPool: '0' }), /--db-pool/);
    assert.throws(() => loadConfig({ HOOKBUCKET_DB_POOL: '1001' }, {}), /HOOKBUCKET_DB_POOL/);
  });

  it('refuses a URL that does not parse, without echoing its password', () => {
    assert.throws(
      () => loadConfig({ HOOKBUCKET_DB: 'postgres://app:s3cret@[bad/db' }, {}),
      (e: Error) => /HOOKBUCKET_DB/.test(e.message) && !e.message.includes('s3cret'),
    );
  });
});

import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { ManualClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { openStore } from '../../src/store/open-store.js';
import { openSqlite } from '../../src/store/sqlite/open.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { createTestDatabase, PG_SKIP_REASON, pgTestServer, withPgClient } from '../helpers/pg-database.js';
import { tempDir } from '../helpers/temp-dir.js';
import { captured, DEST, T0 } from './contract/harness.js';

// A claimed attempt carries what re-signing needs (src/policy/resign.ts): the request's stored
// verdict and dedup key, read in the claim on both dialects. The columns are written here with
// plain SQL, as ingest (and `requests verify`, import) write them; the claim is the contract's.

type Exec = (sql: string, params: unknown[]) => Promise<void>;

async function claimsCarryVerdicts(db: string, exec: (db: string) => { run: Exec; close(): Promise<void> }): Promise<void> {
  const clock = new ManualClock(T0);
  const openers = openStore(
    loadConfig(
      {},
      {},
      { db, port: 0, host: '127.0.0.1', durability: 'normal', minFreeDisk: '0', lockTimeoutMs: '5s', logLevel: 'silent', worker: false },
    ),
    { clock, useCallerClock: true },
  );
  const store = await openers.store();
  const drain = await openers.drainStore({ checkpoints: false });
  const sink = await openers.ingestSink({ logger: silentLogger });
  const raw = exec(db);
  try {
    await store.createBucket({ name: 'b', destination: DEST });
    const reqs = [captured('b', T0), captured('b', T0 + 1), captured('b', T0 + 2)];
    await Promise.all(reqs.map((r) => sink.submit(r, { createDelivery: true })));
    await raw.run('update requests set verify_scheme = $1, verify_result = $2, verify_reason = $3, dedup_key = $4 where id = $5', [
      'stripe',
      'verified',
      null,
      'j:evt_1',
      reqs[0]!.id,
    ]);
    await raw.run('update requests set verify_scheme = $1, verify_result = $2, verify_reason = $3, dedup_key = $4 where id = $5', [
      'github',
      'unverified',
      'imported',
      null,
      reqs[1]!.id,
    ]);
    const bucket = (await drain.listBuckets()).find((x) => x.name === 'b')!;
    const r = await drain.claim(bucket, { nowMs: T0 + 10, limit: 10, leaseUntilMs: T0 + 60_010 }, {});
    assert.deepEqual(
      r.claimed.map((a) => [a.requestId, a.verdict, a.dedupKey]),
      [
        [reqs[0]!.id, { scheme: 'stripe', result: 'verified', reason: null }, 'j:evt_1'],
        [reqs[1]!.id, { scheme: 'github', result: 'unverified', reason: 'imported' }, null],
        [reqs[2]!.id, null, null],
      ],
    );
  } finally {
    await sink.close();
    await drain.close();
    await store.close();
    await raw.close();
  }
}

describe('a claimed attempt carries the request verdict and dedup key', () => {
  it('sqlite', async () => {
    const t = tempDir('hookbucket-resign-claim-');
    after(() => t.remove());
    // Migrated first, as the contract's template is.
    await (await SqliteStore.open({ path: t.db, durability: 'normal', busyTimeoutMs: 5000, clock: new ManualClock(T0) })).close();
    await claimsCarryVerdicts(t.db, (db) => {
      const c = openSqlite(db, { durability: 'normal', busyTimeoutMs: 5000 });
      return {
        run: async (sql, params) => void c.prepare(sql.replace(/\$\d+/g, '?')).run(...params),
        close: async () => void c.close(),
      };
    });
  });
  const server = pgTestServer();
  it('postgres', { skip: server === undefined ? PG_SKIP_REASON : false }, async () => {
    const database = await createTestDatabase(server!);
    try {
      await claimsCarryVerdicts(database.url, (db) => ({
        run: (sql, params) => withPgClient(db, async (c) => void (await c.query(sql, params))),
        close: async () => {},
      }));
    } finally {
      await database.drop();
    }
  });
});

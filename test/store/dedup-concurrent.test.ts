import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { systemClock } from '../../src/shared/clock.js';
import { newId } from '../../src/shared/ids.js';
import { silentLogger } from '../../src/shared/logger.js';
import { openStore } from '../../src/store/open-store.js';
import type { CapturedRequest, IngestSink, Store } from '../../src/store/store.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases, type TestDatabase } from '../helpers/pg-database.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * Dedup inside the ingest commit, under concurrency: several receivers (separate store instances,
 * each with its own sink and connections, as separate `serve` processes would have) store copies of
 * one event at the same moment. Exactly one copy is accepted and gets a delivery; every other one is
 * a duplicate of it. Also when the key has expired and every copy races to take it over.
 */

const RECEIVERS = 6;
const ROUNDS = 8;
const WINDOW_MS = 60_000;

function copy(bucket: string, key: string, at: number): CapturedRequest {
  return {
    id: newId(),
    bucket,
    receivedAt: at,
    method: 'POST',
    path: '',
    query: null,
    rawHeaders: ['X-GitHub-Delivery', key],
    body: Buffer.from('{}'),
    peer: '127.0.0.1',
    dedup: { key: `h:${key}`, windowMs: WINDOW_MS },
  };
}

async function race(db: string, spool: string): Promise<void> {
  const config = loadConfig({ HOOKBUCKET_DB: db, HOOKBUCKET_SPOOL_DIR: spool, HOOKBUCKET_LOCK_TIMEOUT: '20s' }, {});
  const openers = Array.from({ length: RECEIVERS }, () => openStore(config, { clock: systemClock }));
  const stores: Store[] = [];
  const sinks: IngestSink[] = [];
  try {
    for (const o of openers) {
      stores.push(await o.store());
      sinks.push(await o.ingestSink({ logger: silentLogger }));
    }
    const store = stores[0]!;
    await store.createBucket({ name: 'gh', destination: 'http://127.0.0.1:9/in' });
    const now = Date.now();
    for (let round = 0; round < ROUNDS; round++) {
      const key = `delivery-${round}`;
      // Odd rounds: the key is held by an expired request first, so every copy races to take it over.
      let expired: string | undefined;
      if (round % 2 === 1) {
        const old = copy('gh', key, now - 2 * WINDOW_MS);
        await sinks[0]!.submit(old, { createDelivery: true });
        expired = old.id;
      }
      const copies = sinks.map(() => copy('gh', key, now + round));
      await Promise.all(copies.map((c, i) => sinks[i]!.submit(c, { createDelivery: true })));
      const got = await Promise.all(copies.map((c) => store.getRequest(c.id)));
      const accepted = got.filter((r) => r!.disposition === 'accepted');
      assert.equal(accepted.length, 1, `round ${round}: exactly one copy accepted, got ${accepted.length}`);
      const original = accepted[0]!;
      assert.equal((await store.requestHistory(original.id)).length, 1, 'the accepted copy has its delivery');
      for (const r of got) {
        if (r!.id === original.id) continue;
        assert.equal(r!.disposition, 'duplicate');
        assert.equal(r!.duplicateOf, original.id, `round ${round}: a duplicate names the accepted copy`);
        assert.notEqual(r!.duplicateOf, expired);
        assert.deepEqual(await store.requestHistory(r!.id), []);
      }
    }
    const counts = await store.bucketCounts('gh');
    // Initial copies: one per round, plus the expired holders of odd rounds (each accepted in its time).
    assert.equal(counts.states.pending, ROUNDS + ROUNDS / 2);
    assert.equal(counts.states.duplicate, ROUNDS * (RECEIVERS - 1));
  } finally {
    for (const s of sinks) await s.close();
    for (const s of stores) await s.close();
  }
}

describe('dedup under concurrent receivers', () => {
  test('sqlite: several sinks on one file, one key: exactly one accepted with a delivery', async () => {
    const t = tempDir('hookbucket-dedup-race-');
    try {
      await race(t.db, t.dir);
    } finally {
      t.remove();
    }
  });

  const server = pgTestServer();
  describe('postgres', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
    let tdb: TestDatabase;
    const spool = tempDir('hookbucket-dedup-race-pg-');
    before(async () => {
      await sweepStaleTestDatabases(server!);
      tdb = await createTestDatabase(server!);
    });
    after(async () => {
      await tdb?.drop();
      spool.remove();
    });
    test('several receivers (store instances), one key: exactly one accepted with a delivery', async () => {
      await race(tdb.url, spool.dir);
    });
  });
});

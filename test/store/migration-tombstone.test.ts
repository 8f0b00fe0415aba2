import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { systemClock } from '../../src/shared/clock.js';
import { SqliteDrainStore } from '../../src/store/sqlite/sqlite-drain.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { databaseAt } from '../helpers/database-at.js';
import { tempDir } from '../helpers/temp-dir.js';

const PREVIOUS = '2026-12-02T06-claim-order';

describe('migration 2026-12-03T00-bucket-tombstone', () => {
  const t = tempDir();
  after(() => t.remove());

  it('turns every bucket name with rows but no bucket into a deleting tombstone, which the purge finishes', async () => {
    // A database as the previous release left it, with the orphans a failed delete left behind.
    const { raw, close } = await databaseAt(t.db, PREVIOUS);
    const ins = (sql: string, ...args: unknown[]) => raw.prepare(sql).run(...args);
    ins(`insert into buckets (name, destination, max_body, created_at, updated_at) values ('live', 'http://127.0.0.1:9/', 1024, 1, 1)`);
    const request = (id: string, bucket: string) =>
      ins(
        `insert into requests (id, bucket, received_at, method, path, query, headers, body, size, sha256, peer) values (?, ?, 1, 'POST', '', null, '[]', x'00', 1, 'x', null)`,
        id,
        bucket,
      );
    const delivery = (id: string, requestId: string, bucket: string) =>
      ins(
        `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, trigger, created_at, updated_at)
         values (?, ?, ?, null, 1, 'pending', 0, 1, 'initial', 1, 1)`,
        id,
        requestId,
        bucket,
      );
    request('r-live', 'live');
    delivery('d-live', 'r-live', 'live');
    for (let i = 0; i < 3; i++) {
      request(`r-ghost-${i}`, 'ghost');
      delivery(`d-ghost-${i}`, `r-ghost-${i}`, 'ghost');
    }
    delivery('d-stray', 'r-gone', 'stray');
    ins(`insert into replays (id, bucket, selection, total, created_at) values ('rp', 'replayed', '{}', 0, 1)`);
    ins(`insert into rejections (bucket, reason, count, last_at) values ('refused', 'too_large', 2, 1), ('', 'unknown_bucket', 5, 1)`);
    await close();

    const store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 2000, clock: systemClock });
    try {
      const buckets = await store.listBuckets();
      assert.deepEqual(
        buckets.map((b) => [b.name, b.deletingAt !== null]),
        [
          ['ghost', true],
          ['live', false],
          ['refused', true],
          ['replayed', true],
          ['stray', true],
        ],
        'one tombstone per orphaned name; none for the unattributed refusals',
      );
      const ghost = buckets.find((b) => b.name === 'ghost')!;
      assert.deepEqual([ghost.destination, ghost.paused], [null, true]);
      assert.equal((await store.bucketCounts('ghost')).requests, 3, 'the rows left, visible');
      assert.equal(await store.resolveBucket('ghost'), undefined, 'ingest refuses it');
      await assert.rejects(store.createBucket({ name: 'ghost', destination: 'http://127.0.0.1:9/new' }), { code: 'bucket_deleting' });

      const drain = await SqliteDrainStore.open({ path: t.db });
      assert.deepEqual(
        (await drain.listBuckets()).map((b) => b.name),
        ['live'],
        'the worker drains only the live bucket',
      );
      await drain.close();

      const purged = await store.purgeDeleting();
      assert.deepEqual(purged.finished.sort(), ['ghost', 'refused', 'replayed', 'stray']);
      assert.equal(purged.requests, 3);
      assert.deepEqual(
        (await store.listBuckets()).map((b) => b.name),
        ['live'],
      );
      assert.equal((await store.bucketCounts('live')).requests, 1, 'the live bucket keeps its rows');
      assert.deepEqual(await store.unattributedRejections(), { unknown_bucket: 5 });
    } finally {
      await store.close();
    }
    // Opening again runs nothing twice.
    const again = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 2000, clock: systemClock });
    assert.deepEqual(
      (await again.listBuckets()).map((b) => b.name),
      ['live'],
    );
    await again.close();
  });
});

import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { systemClock } from '../../src/shared/clock.js';
import { SqliteDrainStore } from '../../src/store/sqlite/sqlite-drain.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { databaseAt } from '../helpers/database-at.js';
import { tempDir } from '../helpers/temp-dir.js';

const PREVIOUS = '2026-12-03T02-forward-raw-path';
/** When the user re-created the bucket over the rows a failed delete left. */
const RECREATED = 1_000_000;

describe('migration 2026-12-03T04-orphan-deliveries', () => {
  const t = tempDir();
  after(() => t.remove());

  it("settles an earlier bucket's live deliveries under a re-created name as failed, and the worker claims none of them", async () => {
    // A database as the previous release left it: the name was re-created over old pending rows.
    const { raw, close } = await databaseAt(t.db, PREVIOUS);
    const ins = (sql: string, ...args: unknown[]) => raw.prepare(sql).run(...args);
    ins(
      `insert into buckets (name, destination, max_body, created_at, updated_at) values ('shop', 'http://127.0.0.1:9/new', 1024, ?, ?)`,
      RECREATED,
      RECREATED,
    );
    ins(`insert into buckets (name, destination, max_body, created_at, updated_at) values ('other', 'http://127.0.0.1:9/', 1024, 1, 1)`);
    ins(
      `insert into buckets (name, destination, max_body, created_at, updated_at, deleting_at) values ('gone', null, 1024, ?, ?, ?)`,
      RECREATED,
      RECREATED,
      RECREATED,
    );
    const request = (id: string, bucket: string, at: number) =>
      ins(
        `insert into requests (id, bucket, received_at, method, path, query, headers, body, size, sha256, peer) values (?, ?, ?, 'POST', '', null, '[]', x'00', 1, 'x', null)`,
        id,
        bucket,
        at,
      );
    const delivery = (
      id: string,
      requestId: string,
      bucket: string,
      state: string,
      at: number,
      extra: { generation?: number; trigger?: string; leaseAttempt?: string } = {},
    ) =>
      ins(
        `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, lease_until, lease_attempt, trigger, created_at, updated_at)
         values (?, ?, ?, null, ?, ?, 0, ?, ?, ?, ?, ?, ?)`,
        id,
        requestId,
        bucket,
        extra.generation ?? 1,
        state,
        at,
        extra.leaseAttempt ? at + 60_000 : null,
        extra.leaseAttempt ?? null,
        extra.trigger ?? 'initial',
        at,
        at,
      );
    // The old bucket's rows, all received before the re-creation.
    request('r-old-1', 'shop', 10);
    request('r-old-2', 'shop', 20);
    request('r-old-3', 'shop', 30);
    request('r-old-4', 'shop', 40);
    delivery('d-old-pending', 'r-old-1', 'shop', 'pending', 10);
    delivery('d-old-retrying', 'r-old-2', 'shop', 'retrying', 20);
    delivery('d-old-delivering', 'r-old-3', 'shop', 'delivering', 30, { leaseAttempt: 'a-old' });
    ins(
      `insert into attempts (id, delivery_id, request_id, bucket, number, url, started_at) values ('a-old', 'd-old-delivering', 'r-old-3', 'shop', 1, 'http://127.0.0.1:9/old', 30)`,
    );
    delivery('d-old-delivered', 'r-old-4', 'shop', 'delivered', 40);
    // The new bucket's own rows, and a replay of an old request made after the re-creation.
    request('r-new-same-ms', 'shop', RECREATED);
    delivery('d-new-same-ms', 'r-new-same-ms', 'shop', 'pending', RECREATED);
    request('r-new', 'shop', RECREATED + 5);
    delivery('d-new', 'r-new', 'shop', 'pending', RECREATED + 5);
    delivery('d-replay-of-old', 'r-old-4', 'shop', 'pending', RECREATED + 10, { generation: 2, trigger: 'replay' });
    // Another bucket, older than its rows as usual; and a tombstone, left to its purge.
    request('r-other', 'other', 5);
    delivery('d-other', 'r-other', 'other', 'pending', 5);
    request('r-gone', 'gone', 10);
    delivery('d-gone', 'r-gone', 'gone', 'pending', 10);
    await close();

    const store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 2000, clock: systemClock });
    await store.close();

    const check = new BetterSqlite3(t.db, { readonly: true });
    const rows = new Map(
      (
        check.prepare('select id, state, last_error, settled_at, lease_until, lease_attempt from deliveries').all() as Array<
          Record<string, unknown>
        >
      ).map((r) => [r.id, r]),
    );
    const attempt = check.prepare(`select outcome, reason from attempts where id = 'a-old'`).get();
    check.close();
    for (const id of ['d-old-pending', 'd-old-retrying', 'd-old-delivering']) {
      const r = rows.get(id)!;
      assert.deepEqual([r.state, r.last_error, r.lease_until, r.lease_attempt], ['failed', 'orphaned_by_delete', null, null], id);
      assert.equal(typeof r.settled_at, 'number', `${id} settled`);
    }
    assert.deepEqual(attempt, { outcome: 'failed', reason: 'orphaned_by_delete' }, 'the open attempt is closed');
    for (const [id, state] of [
      ['d-old-delivered', 'delivered'],
      ['d-new-same-ms', 'pending'],
      ['d-new', 'pending'],
      ['d-replay-of-old', 'pending'],
      ['d-other', 'pending'],
      ['d-gone', 'pending'],
    ] as const) {
      assert.deepEqual([rows.get(id)!.state, rows.get(id)!.last_error], [state, null], `${id} untouched`);
    }

    // The worker's claim sees only the new bucket's own deliveries.
    const drain = await SqliteDrainStore.open({ path: t.db });
    try {
      const shop = (await drain.listBuckets()).find((b) => b.name === 'shop');
      assert.ok(shop);
      const policy = {};
      const { claimed } = await drain.claim(shop, { nowMs: Date.now(), limit: 100, leaseUntilMs: Date.now() + 60_000 }, policy);
      assert.deepEqual(claimed.map((c) => c.deliveryId).sort(), ['d-new', 'd-new-same-ms', 'd-replay-of-old']);
    } finally {
      await drain.close();
    }
  });
});

import { randomBytes } from 'node:crypto';
import BetterSqlite3 from 'better-sqlite3';
import { systemClock } from '../../../src/shared/clock.js';
import { newId } from '../../../src/shared/ids.js';
import { SqliteStore } from '../../../src/store/sqlite/sqlite-store.js';
import type { ImportItem } from '../../../src/store/store.js';

/** Tables migrate-data copies, with their keys (as tables.ts lists them). */
export const COPIED: Record<string, string[]> = {
  buckets: ['name'],
  replays: ['id'],
  requests: ['id'],
  deliveries: ['id'],
  attempts: ['id'],
  rejections: ['bucket', 'reason'],
  meta: ['key'],
  bucket_pacer: ['bucket'],
  replay_pacer: ['replay_id'],
  settings: ['key'],
};

export interface Seeded {
  /** The delivery left in flight (state delivering, lease held) and its open attempt. */
  inFlight: { deliveryId: string; attemptId: string };
  requests: number;
  /** Attempts with a response body. */
  responseBodies: number;
}

/**
 * A SQLite deployment with every kind of row: two buckets (one with a destination), requests with
 * binary bodies of many sizes (empty, every byte value, 300 KiB) stored through the importer,
 * finished attempts with response bodies, one delivery in flight with its open attempt, a replay,
 * rejection counts, a meta counter and an expired worker lease.
 */
export async function seedSqlite(path: string, requests = 60, prefix = ''): Promise<Seeded> {
  const store = await SqliteStore.open({ path, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
  const buckets = [`${prefix}alpha`, `${prefix}beta`];
  try {
    const a = await store.createBucket({ name: buckets[0]! });
    const b = await store.createBucket({ name: buckets[1]!, destination: 'http://127.0.0.1:9/hook' });
    const importer = await store.openImporter();
    const item = (i: number): ImportItem => ({
      method: 'POST',
      path: i % 3 === 0 ? '/sub/p%20q' : '',
      query: i % 4 === 0 ? 'a=1&b' : null,
      rawHeaders: ['Content-Type', 'application/octet-stream', 'X-N', String(i)],
      body:
        i === 0
          ? Buffer.alloc(0)
          : i === 1
            ? Buffer.from(Array.from({ length: 256 }, (_, k) => k))
            : i === 2
              ? randomBytes(300 * 1024)
              : randomBytes(1 + ((i * 37) % 3000)),
    });
    const half = Math.floor(requests / 2);
    await importer.write(
      { name: a.name, createdAt: a.createdAt },
      Array.from({ length: half }, (_, i) => item(i)),
      { createDelivery: false },
    );
    await importer.write(
      { name: b.name, createdAt: b.createdAt },
      Array.from({ length: requests - half }, (_, i) => item(half + i)),
      { createDelivery: true },
    );
    await importer.close();
  } finally {
    await store.close();
  }
  const db = new BetterSqlite3(path);
  try {
    const now = Date.now();
    const ds = db.prepare(`select id, request_id, bucket from deliveries where bucket = ? order by id`).all(buckets[1]) as Array<{
      id: string;
      request_id: string;
      bucket: string;
    }>;
    const insertAttempt =
      db.prepare(`insert into attempts (id, delivery_id, request_id, bucket, number, url, started_at, duration_ms, status, error_class, error_message,
      response_headers, response_body, response_truncated, outcome, reason, next_attempt_at, next_why) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`);
    // Needs 5 deliveries in beta (10 requests at least): one in flight, one delivered, three retried.
    for (const d of ds.slice(2, 5)) {
      insertAttempt.run(
        newId(),
        d.id,
        d.request_id,
        d.bucket,
        1,
        'http://127.0.0.1:9/hook',
        now - 5000,
        12,
        500,
        null,
        null,
        '["Server","x"]',
        randomBytes(4096),
        1,
        'retry',
        'status_500',
        now + 30_000,
        'schedule',
      );
      db.prepare(
        `update deliveries set state = 'retrying', attempts = 1, next_attempt_at = ?, last_status = 500, first_attempt_at = ? where id = ?`,
      ).run(now + 30_000, now - 5000, d.id);
    }
    const f = ds[0]!;
    const attemptId = newId();
    insertAttempt.run(
      attemptId,
      f.id,
      f.request_id,
      f.bucket,
      2,
      'http://127.0.0.1:9/hook',
      now - 1000,
      null,
      null,
      null,
      null,
      null,
      null,
      0,
      null,
      null,
      null,
      null,
    );
    db.prepare(
      `update deliveries set state = 'delivering', attempts = 2, lease_until = ?, lease_attempt = ?, first_attempt_at = ? where id = ?`,
    ).run(now + 60_000, attemptId, now - 9000, f.id);
    db.prepare(`update deliveries set state = 'delivered', attempts = 1, settled_at = ?, last_status = 200 where id = ?`).run(
      now - 100,
      ds[1]!.id,
    );
    const replayId = newId();
    db.prepare(
      `insert into replays (id, bucket, selection, destination, rate_count, rate_per_ms, total, superseded, created_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run(replayId, buckets[1], '{"state":"failed"}', null, 2.5, 1000, 3, 1, now - 2000);
    // The pacer rows the store keeps: a token bucket part-way (a fractional time), a budget window, a Retry-After block.
    const beta = db.prepare('select created_at from buckets where name = ?').pluck().get(buckets[1]) as number;
    db.prepare(
      `insert into bucket_pacer (bucket, bucket_created_at, full_at, budget, blocked_until, counted_at) values (?, ?, ?, ?, ?, ?)`,
    ).run(buckets[1], beta, now + 0.5, JSON.stringify([[Math.floor(now / 1000) - 1, 3, 1]]), now + 20_000, now - 10);
    db.prepare(`insert into replay_pacer (replay_id, full_at) values (?, ?)`).run(replayId, now + 400.25);
    db.prepare(`update attempts set worker_id = 'h:2:abcdef01' where bucket = ?`).run(buckets[1]);
    // A worker that stopped: not copied (each process registers with the database it runs on).
    db.prepare(
      `insert into workers (id, roles, host, pid, info, lease_ms, started_at, heartbeat_at, expires_at, stopped_at) values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
    ).run('h:2:abcdef01', 'worker', 'h', 2, '{}', 60_000, now - 50_000, now - 40_000, now - 40_000, now - 40_000);
    db.prepare(`insert into rejections (bucket, reason, count, last_at) values (?, ?, ?, ?)`).run('', 'unknown_bucket', 3, now - 50);
    db.prepare(`insert into rejections (bucket, reason, count, last_at) values (?, ?, ?, ?)`).run(buckets[0], 'too_large', 2, now - 40);
    db.prepare(`insert into meta (key, value) values (?, ?)`).run(`${prefix}test_counter`, 7);
    // A settings row (a key of its own per prefix: two seeded sources append without colliding).
    db.prepare(`insert into settings (key, value, updated_at) values (?, ?, ?)`).run(`${prefix}test_setting`, 'allow:10.0.0.0/8', now - 30);
    // A worker that stopped long ago: its lease row stays, expired.
    db.prepare(
      `insert into worker_lease (name, holder, info, acquired_at, heartbeat_at, expires_at) values ('drain', 'h:1:x', 'pid 1 on h', ?, ?, ?)`,
    ).run(now - 100_000, now - 90_000, now - 60_000);
    return { inFlight: { deliveryId: f.id, attemptId }, requests, responseBodies: 3 };
  } finally {
    db.close();
  }
}

/** Every row of the copied tables in a SQLite file, by table, keyed (meta's own keys left out). */
export function sqliteRows(path: string): Record<string, Map<string, Record<string, unknown>>> {
  const db = new BetterSqlite3(path, { readonly: true });
  try {
    const out: Record<string, Map<string, Record<string, unknown>>> = {};
    for (const [t, key] of Object.entries(COPIED)) {
      const rows = db.prepare(`select * from ${t}`).all() as Array<Record<string, unknown>>;
      out[t] = new Map(
        rows
          .filter((r) => t !== 'meta' || (r.key !== 'bucket_epoch' && !String(r.key).startsWith('migrate_data/')))
          .map((r) => [JSON.stringify(key.map((k) => r[k])), r]),
      );
    }
    return out;
  } finally {
    db.close();
  }
}

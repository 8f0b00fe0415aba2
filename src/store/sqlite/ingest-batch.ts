import { createHash } from 'node:crypto';
import { newId } from '../../shared/ids.js';
import type { SqliteDb } from './open.js';
import type { IngestItem } from './writer-protocol.js';

export type RejectionCount = [bucket: string, reason: string, count: number, lastAt: number];

/**
 * One group-commit transaction: every request that arrived together, its first delivery (when the
 * bucket has a destination) and buffered rejection counts. Cached better-sqlite3 statements: Kysely
 * would prepare each statement anew on every call, which is measurable on the hot path.
 * Hashing and header encoding happen here, on the writer thread, off the event loop.
 */
export function createBatchWriter(db: SqliteDb) {
  const insertRequest = db.prepare(
    `insert into requests (id, bucket, received_at, method, path, query, headers, body, size, sha256, peer)
     values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  const insertDelivery = db.prepare(
    `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at,
       lease_until, trigger, replay_id, deferrals, last_deferral_reason, created_at, updated_at)
     values (?, ?, ?, null, 1, 'pending', 0, ?, null, 'initial', null, 0, null, ?, ?)`,
  );
  const upsertRejection = db.prepare(
    `insert into rejections (bucket, reason, count, last_at) values (?, ?, ?, ?)
     on conflict (bucket, reason) do update set count = count + excluded.count, last_at = max(last_at, excluded.last_at)`,
  );

  const write = db.transaction((items: IngestItem[], rejections: RejectionCount[]) => {
    for (const it of items) {
      const body = Buffer.from(it.body.buffer, it.body.byteOffset, it.body.byteLength);
      const sha256 = createHash('sha256').update(body).digest('hex');
      insertRequest.run(
        it.id,
        it.bucket,
        it.receivedAt,
        it.method,
        it.path,
        it.query,
        JSON.stringify(it.rawHeaders),
        body,
        body.byteLength,
        sha256,
        it.peer,
      );
      if (it.createDelivery) insertDelivery.run(newId(), it.id, it.bucket, it.receivedAt, it.receivedAt, it.receivedAt);
    }
    for (const r of rejections) upsertRejection.run(...r);
  });

  // BEGIN IMMEDIATE takes the write lock up front, so a busy lock fails before any work is done.
  return (items: IngestItem[], rejections: RejectionCount[]) => write.immediate(items, rejections);
}

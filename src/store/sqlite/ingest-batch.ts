import { createHash } from 'node:crypto';
import { newId } from '../../shared/ids.js';
import { lowerDueStatement } from './bucket-due.js';
import type { SqliteDb } from './open.js';
import type { IngestItem, RejectionCount } from './writer-protocol.js';

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
  const bucketExists = db.prepare('select 1 from buckets where name = ?').pluck();
  const lowerDue = lowerDueStatement(db);
  const upsertRejection = db.prepare(
    `insert into rejections (bucket, reason, count, last_at) values (?, ?, ?, ?)
     on conflict (bucket, reason) do update set count = count + excluded.count, last_at = max(last_at, excluded.last_at)`,
  );

  interface Row {
    it: IngestItem;
    body: Buffer;
    sha256: string;
    headers: string;
  }
  const write = db.transaction((rows: Row[], rejections: RejectionCount[]): number[] => {
    // A bucket deleted while its requests were in flight must not collect orphan rows: those
    // requests are answered 404 instead. Checked inside the transaction, once per bucket.
    const exists = new Map<string, boolean>();
    const missing: number[] = [];
    // The earliest first attempt per bucket: the bucket is due from then (bucket-due.ts). Once per
    // bucket per batch, and no write at all when the bucket is already due.
    const dueAt = new Map<string, number>();
    for (const { it, body, sha256, headers } of rows) {
      let ok = exists.get(it.bucket);
      if (ok === undefined) exists.set(it.bucket, (ok = bucketExists.get(it.bucket) !== undefined));
      if (!ok) {
        missing.push(it.seq);
        continue;
      }
      insertRequest.run(it.id, it.bucket, it.receivedAt, it.method, it.path, it.query, headers, body, body.byteLength, sha256, it.peer);
      if (it.createDelivery) {
        insertDelivery.run(newId(), it.id, it.bucket, it.receivedAt, it.receivedAt, it.receivedAt);
        const at = dueAt.get(it.bucket);
        if (at === undefined || it.receivedAt < at) dueAt.set(it.bucket, it.receivedAt);
      }
    }
    for (const [bucket, at] of dueAt) lowerDue.run(bucket, at);
    for (const r of rejections) upsertRejection.run(...r);
    return missing;
  });

  /** Commits the batch; returns the seqs not stored because their bucket no longer exists. */
  return (items: IngestItem[], rejections: RejectionCount[]): number[] => {
    // Hash and encode before taking the lock, so a large body never holds it against other processes.
    const rows = items.map((it) => {
      const body = Buffer.from(it.body.buffer, it.body.byteOffset, it.body.byteLength);
      return { it, body, sha256: createHash('sha256').update(body).digest('hex'), headers: JSON.stringify(it.rawHeaders) };
    });
    // BEGIN IMMEDIATE takes the write lock up front, so a busy lock fails before any work is done.
    return write.immediate(rows, rejections);
  };
}

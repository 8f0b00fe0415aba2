import { createHash } from 'node:crypto';
import { newId } from '../../shared/ids.js';
import { verdictColumns } from '../provider-row.js';
import { lowerDueStatement } from './bucket-due.js';
import type { SqliteDb } from './open.js';
import type { IngestItem, RejectionCount } from './writer-protocol.js';

/**
 * A request's dedup key: `liveKey.get(bucket, key, atMs)` is the request holding it at `atMs`
 * (its hold outlasts that time), `takeKey.run(bucket, key, requestId, expiresAt)` takes it. Ingest
 * and `requests verify --release` (sqlite-verdicts.ts) judge keys with these same two statements.
 */
export function dedupKeyStatements(db: SqliteDb) {
  return {
    liveKey: db.prepare('select request_id from dedup_keys where bucket = ? and key = ? and expires_at > ?').pluck(),
    takeKey: db.prepare(
      `insert into dedup_keys (bucket, key, request_id, expires_at) values (?, ?, ?, ?)
       on conflict (bucket, key) do update set request_id = excluded.request_id, expires_at = excluded.expires_at`,
    ),
  };
}

/**
 * An accepted request's first delivery (generation 1, pending, `initial`):
 * `run(id, requestId, bucket, nextAttemptAt, createdAt, updatedAt)`. Made at ingest, and by a
 * release from quarantine (sqlite-verdicts.ts).
 */
export function firstDeliveryStatement(db: SqliteDb) {
  return db.prepare(
    `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at,
       lease_until, trigger, replay_id, deferrals, last_deferral_reason, created_at, updated_at)
     values (?, ?, ?, null, 1, 'pending', 0, ?, null, 'initial', null, 0, null, ?, ?)`,
  );
}

/**
 * One group-commit transaction: every request that arrived together, its first delivery (when the
 * bucket has a destination) and buffered rejection counts. Cached better-sqlite3 statements: Kysely
 * would prepare each statement anew on every call, which is measurable on the hot path.
 * Hashing and header encoding happen here, on the writer thread, off the event loop.
 */
export function createBatchWriter(db: SqliteDb) {
  const insertRequest = db.prepare(
    `insert into requests (id, bucket, received_at, method, path, query, headers, body, size, sha256, peer, trailers,
       disposition, verify_scheme, verify_result, verify_reason, dedup_key, duplicate_of)
     values (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)`,
  );
  // Dedup (CapturedRequest.dedup): the key's live holder, else this request takes the key. Both run
  // under the batch's write lock, so two requests with one key can never both be accepted; within a
  // batch the first in order wins, since the second sees the first's key.
  const { liveKey, takeKey } = dedupKeyStatements(db);
  const insertDelivery = firstDeliveryStatement(db);
  // A deleting bucket (tombstone, sqlite-delete.ts) is no bucket to store into.
  const bucketExists = db.prepare('select 1 from buckets where name = ? and deleting_at is null').pluck();
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
    trailers: string | null;
  }
  const write = db.transaction((rows: Row[], rejections: RejectionCount[], guard?: () => void): number[] => {
    // A caller's own precondition (import: still the bucket it checked), inside the write lock;
    // throwing rolls the batch back. Ingest passes none.
    guard?.();
    // A bucket deleted (or being deleted) while its requests were in flight must not collect rows
    // its purge may already have passed: those requests are answered 404 instead. Checked inside
    // the transaction, once per bucket.
    const exists = new Map<string, boolean>();
    const live = (bucket: string) => {
      let ok = exists.get(bucket);
      if (ok === undefined) exists.set(bucket, (ok = bucketExists.get(bucket) !== undefined));
      return ok;
    };
    const missing: number[] = [];
    // The earliest first attempt per bucket: the bucket is due from then (bucket-due.ts). Once per
    // bucket per batch, and no write at all when the bucket is already due.
    const dueAt = new Map<string, number>();
    for (const { it, body, sha256, headers, trailers } of rows) {
      if (!live(it.bucket)) {
        missing.push(it.seq);
        continue;
      }
      const v = verdictColumns(it.disposition, it.verdict);
      let duplicateOf: string | null = null;
      if (v.disposition === 'accepted' && it.dedup !== undefined) {
        const holder = liveKey.get(it.bucket, it.dedup.key, it.receivedAt) as string | undefined;
        if (holder !== undefined) {
          v.disposition = 'duplicate';
          duplicateOf = holder;
        } else takeKey.run(it.bucket, it.dedup.key, it.id, it.receivedAt + it.dedup.windowMs);
      }
      insertRequest.run(
        it.id,
        it.bucket,
        it.receivedAt,
        it.method,
        it.path,
        it.query,
        headers,
        body,
        body.byteLength,
        sha256,
        it.peer,
        trailers,
        v.disposition,
        v.verify_scheme,
        v.verify_result,
        v.verify_reason,
        it.dedup?.key ?? null,
        duplicateOf,
      );
      // Only accepted requests are delivered: quarantined, duplicate and handshake ones never are.
      if (it.createDelivery && v.disposition === 'accepted') {
        insertDelivery.run(newId(), it.id, it.bucket, it.receivedAt, it.receivedAt, it.receivedAt);
        const at = dueAt.get(it.bucket);
        if (at === undefined || it.receivedAt < at) dueAt.set(it.bucket, it.receivedAt);
      }
    }
    for (const [bucket, at] of dueAt) lowerDue.run(bucket, at);
    // A refusal counted for a bucket that is gone or deleting counts as naming no bucket: a new
    // bucket of that name must not inherit it.
    for (const [bucket, ...rest] of rejections) upsertRejection.run(bucket === '' || live(bucket) ? bucket : '', ...rest);
    return missing;
  });

  /**
   * Commits the batch; returns the seqs not stored because their bucket no longer exists. `guard`
   * runs first inside the transaction; if it throws, nothing of the batch is stored.
   */
  return (items: IngestItem[], rejections: RejectionCount[], guard?: () => void): number[] => {
    // Hash and encode before taking the lock, so a large body never holds it against other processes.
    const rows = items.map((it) => {
      const body = Buffer.from(it.body.buffer, it.body.byteOffset, it.body.byteLength);
      const trailers = it.rawTrailers && it.rawTrailers.length > 0 ? JSON.stringify(it.rawTrailers) : null;
      return { it, body, sha256: createHash('sha256').update(body).digest('hex'), headers: JSON.stringify(it.rawHeaders), trailers };
    });
    // BEGIN IMMEDIATE takes the write lock up front, so a busy lock fails before any work is done.
    return write.immediate(rows, rejections, guard);
  };
}

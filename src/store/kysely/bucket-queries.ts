/**
 * Bucket reads that are the same Kysely query on every dialect. Writes stay in each dialect's
 * store: their locking differs (SQLite's IMMEDIATE transaction, PostgreSQL's FOR UPDATE) and so
 * does what they tell other processes (bucket_epoch alone, or with a NOTIFY).
 */
import type { Kysely } from 'kysely';
import { bucketNotFound } from '../../shared/errors.js';
import { toBucket } from '../bucket-row.js';
import type { Database } from '../schema.js';
import { deletingError, type Bucket } from '../store.js';

/** A bucket by name, a deleting one (tombstone) included. */
export async function selectBucket(db: Kysely<Database>, name: string): Promise<Bucket | undefined> {
  const row = await db.selectFrom('buckets').selectAll().where('name', '=', name).executeTakeFirst();
  return row ? toBucket(row) : undefined;
}

/** Ingest refusals by reason for one bucket; '' gives those that named no bucket. */
export async function selectRejections(db: Kysely<Database>, bucket: string): Promise<Record<string, number>> {
  const rows = await db.selectFrom('rejections').select(['reason', 'count']).where('bucket', '=', bucket).execute();
  return Object.fromEntries(rows.map((r) => [r.reason, Number(r.count)]));
}

/**
 * The end of a bucket write (update, pause, resume): the bucket as it is now, or the error for one
 * that was not there or is being deleted.
 */
export async function writtenBucket(db: Kysely<Database>, name: string, found: 'missing' | 'deleting' | 'updated'): Promise<Bucket> {
  if (found === 'missing') throw bucketNotFound(name);
  if (found === 'deleting') throw deletingError(name);
  return (await selectBucket(db, name))!;
}

import type { Clock } from '../../shared/clock.js';
import { AppError } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import { createBatchWriter } from './ingest-batch.js';
import { deletingError } from './sqlite-delete.js';
import { openSqlite } from './open.js';
import { sqliteStorageErrorCode } from './sqlite-error.js';
import { importedVerdict, type ImportItem, type ImportTarget, type RequestImporter } from '../store.js';
import type { IngestItem } from './writer-protocol.js';

/** The contract's RequestImporter, synchronous: better-sqlite3 runs each batch's transaction in one call. */
export interface SqliteRequestImporter {
  write(bucket: ImportTarget, items: readonly ImportItem[], options: { createDelivery: boolean }): string[];
  close(): void;
}

/** The synchronous importer behind the contract's async one. */
export function asyncImporter(i: SqliteRequestImporter): RequestImporter {
  return {
    write: async (bucket, items, options) => i.write(bucket, items, options),
    close: async () => i.close(),
  };
}

/**
 * `requests import` writes through ingest's own batch writer (same statements, same row shape,
 * same first delivery when asked), on its own connection with synchronous=FULL, like an
 * acknowledged ingest: an import that reported success survives a power cut.
 */
export function openRequestImporter(options: { path: string; busyTimeoutMs: number; clock: Clock }): SqliteRequestImporter {
  const db = openSqlite(options.path, { durability: 'full', busyTimeoutMs: options.busyTimeoutMs });
  const write = createBatchWriter(db);
  // An import stores in many short transactions; between two of them the bucket may be deleted, or
  // deleted and created again with another destination. The name alone would let the rest of the
  // file (and its --deliver deliveries) flow into the new bucket, so each batch checks, under the
  // write lock, that the bucket is still the one checked at the start: same name and created_at,
  // no tombstone. One primary-key lookup per batch of up to 200 rows; ingest's own check is unchanged.
  const sameBucket = db.prepare('select deleting_at as deletingAt, created_at as createdAt from buckets where name = ?');
  const guardFor = (target: ImportTarget) => () => {
    const row = sameBucket.get(target.name) as { deletingAt: number | null; createdAt: number } | undefined;
    if (row !== undefined && row.createdAt === target.createdAt && row.deletingAt === null) return;
    if (row !== undefined && row.deletingAt !== null) throw deletingError(target.name);
    throw new AppError(
      'not_found',
      row === undefined
        ? `bucket ${target.name} was deleted during the import; the rest was not stored`
        : `bucket ${target.name} was deleted and created again during the import; the rest was not stored in the new bucket`,
    );
  };
  let seq = 0;
  return {
    write(target, items, { createDelivery }) {
      const bucket = target.name;
      const now = options.clock.now();
      const verdict = importedVerdict(target.verifyScheme);
      const batch: IngestItem[] = items.map((it) => ({
        seq: ++seq,
        // Made now, in file order: ids stay time-ordered, so the import lists and exports in that order.
        id: newId(),
        bucket,
        receivedAt: now,
        method: it.method,
        path: it.path,
        query: it.query,
        rawHeaders: it.rawHeaders,
        body: new Uint8Array(it.body.buffer, it.body.byteOffset, it.body.byteLength),
        peer: null,
        ...(it.rawTrailers && it.rawTrailers.length > 0 ? { rawTrailers: it.rawTrailers } : {}),
        createDelivery,
        ...(verdict ? { verdict } : {}),
        deadline: now + options.busyTimeoutMs,
      }));
      let missing: number[];
      try {
        missing = write(batch, [], guardFor(target));
      } catch (e) {
        if (e instanceof AppError) throw e;
        const code = sqliteStorageErrorCode(e);
        if (code) throw new AppError(code, `import could not write: ${(e as Error).message}`, { cause: e });
        throw e;
      }
      if (missing.length > 0) throw new AppError('not_found', `bucket ${bucket} was deleted during the import`);
      return batch.map((b) => b.id);
    },
    close() {
      db.close();
    },
  };
}

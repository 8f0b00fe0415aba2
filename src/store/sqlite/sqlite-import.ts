import type { Clock } from '../../shared/clock.js';
import { AppError } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import { createBatchWriter } from './ingest-batch.js';
import { openSqlite, storageErrorCode } from './open.js';
import type { IngestItem } from './writer-protocol.js';

/** A request read from an export file, to be stored as new. */
export interface ImportItem {
  method: string;
  path: string;
  query: string | null;
  rawHeaders: string[];
  body: Buffer;
  /** Chunked trailers, flat [name, value, …]; absent or empty: none. */
  rawTrailers?: string[];
}

export interface RequestImporter {
  /** Stores the items as new requests (new ids, received now) in one transaction; returns their ids in order. */
  write(bucket: string, items: readonly ImportItem[], options: { createDelivery: boolean }): string[];
  close(): void;
}

/**
 * `requests import` writes through ingest's own batch writer (same statements, same row shape,
 * same first delivery when asked), on its own connection with synchronous=FULL, like an
 * acknowledged ingest: an import that reported success survives a power cut.
 */
export function openRequestImporter(options: { path: string; busyTimeoutMs: number; clock: Clock }): RequestImporter {
  const db = openSqlite(options.path, { durability: 'full', busyTimeoutMs: options.busyTimeoutMs });
  const write = createBatchWriter(db);
  let seq = 0;
  return {
    write(bucket, items, { createDelivery }) {
      const now = options.clock.now();
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
        deadline: now + options.busyTimeoutMs,
      }));
      let missing: number[];
      try {
        missing = write(batch, []);
      } catch (e) {
        const code = storageErrorCode(e);
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

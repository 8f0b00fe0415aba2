import type { Durability } from '../../config/config.js';
import type { Disposition, StoredVerdict } from '../store.js';

/** Messages between the main thread and the SQLite writer thread (structured-clone safe). */

export interface WriterInit {
  path: string;
  durability: Durability;
}

export interface IngestItem {
  seq: number;
  id: string;
  bucket: string;
  receivedAt: number;
  method: string;
  path: string;
  query: string | null;
  rawHeaders: string[];
  body: Uint8Array;
  peer: string | null;
  /** Chunked trailers, flat [name, value, …]; absent or empty: none (stored as null). */
  rawTrailers?: string[];
  createDelivery: boolean;
  /** What ingest made of it; absent: accepted (only accepted requests get a delivery). */
  disposition?: Disposition;
  verdict?: StoredVerdict;
  /** Checked and recorded inside the batch's transaction (CapturedRequest.dedup). */
  dedup?: { key: string; windowMs: number };
  /** Epoch ms after which the request must be answered 503 rather than wait for the lock. */
  deadline: number;
}

/** Refusals counted per (bucket, reason), buffered and written with the next batch. */
export type RejectionCount = [bucket: string, reason: string, count: number, lastAt: number];

export function mergeRejection(into: Map<string, RejectionCount>, r: RejectionCount): void {
  const key = `${r[0]}\u0000${r[1]}`;
  const prev = into.get(key);
  if (prev) {
    prev[2] += r[2];
    prev[3] = Math.max(prev[3], r[3]);
  } else into.set(key, [...r]);
}

export type ToWriter = { type: 'ingest'; items: IngestItem[] } | { type: 'rejections'; counts: RejectionCount[] } | { type: 'close' };

export type FromWriter =
  | { type: 'ready' }
  | { type: 'committed'; seqs: number[]; ms: number }
  | { type: 'failed'; seqs: number[]; code: 'store_busy' | 'storage_full' | 'storage_error' | 'unknown_bucket'; message: string }
  | { type: 'closed' };

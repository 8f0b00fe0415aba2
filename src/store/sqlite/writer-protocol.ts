import type { Durability } from '../../config/config.js';

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
  createDelivery: boolean;
  /** Epoch ms after which the request must be answered 503 rather than wait for the lock. */
  deadline: number;
}

export type ToWriter =
  | { type: 'ingest'; items: IngestItem[] }
  | { type: 'rejections'; counts: Array<[bucket: string, reason: string, count: number, lastAt: number]> }
  | { type: 'close' };

export type FromWriter =
  | { type: 'ready' }
  | { type: 'committed'; seqs: number[]; ms: number }
  | { type: 'failed'; seqs: number[]; code: 'store_busy' | 'storage_full' | 'storage_error'; message: string }
  | { type: 'closed' };

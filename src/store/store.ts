import type { DeliveryState } from './schema.js';

/**
 * The storage contract. Callers (ingest, CLI, later the drain worker) depend on this interface
 * only; no Kysely or better-sqlite3 type leaks out, so a PostgreSQL adapter can sit behind it.
 */

export interface Bucket {
  name: string;
  destination: string | null;
  maxBody: number;
  ackStatus: number;
  ackBody: string | null;
  ackContentType: string | null;
  paused: boolean;
  createdAt: number;
  updatedAt: number;
}

export type NewBucket = Pick<Bucket, 'name'> & Partial<Omit<Bucket, 'name' | 'createdAt' | 'updatedAt' | 'paused'>>;
export type BucketPatch = Partial<Omit<Bucket, 'name' | 'createdAt' | 'updatedAt' | 'paused'>>;

/** A request as captured from the socket, before it is stored. */
export interface CapturedRequest {
  id: string;
  bucket: string;
  receivedAt: number;
  method: string;
  path: string;
  query: string | null;
  /** Flat raw header list [name, value, …] exactly as received (order, case, repeats). */
  rawHeaders: string[];
  body: Buffer;
  peer: string | null;
}

/** A request's state: its latest generation's delivery to the bucket destination, or 'none'. */
export type RequestState = Exclude<DeliveryState, 'superseded'> | 'held' | 'none';

export interface StoredRequest {
  id: string;
  bucket: string;
  receivedAt: number;
  method: string;
  path: string;
  query: string | null;
  rawHeaders: string[];
  body: Buffer;
  size: number;
  sha256: string;
  peer: string | null;
  state: RequestState;
}

export type RequestSummary = Omit<StoredRequest, 'body' | 'rawHeaders' | 'sha256' | 'peer'> & { generation: number | null };

export interface BucketCounts {
  requests: number;
  bytes: number;
  /** Requests by state (latest generation). */
  states: Partial<Record<RequestState, number>>;
  /** Ingest refusals by reason: rejections are evidence too. */
  rejections: Record<string, number>;
}

export interface ListRequestsOptions {
  limit: number;
  /** Return requests older than this id (cursor pagination, newest first). */
  before?: string;
}

export interface Store {
  getBucket(name: string): Promise<Bucket | undefined>;
  /** Hot-path lookup through a cache that notices other processes' writes. */
  resolveBucket(name: string): Promise<Bucket | undefined>;
  listBuckets(): Promise<Bucket[]>;
  createBucket(bucket: NewBucket): Promise<Bucket>;
  updateBucket(name: string, patch: BucketPatch): Promise<Bucket>;
  /** Deletes the bucket with its requests and deliveries; refuses while undelivered work exists unless forced. */
  deleteBucket(name: string, options: { force: boolean }): Promise<{ requests: number }>;
  bucketCounts(name: string): Promise<BucketCounts>;
  /** Refusals not attributable to a bucket (unknown bucket, parse errors). */
  unattributedRejections(): Promise<Record<string, number>>;
  listRequests(bucket: string, options: ListRequestsOptions): Promise<RequestSummary[]>;
  getRequest(id: string): Promise<StoredRequest | undefined>;
  close(): Promise<void>;
}

export type StorageHealth = { ok: true } | { ok: false; reason: string; code: string };

/** Where ingest hands captured requests; resolves only once the row is durably committed. */
export interface IngestSink {
  submit(request: CapturedRequest, options: { createDelivery: boolean }): Promise<void>;
  /** Count a refusal (bucket '' when none applies). Buffered and written with the next batch. */
  countRejection(bucket: string, reason: string): void;
  health(): StorageHealth;
  /** Whether a new request may be taken at all (a recent write failure does not refuse: the next batch probes). */
  accepting(): StorageHealth;
  /** Flush what is queued, then stop. */
  close(): Promise<void>;
}

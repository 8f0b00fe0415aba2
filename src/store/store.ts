import type { RetryOn } from '../drain/classify.js';
import type { RetryBudgetConfig } from '../drain/retry-budget.js';
import type { Schedule } from '../drain/schedule.js';
import type { Rate } from '../drain/token-bucket.js';
import type { AttemptOutcome, DeliveryState } from './schema.js';

/**
 * The storage contract. Callers (ingest, CLI, later the drain worker) depend on this interface
 * only; no Kysely or better-sqlite3 type leaks out, so a PostgreSQL adapter can sit behind it.
 */

/** How the drain worker delivers a bucket's requests (`bucket create|update` flags). */
export interface DrainSettings {
  /** Token bucket over every attempt; null: no rate cap. */
  rate: Rate | null;
  burst: number;
  /** Attempts in flight at most. */
  concurrency: number;
  /** One attempt's time limit, connect to last response byte read. */
  timeoutMs: number;
  schedule: Schedule;
  /** null: the default retried set (classify.ts DEFAULT_RETRY_ON). */
  retryOn: RetryOn | null;
  retryBudget: RetryBudgetConfig;
  /** Append the stored sub-path to the destination URL. */
  forwardPath: boolean;
  /** Added to every forwarded request, after the stored headers. */
  forwardHeaders: Array<[string, string]>;
}

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
  drain: DrainSettings;
  /** When the current pause began; null when not paused. */
  pausedAt: number | null;
  /** Time spent paused before the current pause (not counted toward --give-up). */
  pausedTotalMs: number;
}

type CoreSettings = Omit<Bucket, 'name' | 'createdAt' | 'updatedAt' | 'paused' | 'drain' | 'pausedAt' | 'pausedTotalMs'>;
export type BucketPatch = Partial<CoreSettings> & { drain?: Partial<DrainSettings> };
export type NewBucket = Pick<Bucket, 'name'> & BucketPatch;

/** Paused time up to `nowMs`, the current pause included. */
export function pausedMsAt(b: Pick<Bucket, 'pausedAt' | 'pausedTotalMs'>, nowMs: number): number {
  return b.pausedTotalMs + (b.pausedAt === null ? 0 : Math.max(0, nowMs - b.pausedAt));
}

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

/**
 * Which of a bucket's requests a command means (`requests list`, `replay`, `export`): every field
 * narrows; an empty filter is the whole bucket. States are the request's state (its latest
 * generation's delivery to the bucket destination; `held` and `none` included).
 */
export interface RequestFilter {
  states?: RequestState[];
  /** received_at bounds, epoch ms: since inclusive, until exclusive. */
  sinceMs?: number;
  untilMs?: number;
  /** Upper-case methods. */
  methods?: string[];
  /** A glob over the raw sub-path: `*` any run of characters except `/`, `**` any run, `?` one character. */
  pathGlob?: string;
  /** Each must match a stored header: name case-insensitive, value exact. */
  headers?: Array<{ name: string; value: string }>;
  /** A substring of the body bytes (UTF-8 of the text given). */
  search?: string;
  /** The last response status of the latest generation: an exact code or a class (4 for 4xx). */
  status?: { code: number } | { class: 1 | 2 | 3 | 4 | 5 };
  ids?: string[];
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
  /** Holds the bucket's deliveries (ingest keeps storing); idempotent. */
  pauseBucket(name: string): Promise<Bucket>;
  /** Lets the worker drain the bucket again from where it stopped; idempotent. */
  resumeBucket(name: string): Promise<Bucket>;
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

/** A due delivery the claim query is about to take, for the worker's rate, budget and Retry-After decision. */
export interface ClaimCandidate {
  deliveryId: string;
  requestId: string;
  /** Attempts made so far (0: this would be the first). */
  attempts: number;
  state: 'pending' | 'retrying';
  trigger: 'initial' | 'replay';
  replayId: string | null;
  nextAttemptAt: number;
}

export type ClaimDecision =
  | { kind: 'claim' }
  /** Held back (rate, budget, bucket-wide Retry-After): not an attempt, counted on the delivery with the reason. */
  | { kind: 'defer'; reason: string }
  /** Leave it for a later pass, untouched. */
  | { kind: 'skip' }
  /** Stop walking this bucket's due deliveries for this pass. */
  | { kind: 'stop' };

export interface ClaimedAttempt {
  attemptId: string;
  deliveryId: string;
  requestId: string;
  bucket: string;
  generation: number;
  /** This attempt's number: 1 for the first. */
  number: number;
  trigger: 'initial' | 'replay';
  replayId: string | null;
  /** The delivery's own destination (a replay --to); null: the bucket's current one. */
  destination: string | null;
  /** The URL this attempt goes to, as recorded on the attempt row. */
  url: string;
  startedAt: number;
  firstAttemptAt: number;
  pausedMsAtFirst: number;
  method: string;
  path: string;
  query: string | null;
  rawHeaders: string[];
  body: Buffer;
}

export interface AttemptResult {
  attemptId: string;
  deliveryId: string;
  finishedAt: number;
  durationMs: number;
  status: number | null;
  errorClass: string | null;
  errorMessage: string | null;
  /** Flat [name, value, …] list of the response headers. */
  responseHeaders: string[] | null;
  /** The first bytes of the response body (4 KiB at most). */
  responseBody: Buffer | null;
  responseTruncated: boolean;
  outcome: Exclude<AttemptOutcome, 'lease_expired'>;
  reason: string;
  nextAttemptAt: number | null;
  nextWhy: string | null;
}

/** What happens to a delivery whose worker died mid-attempt (its lease expired). */
export type LeaseExpiry = { kind: 'retry'; atMs: number } | { kind: 'exhausted' };

export interface ExpiredDelivery {
  deliveryId: string;
  bucket: string;
  /** Attempts made, the expired one included. */
  attempts: number;
}

export interface WorkerHolder {
  holder: string;
  info: string;
  acquiredAt: number;
  heartbeatAt: number;
  expiresAt: number;
}

export type WorkerLeaseResult = { ok: true } | { ok: false; current: WorkerHolder };

/** The drain worker's view of the store: claim, record, recover, and the single-worker lease. */
export interface DrainStore {
  /** Buckets as they are now (settings changed from the CLI apply from the next claim). */
  listBuckets(): Promise<Bucket[]>;
  /**
   * In one transaction: walk the bucket's due deliveries in due order (at most `limit`), ask
   * `decide` about each, and claim (state delivering, lease, attempt row started) or defer them.
   */
  claim(
    bucket: Bucket,
    options: { nowMs: number; limit: number; leaseUntilMs: number; url: (destination: string | null, path: string, query: string | null) => string },
    decide: (c: ClaimCandidate) => ClaimDecision,
  ): Promise<ClaimedAttempt[]>;
  /** Completes attempt rows and moves their deliveries on, in one transaction. */
  complete(results: AttemptResult[]): Promise<void>;
  /** Closes attempts whose lease expired (`lease_expired`, counted) and decides what comes next. */
  recoverExpired(nowMs: number, next: (d: ExpiredDelivery) => LeaseExpiry): Promise<ExpiredDelivery[]>;
  /** The earliest time after `nowMs` a delivery of these buckets falls due or a lease expires; null when none. */
  nextDueAt(buckets: readonly Bucket[], nowMs: number): Promise<number | null>;
  /** Takes or renews the single-worker lease; a live lease held by another holder is refused. */
  acquireWorkerLease(holder: string, info: string, nowMs: number, ttlMs: number): Promise<WorkerLeaseResult>;
  releaseWorkerLease(holder: string): Promise<void>;
  /** A cheap counter that changes when another connection commits (new requests, bucket changes). */
  changeCounter(): number;
  close(): Promise<void>;
}

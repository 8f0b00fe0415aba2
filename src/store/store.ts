import type { RetryOn } from '../policy/classify.js';
import type { RetryBudgetConfig } from '../policy/retry-budget.js';
import type { ClaimCandidate, ClaimDecision, ClaimVerdict, LeaseExpiry } from '../policy/admission.js';
import type { Schedule } from '../policy/schedule.js';
import type { Rate } from '../policy/token-bucket.js';
import type { AttemptOutcome, DeliveryState } from './schema.js';
import type { DedupKey } from '../policy/dedup.js';
import type { HandshakeName } from '../policy/handshake.js';
import type { VerifyResult, VerifyScheme } from '../policy/verify.js';
import { AppError } from '../shared/errors.js';

export type { ClaimCandidate, ClaimDecision, LeaseExpiry };

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
  /**
   * Append it as stored (`--forward-raw-path`) instead of without dot-segments and empty segments
   * (src/policy/forward-path.ts). Unsafe behind a path-normalising proxy; no effect while forwardPath is off.
   */
  forwardRawPath: boolean;
  /** Added to every forwarded request, after the stored headers. */
  forwardHeaders: Array<[string, string]>;
}

/** How a bucket checks its senders at ingest (`--verify`). */
export interface VerifySettings {
  scheme: VerifyScheme;
  /** Secrets as given, in their provider's own format; any one matching passes (rotation). */
  secrets: string[];
  /** Timestamp tolerance for the schemes that sign one. */
  toleranceMs: number;
  /** What an unverified request becomes: stored as quarantined (never delivered), or refused with 401. */
  onInvalid: OnInvalid;
}

export type OnInvalid = 'quarantine' | 'reject';

/** Duplicate events (`--dedup`): a key already seen within the window is stored as a duplicate, never delivered. */
export interface DedupSettings {
  key: DedupKey;
  windowMs: number;
}

/** Re-signed deliveries (`--sign standard`): every attempt carries fresh Standard Webhooks headers. */
export interface SignSettings {
  scheme: 'standard';
  /** `whsec_…` secrets; several give a space-separated signature list. */
  secrets: string[];
}

/** What a bucket does for providers: verification, URL handshakes, methods, dedup and re-signing. Null/empty: off. */
export interface ProviderSettings {
  verify: VerifySettings | null;
  /** Handshakes answered besides the verify scheme's own (`--handshake`; Graph has no HMAC, so it is only ever named). */
  handshakes: HandshakeName[];
  /** Meta's `hub.verify_token` (`--verify-token`): the Meta handshake answers 403 without a match. */
  verifyToken: string | null;
  /** Microsoft Graph's `clientState` checked in notifications (`--graph-client-state`); null: not checked. */
  graphClientState: string | null;
  /** Accepted methods, upper case (`--methods`); null: any method. */
  methods: string[] | null;
  dedup: DedupSettings | null;
  sign: SignSettings | null;
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
  /** `--retain`: the server prunes requests older than this (src/retention/rules.ts); null: keep forever. */
  retainMs: number | null;
  /** `--retain-state`: the terminal states `--retain` prunes (default delivered only). */
  retainStates: PrunableState[];
  /**
   * When `bucket delete` began; null for a live bucket. A deleting bucket is a tombstone: ingest
   * refuses it, the worker sends nothing of it, and its rows are purged in short batches.
   */
  deletingAt: number | null;
  provider: ProviderSettings;
}

type CoreSettings = Omit<
  Bucket,
  'name' | 'createdAt' | 'updatedAt' | 'paused' | 'drain' | 'pausedAt' | 'pausedTotalMs' | 'deletingAt' | 'provider'
>;
export type BucketPatch = Partial<CoreSettings> & { drain?: Partial<DrainSettings>; provider?: Partial<ProviderSettings> };
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
  /** Flat raw chunked-trailer list [name, value, …] as received; absent or empty: none. Stored, never forwarded. */
  rawTrailers?: string[];
  /** What ingest made of it; absent: accepted. Only accepted requests get a delivery. */
  disposition?: Disposition;
  /** The sender verdict, when the bucket verifies. */
  verdict?: StoredVerdict;
  /**
   * Its dedup key, when the bucket de-duplicates and the request carries one (verified, in a
   * verifying bucket). The store checks it inside the ingest commit: a key seen within the window
   * makes this request a `duplicate` of the first (no delivery); otherwise the key is recorded until
   * `receivedAt + windowMs`.
   */
  dedup?: { key: string; windowMs: number };
}

/** What ingest made of a request. Only `accepted` requests are delivered. */
export type Disposition = 'accepted' | 'quarantined' | 'duplicate' | 'handshake';
export const DISPOSITIONS: readonly Disposition[] = ['accepted', 'quarantined', 'duplicate', 'handshake'];

/** A sender verdict as stored beside the request: `unverified` marks imported requests (a verdict from a file is never trusted). */
export interface StoredVerdict {
  scheme: string;
  result: VerifyResult | 'unverified';
  reason: string | null;
}

/**
 * A request's state: for an accepted request, its latest generation's delivery to the bucket
 * destination, or 'none'; otherwise its disposition (quarantined, duplicate, handshake).
 */
export type RequestState = Exclude<DeliveryState, 'superseded'> | 'held' | 'none' | Exclude<Disposition, 'accepted'>;

/** The request states retention may remove (src/retention/rules.ts). */
export type PrunableState = Extract<RequestState, 'delivered' | 'failed' | 'exhausted' | 'none'>;

export interface VerdictUpdate {
  id: string;
  verdict: StoredVerdict;
  release: boolean;
  /**
   * The request's dedup key, when the bucket de-duplicates and the request carries one: extracted
   * from its stored headers and body as ingest extracts it (ingest registers keys only for accepted
   * requests, so a quarantined one has none stored). Used on release only, inside its transaction
   * and as ingest's commit uses CapturedRequest.dedup, with the request's own `received_at` as the
   * arrival time: a key held by another request whose hold outlasts that arrival (`expires_at >
   * received_at`) makes the released request a `duplicate` of it, with no delivery; otherwise it
   * takes the key until `received_at + windowMs`.
   */
  dedup?: { key: string; windowMs: number };
}

export interface VerdictsApplied {
  /** Requests whose verdict was written. */
  updated: number;
  /** Ids released from quarantine (accepted now, with a first delivery when the bucket has a destination). */
  released: string[];
  /** Requests that left quarantine as duplicates (VerdictUpdate.dedup): no delivery. */
  duplicates: Array<{ id: string; duplicateOf: string }>;
}

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
  /** Chunked trailers as received (flat [name, value, …]); absent or empty: none. */
  rawTrailers?: string[];
  disposition: Disposition;
  /** null: stored by a bucket that did not verify. */
  verdict: StoredVerdict | null;
  dedupKey: string | null;
  /** For a duplicate: the request it repeats. */
  duplicateOf: string | null;
}

export type RequestSummary = Omit<StoredRequest, 'body' | 'rawHeaders' | 'sha256' | 'peer' | 'rawTrailers' | 'dedupKey' | 'duplicateOf'> & {
  generation: number | null;
};

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
  /** Sender verdicts (`--verified`); `unverified` matches imported requests. */
  verified?: Array<StoredVerdict['result']>;
}

export interface IterateOptions {
  /** At most this many requests (the oldest that match). */
  limit?: number;
}

/**
 * Where the next `requestBatch` goes on: handed back by the previous batch, passed back as it is
 * (plain data, so it crosses to the admin reader's thread).
 */
export interface RequestBatchCursor {
  /** The newest id when the walk started: requests stored later are not included. */
  newest: string;
  /** The last id the previous batch looked at (the walk goes on above it). */
  after?: string;
  /** How many more the walk's limit allows; absent: no limit. */
  left?: number;
}

export interface RequestBatch {
  /** Oldest first, whole (bodies too): at most 500, and at most 8 MiB of bodies (or one larger request). */
  requests: StoredRequest[];
  /** Pass back for the next batch; null when the walk is done. */
  next: RequestBatchCursor | null;
}

export interface ListRequestsOptions {
  limit: number;
  /** Return requests older than this id (cursor pagination, newest first). */
  before?: string;
}

/** A `requests list` row: the request and its latest generation's delivery to the bucket destination. */
export interface ListedRequest extends RequestSummary {
  /** Attempts made by the latest generation (0 when state is none). */
  attempts: number;
  /** The latest generation's last response status; null before any response (or state none). */
  lastStatus: number | null;
}

export interface RequestPage {
  requests: ListedRequest[];
  /** Pass as `before` for the next page; null on the last page. */
  nextCursor: string | null;
}

export interface Store extends ProcessRegistry {
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
  /**
   * Deletes the bucket with its requests and deliveries; refuses while undelivered work exists
   * unless forced. First the bucket becomes a `deleting` tombstone (nothing of it is stored or sent
   * from then on), then its rows go in short batches; if the purge stops (lock trouble, a crash),
   * the tombstone stands, and calling this again (force not needed) or purgeDeleting finishes it.
   */
  deleteBucket(name: string, options: { force: boolean }): Promise<{ requests: number }>;
  /** Finishes every deleting bucket's purge in short batches (serve's background pass); stops on lock trouble. */
  purgeDeleting(hooks?: PurgeHooks): Promise<PurgeResult>;
  bucketCounts(name: string): Promise<BucketCounts>;
  /** Every bucket's counts, by name, in a fixed number of queries (`bucket list`). */
  allBucketCounts(): Promise<Map<string, BucketCounts>>;
  /** Refusals not attributable to a bucket (unknown bucket, parse errors). */
  unattributedRejections(): Promise<Record<string, number>>;
  /**
   * One page of buckets in name order with their counts, oldest waiting request and recent
   * activity, read with one aggregate statement over the page's buckets only (the inspector's
   * overview and GET /api/buckets?limit=: 10,000 buckets must not be read to show 50).
   */
  bucketOverview(query: BucketOverviewQuery): Promise<BucketOverviewPage>;
  /** One page of a bucket's requests matching the filter, newest first (id order). */
  listRequests(bucket: string, filter: RequestFilter, page: ListRequestsOptions): Promise<RequestPage>;
  /**
   * Every request matching the filter, oldest first, read in bounded batches (export, replay
   * selection). Stored when the iteration starts: later arrivals are not included. With `limit`,
   * only the first (oldest) that many, and no more is read than they need.
   */
  iterateRequests(bucket: string, filter: RequestFilter, options?: IterateOptions): AsyncIterable<StoredRequest>;
  /**
   * The same walk as iterateRequests, one bounded batch per call: `cursor` null starts it (with
   * `options.limit`), then each batch's `next` goes on. For callers that cannot hold an iterator
   * open: the admin API's export, read through its off-thread reader one call at a time.
   */
  requestBatch(bucket: string, filter: RequestFilter, cursor: RequestBatchCursor | null, options?: IterateOptions): Promise<RequestBatch>;
  countRequests(bucket: string, filter: RequestFilter): Promise<number>;
  getRequest(id: string): Promise<StoredRequest | undefined>;
  /**
   * `requests verify`: stores re-checked verdicts of the bucket's requests (ids of another bucket or
   * gone are skipped); with `release`, a quarantined request whose new verdict is `verified` becomes
   * accepted and gets its first delivery (generation 1, pending, due now) when the bucket has a
   * destination. One short transaction per call: callers send at most 200 updates at a time.
   */
  applyVerdicts(bucket: string, updates: readonly VerdictUpdate[], nowMs: number): Promise<VerdictsApplied>;
  /** The database's size on disk (`/metrics`): cheap enough to read on every scrape. */
  storageSize(): Promise<StorageSize>;
  /** Raw per-bucket figures for `stats` and `health` (src/stats/stats.ts derives the fields). */
  statsSamples(query: StatsQuery): Promise<{ buckets: StatsSample[]; unattributedRejections: Record<string, number> }>;
  /**
   * Deletes old requests in terminal states with their deliveries and attempts, in short batches,
   * never one with a live delivery (src/retention/rules.ts). Requests that are not accepted
   * (quarantined, duplicate, handshake) are terminal: they go at the same age whatever `states`
   * names. Dedup keys expired by `nowMs` in the same buckets go too, in short batches. SQLite then gives the disk back in
   * small incremental_vacuum steps; on PostgreSQL autovacuum makes the space reusable and nothing
   * is given back (reclaimedBytes 0; README "Running on PostgreSQL").
   */
  prune(options: PruneOptions, hooks?: PruneHooks): Promise<PruneResult>;
  /** Every delivery of a request (all generations and destinations) with its attempts, oldest first. */
  requestHistory(id: string): Promise<DeliveryHistory[]>;
  /** Creates a replay: a new delivery generation for each request (see src/replay/replay.ts for the rules). */
  createReplay(input: NewReplay): Promise<Replay>;
  getReplay(id: string): Promise<Replay | undefined>;
  listReplays(options: { bucket?: string; limit: number }): Promise<Replay[]>;
  /** A replay's deliveries by state (the bucket's pause shows as held). */
  replayProgress(id: string): Promise<ReplayProgress>;
  /** The drain worker holding the database's worker lease at `nowMs`, if any. */
  activeWorker(nowMs: number): Promise<WorkerHolder | undefined>;
  /** Registered receivers and workers (stopped ones and those whose heartbeat expired included, with `alive` false), newest first; at most `limit`. */
  processes(nowMs: number, options?: { limit?: number }): Promise<ProcessRecord[]>;
  /**
   * Requests stored and attempts finished since the cursor, for `requests tail` and the admin
   * API's event poller: of one bucket (not_found when there is none), or of several in the same
   * few queries whatever their number (a bucket that is gone gives nothing).
   */
  tail(bucket: string | readonly string[], cursor: TailCursor): Promise<{ events: TailEvent[]; cursor: TailCursor }>;
  /** One page of `tail --since`'s requests: the bucket's requests with ids above `afterId`, by id, at most `limit`. */
  tailRequestsPage(bucket: string, afterId: string, limit: number): Promise<TailEvent[]>;
  /**
   * One page of `tail --since`'s attempts: the bucket's finished attempts after `after` in
   * (started_at, id) order that finished at or after `finishedFrom`, at most `limit` (fewer: no
   * more for now). An attempt finishes at most TAIL_LOOKBACK_MS after it starts.
   */
  tailAttemptsPage(bucket: string, page: TailAttemptsPage, limit: number): Promise<TailEvent[]>;
  /**
   * A writer for `requests import`: stores requests as new, as an acknowledged ingest would (fully
   * durable), in short transactions on a connection of its own. Close it when done.
   */
  openImporter(): Promise<RequestImporter>;
  /** Every operator setting that is set (`hookbucket settings`), by key order; a key not listed has its default. */
  getSettings(): Promise<StoredSetting[]>;
  /** Sets one setting (inserted or replaced), stamped with the store's clock; the value is stored as given (validate first: src/settings/). */
  putSetting(key: string, value: string): Promise<StoredSetting>;
  close(): Promise<void>;
}

/** One row of the settings table: a value every process of the database reads the same. */
export interface StoredSetting {
  key: string;
  value: string;
  updatedAt: number;
}

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

/** The bucket `requests import` checked: its name and creation time, which tells it from a later bucket of the same name. */
export interface ImportTarget {
  name: string;
  createdAt: number;
  /**
   * The bucket's verify scheme (schemeText) when it verifies: imported rows then store the verdict
   * `{scheme, unverified, imported}` (a verdict from a file is never trusted); absent or null: none.
   */
  verifyScheme?: string | null;
}

/** The verdict of an imported request in a verifying bucket. */
export function importedVerdict(verifyScheme: string | null | undefined): StoredVerdict | undefined {
  return verifyScheme ? { scheme: verifyScheme, result: 'unverified', reason: 'imported' } : undefined;
}

export interface RequestImporter {
  /**
   * Stores the items as new requests (new ids, received now) in one transaction; returns their ids
   * in order. Refused, storing nothing of the batch, unless the bucket is still the one checked
   * (same name and created_at, checked inside the batch's transaction): `bucket_deleting` while a
   * tombstone stands, `not_found` once it is gone or created anew.
   */
  write(bucket: ImportTarget, items: readonly ImportItem[], options: { createDelivery: boolean }): Promise<string[]>;
  close(): Promise<void>;
}

export interface StorageSize {
  /** SQLite: the database file's size; PostgreSQL: pg_database_size(current_database()). */
  databaseBytes: number;
  /** SQLite: the -wal file's size (0 when there is none); PostgreSQL: null (the server's WAL is shared by every database on it). */
  walBytes: number | null;
}

export interface BucketOverviewQuery {
  /** Buckets named after this one, in byte order; omitted: from the first. */
  after?: string;
  /** Buckets on the page, 1 or more. */
  limit: number;
  /** Activity: `bins` windows of `binMs` from `sinceMs` (epoch ms); 0 bins reads none. */
  sinceMs: number;
  binMs: number;
  bins: number;
}

export interface BucketOverviewRow {
  bucket: Bucket;
  counts: BucketCounts;
  /** received_at of the oldest request still pending, retrying or delivering; null when none. */
  oldestWaitingAt: number | null;
  /** Requests stored per window, `bins` of them, oldest first. */
  arrivals: number[];
  /** Deliveries to the bucket destination that settled as delivered per window. */
  delivered: number[];
}

export interface BucketOverviewPage {
  buckets: BucketOverviewRow[];
  /** Every bucket in the database (deleting ones included, as listBuckets). */
  total: number;
  /** Pass as `after` for the next page; null on the last page. */
  nextAfter: string | null;
}

export interface StatsQuery {
  /** One bucket; omitted: every bucket. */
  bucket?: string;
  /** The window, epoch ms: since inclusive, until exclusive. */
  sinceMs: number;
  untilMs: number;
}

/** One bucket's raw figures for `stats`; delivery and attempt figures are for the bucket destination (`--to` replays left out). */
export interface StatsSample {
  bucket: string;
  paused: boolean;
  /** Requests stored. */
  requests: number;
  /** Requests by their latest delivery's state (requests without one are `requests` minus these). */
  latest: Partial<Record<DeliveryState, number>>;
  /** Superseded deliveries. */
  superseded: number;
  /** received_at of the oldest request still pending, retrying or delivering; null when none. */
  oldestWaitingAt: number | null;
  /** Requests stored in the window. */
  receivedInWindow: number;
  /** Deliveries that settled in the window, by how. */
  settled: { delivered: number; failed: number; exhausted: number };
  /** Attempts started in the window that finished (not `released`), grouped by duration (null: lease expired) and success. */
  attempts: Array<{ durationMs: number | null; delivered: boolean; count: number }>;
  /** Ingest refusals by reason. */
  rejected: Record<string, number>;
  /** Deferrals recorded by claims since the bucket was made, by reason (zeros left out; store/deferral-counts.ts). */
  deferred: Record<string, number>;
  /** Requests stored but not accepted, by disposition (none of them has a delivery; zeros left out). */
  dispositions?: Partial<Record<Exclude<Disposition, 'accepted'>, number>>;
}

export interface PruneOptions {
  /** One bucket; omitted: every bucket. */
  bucket?: string;
  /** Requests received before this (epoch ms) are old enough. */
  receivedBeforeMs: number;
  states: readonly PrunableState[];
  /** Count what would go, delete nothing. */
  dryRun: boolean;
  /** Dedup keys that expired by now are deleted too (in the buckets pruned); omitted: the store's clock. */
  nowMs?: number;
}

export interface PruneProgress {
  bucket: string;
  phase: 'delete' | 'reclaim';
  /** Requests removed (or, in a dry run, found) so far, all buckets. */
  requests: number;
  bytes: number;
  /** File bytes given back so far. */
  reclaimedBytes: number;
}

export interface PruneHooks {
  onProgress?: (p: PruneProgress) => void;
  /** Stops between batches (the server's retention loop on shutdown). */
  signal?: AbortSignal;
}

export interface PruneCounts {
  requests: number;
  /** Body bytes of those requests. */
  bytes: number;
  deliveries: number;
  attempts: number;
  /** Old requests in the named states kept because a delivery is still live. */
  keptLive: number;
}

export interface PruneResult extends PruneCounts {
  buckets: Record<string, PruneCounts>;
  /** File bytes given back by incremental vacuum (0 in a dry run, and always 0 on PostgreSQL). */
  reclaimedBytes: number;
  /** Expired dedup keys deleted (or, in a dry run, found). */
  dedupKeys?: number;
}

export interface PurgeHooks {
  signal?: AbortSignal;
  /** The write-lock wait per batch; omitted: the store's own busy timeout. */
  lockWaitMs?: number;
}

export interface PurgeResult {
  /** Deleting buckets purged to the end this time (their names are free). */
  finished: string[];
  requests: number;
  bytes: number;
  /** Why the pass stopped early (lock trouble), if it did. */
  stopped?: string;
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

/**
 * What the worker tells a claim besides the bucket's settings: the pacer state itself (token
 * bucket, retry budget, Retry-After block, replays' own rates) is the store's, in rows the claim
 * locks (src/store/pacer-row.ts), so that any number of workers share each bucket's limits.
 */
export interface ClaimPolicyState {
  /** Claims past this many are taken ahead of a free slot: none of them may be paced by a replay's own rate. */
  aheadFrom?: number;
  /**
   * Rate tokens coming up within this many ms are taken now (policy/admission.ts): such a claimed
   * attempt's `startedAt` (and its attempt row's started_at, its lease) is its token's time, and
   * the worker sends it then, not before. Default 0.
   */
  horizonMs?: number;
  /** At most this many tokens taken ahead (attempts that go after the claim), e.g. a worker's share of the concurrency. */
  aheadLimit?: number;
}

export interface ClaimResult {
  claimed: ClaimedAttempt[];
  /**
   * The decision, in the worker's clock. `verdict.pacer` is the bucket's pacer as this claim left
   * it: a hint for the worker to skip claims that cannot start anything (another worker may have
   * moved it since). `wakeAt`: when a held-back delivery may go.
   */
  verdict: ClaimVerdict;
  /** Another worker is claiming this bucket now (its pacer row is locked): nothing was claimed; try again shortly. */
  busy?: boolean;
  /**
   * Shared claims: the bucket's concurrency is taken by deliveries under a live lease, whichever
   * worker holds them; nothing was claimed. Another worker's completions wake no one here, so a
   * worker with none of its own in flight there comes back shortly.
   */
  full?: boolean;
}

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
  /** The same, as undici takes it: origin and raw path with query. */
  target: { origin: string; path: string };
  /** When the attempt starts, as its attempt row and lease count it: the claim's time, or a rate token's taken ahead (ClaimPolicyState.horizonMs). */
  startedAt: number;
  /**
   * How long after the claim the attempt may go, ms: 0, or the wait for its rate token (on the
   * store's clock, so that a worker whose clock or pass time differs never sends it early). The
   * worker adds it to its own clock once the claim has returned.
   */
  sendAfterMs: number;
  firstAttemptAt: number;
  pausedMsAtFirst: number;
  method: string;
  path: string;
  query: string | null;
  rawHeaders: string[];
  body: Buffer;
  /** The request's stored verdict (re-signing signs only verified requests; `x-hookbucket-verified`). */
  verdict: StoredVerdict | null;
  /** The request's stored dedup key (`h:<value>`/`j:<value>`), the re-signed `webhook-id` when set. */
  dedupKey: string | null;
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
  /** A 429 or 503 with Retry-After blocks the whole bucket until then (worker's clock); the store keeps the block in the bucket's pacer row. */
  block?: { bucket: string; untilMs: number };
}

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

/** A receiver or worker process, as it registers itself (the `workers` table). */
export interface ProcessBeat {
  id: string;
  roles: ReadonlyArray<'receiver' | 'worker'>;
  host: string;
  pid: number;
  /** Free JSON text worth showing (version, settings). */
  info: string;
  /** A worker's --lease; null for a receiver alone. */
  leaseMs: number | null;
}

export interface ProcessRecord extends ProcessBeat {
  startedAt: number;
  heartbeatAt: number;
  expiresAt: number;
  stoppedAt: number | null;
  /** Beating at the time asked about: not stopped and its last heartbeat not expired. */
  alive: boolean;
  /** Deliveries in `delivering` whose current attempt this process made: a dead worker's wait for their lease to end. */
  inflight: number;
}

/** The process registry both stores write: receivers beat through Store, workers through DrainStore. */
export interface ProcessRegistry {
  /** Registers the process or renews its heartbeat: alive until nowMs + ttlMs. */
  heartbeat(p: ProcessBeat, nowMs: number, ttlMs: number): Promise<void>;
  /** Marks a clean stop. */
  markStopped(id: string, nowMs: number): Promise<void>;
}

/** What the change feed reports since its last call (DrainStore.takeChanges). */
export interface StoreChanges {
  changed: boolean;
  bucketsChanged: boolean;
}

/** The drain worker's view of the store: claim, record, recover, the single-worker lease, and the change feed. */
export interface DrainStore extends ProcessRegistry {
  /**
   * Whether several workers may claim at once (PostgreSQL). Then the claim bounds concurrency by
   * the bucket's `delivering` rows with a live lease, whoever holds them, claiming ahead is off,
   * and there is no single-worker lease. False (SQLite): one active worker at a time.
   */
  readonly sharedClaims: boolean;
  /** Buckets as they are now (settings changed from the CLI apply from the next claim). */
  listBuckets(): Promise<Bucket[]>;
  /**
   * In one transaction: record `complete` first, then walk the bucket's due deliveries in due order
   * (at most `limit`), decide about each with the pure admission policy (policy/admission.ts) from
   * the pacer state given and the replays' own rates, and claim (state delivering, lease, attempt
   * row started) or defer them. The verdict carries the pacer state to keep once this committed.
   */
  claim(
    bucket: Bucket,
    options: {
      nowMs: number;
      limit: number;
      leaseUntilMs: number;
      /** Finished attempts to record first, in the same transaction (one commit instead of two). */
      complete?: AttemptResult[];
      /** Recorded on the attempt rows (workers.id). */
      workerId?: string;
    },
    policy: ClaimPolicyState,
  ): Promise<ClaimResult>;
  /** Completes attempt rows and moves their deliveries on, in one transaction. */
  complete(results: AttemptResult[]): Promise<void>;
  /**
   * Closes attempts whose lease expired (`lease_expired`, counted); each delivery is due again at
   * once, or exhausted when that was its bucket's last attempt (policy/admission.ts afterLeaseExpiry).
   */
  recoverExpired(nowMs: number, buckets: readonly Bucket[]): Promise<ExpiredDelivery[]>;
  /**
   * The unpaused buckets with work due at `nowMs` (first attempts, retries, replays, `--to` rows,
   * released and lease-recovered deliveries): the worker claims from these only. One indexed
   * query, however many buckets exist; a bucket may be listed with nothing claimable (a lower
   * bound), and its next claim moves it on.
   */
  dueBuckets(nowMs: number): Promise<string[]>;
  /** The earliest time after `nowMs` an unpaused bucket falls due or a lease expires; null when none. */
  nextDueAt(nowMs: number): Promise<number | null>;
  /** Takes or renews the single-worker lease; a live lease held by another holder is refused. */
  acquireWorkerLease(holder: string, info: string, nowMs: number, ttlMs: number): Promise<WorkerLeaseResult>;
  releaseWorkerLease(holder: string): Promise<void>;
  /**
   * The change feed, part 1: what other connections committed since the last call (the first call
   * reports both as changed). `changed`: anything at all (new requests, a replay, bucket writes);
   * `bucketsChanged`: a bucket was created, changed, paused, resumed or deleted, so the worker
   * re-reads listBuckets(). This store's own commits are not reported, so bucket writes must come
   * from another connection (the CLI's, serve's Store), never through the drain store. Cheap enough
   * to call at the start of every pass and whenever a finished attempt frees a slot. SQLite reads
   * PRAGMA data_version and the bucket epoch row (src/store/sqlite/); PostgreSQL reports the
   * LISTEN/NOTIFY notices received since the last call.
   */
  takeChanges(): Promise<StoreChanges>;
  /**
   * The change feed, part 2: calls `listener` (with no arguments, possibly more than once per
   * commit) when another connection commits, while subscribed; the worker uses it to end a sleep
   * early. Returns the unsubscribe function. Independent of takeChanges(): a notice does not
   * consume the changes takeChanges() will report. SQLite polls data_version every 100 ms while at
   * least one listener is subscribed; PostgreSQL listens for NOTIFY.
   */
  onChange(listener: () => void): () => void;
  /** The operator settings, as Store.getSettings (the worker re-reads them every few seconds: src/drain/worker.ts). */
  getSettings(): Promise<StoredSetting[]>;
  close(): Promise<void>;
}

export interface AttemptRecord {
  id: string;
  number: number;
  url: string;
  startedAt: number;
  durationMs: number | null;
  status: number | null;
  errorClass: string | null;
  errorMessage: string | null;
  responseHeaders: string[] | null;
  responseBody: Buffer | null;
  responseTruncated: boolean;
  outcome: string | null;
  reason: string | null;
  nextAttemptAt: number | null;
  nextWhy: string | null;
  /** The worker that made the attempt (the workers table's id); null for attempts recorded before workers were. */
  workerId: string | null;
}

export interface DeliveryHistory {
  id: string;
  generation: number;
  /** null: the bucket's destination. */
  destination: string | null;
  state: DeliveryState;
  trigger: 'initial' | 'replay';
  replayId: string | null;
  attempts: number;
  nextAttemptAt: number;
  deferrals: number;
  lastDeferralReason: string | null;
  createdAt: number;
  settledAt: number | null;
  supersedeRequested: boolean;
  latest: boolean;
  attemptLog: AttemptRecord[];
}

export interface NewReplay {
  id: string;
  bucket: string;
  requestIds: readonly string[];
  /** The selectors as given, recorded with the replay. */
  selection: Record<string, unknown>;
  /** A --to URL; null: the bucket's destination. */
  destination: string | null;
  rate: Rate | null;
  nowMs: number;
}

export interface Replay {
  id: string;
  bucket: string;
  selection: Record<string, unknown>;
  destination: string | null;
  rate: Rate | null;
  total: number;
  /** Earlier pending or retrying deliveries superseded at once, and in-flight ones marked to be. */
  superseded: number;
  createdAt: number;
}

export interface ReplayProgress {
  total: number;
  pending: number;
  retrying: number;
  delivering: number;
  held: number;
  delivered: number;
  failed: number;
  exhausted: number;
  superseded: number;
  /** Delivered, failed, exhausted or superseded. */
  settled: number;
  paused: boolean;
  /** The latest settled_at among its deliveries, for rate and ETA. */
  lastSettledAt: number | null;
}

export interface TailCursor {
  /** Requests with a larger id are new. */
  requestId: string;
  /**
   * Attempts finished at or after this time are looked at (at most TAIL_LOOKBACK_MS before now);
   * `seen` keeps them from repeating.
   */
  sinceMs: number;
  seen: string[];
}

/** Where a page of `tail --since`'s attempts starts (tailAttemptsPage). */
export interface TailAttemptsPage {
  /** Attempts after this one in (started_at, id) order; id '' for every attempt started then. */
  after: { startedAt: number; id: string };
  finishedFrom: number;
}

export type TailEvent =
  | { kind: 'request'; at: number; request: RequestSummary }
  | {
      kind: 'attempt';
      /** When it finished. */
      at: number;
      bucket: string;
      requestId: string;
      deliveryId: string;
      generation: number;
      attempt: AttemptRecord;
    };

/** `bucket_deleting`: the bucket is a tombstone whose purge has not finished. */
export function deletingError(name: string): AppError {
  return new AppError('bucket_deleting', `bucket ${name} is being deleted; finish it with: hookbucket bucket delete ${name}`);
}

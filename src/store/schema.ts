import type { Generated } from 'kysely';

/** Table types for today's schema. Migrations never import these (they are frozen in time). */
export interface BucketsTable {
  name: string;
  destination: string | null;
  max_body: number;
  ack_status: number;
  ack_body: string | null;
  ack_content_type: string | null;
  paused: number;
  created_at: number;
  updated_at: number;
  rate_count: number | null;
  rate_per_ms: number | null;
  burst: number;
  concurrency: number;
  timeout_ms: number;
  base_ms: number;
  multiplier: number;
  /** null: uncapped. */
  cap_ms: number | null;
  max_attempts: number | null;
  give_up_ms: number | null;
  jitter: string;
  /** --retry-on words; null: the default retried set. */
  retry_on: string | null;
  retry_budget: number;
  retry_floor: number;
  forward_path: number;
  /** 1: the sub-path is appended as stored, dot-segments included (--forward-raw-path). */
  forward_raw_path: number;
  /** JSON flat list [name, value, …]. */
  forward_headers: string;
  paused_at: number | null;
  paused_total_ms: number;
  /** --retain: prune requests older than this; null: keep forever. */
  retain_ms: number | null;
  /** --retain-state: comma list of the states --retain prunes; null: delivered only. */
  retain_states: string | null;
  /** Set when `bucket delete` began: a tombstone whose rows are being purged (see sqlite-delete.ts). */
  deleting_at: number | null;
  /** Sender verification (store/provider-row.ts maps these): the scheme's text; null: off. */
  verify_scheme: string | null;
  /** JSON list of the verify secrets as given (any one matching passes). */
  verify_secrets: string | null;
  /** null: the default tolerance. */
  verify_tolerance_ms: number | null;
  /** `quarantine` or `reject`. */
  on_invalid: string;
  /** Comma list of URL handshakes answered besides the scheme's own; null: none. */
  handshakes: string | null;
  verify_token: string | null;
  graph_client_state: string | null;
  /** Comma list of accepted methods; null: any. */
  methods: string | null;
  /** `provider`, `header:<name>` or `json:<dotted.path>`; null: no dedup. */
  dedup_key: string | null;
  dedup_window_ms: number | null;
  /** `standard`; null: deliveries are not re-signed. */
  sign_scheme: string | null;
  /** JSON list of signing secrets (`whsec_…`). */
  sign_secrets: string | null;
}

export interface RequestsTable {
  id: string;
  bucket: string;
  received_at: number;
  method: string;
  /** Raw sub-path after the bucket name, still percent-encoded; '' when none. */
  path: string;
  /** Raw query string without the '?'; null when the target had no '?'. */
  query: string | null;
  /** JSON of the flat raw header list [name, value, name, value, …] as received. */
  headers: string;
  body: Buffer;
  size: number;
  sha256: string;
  peer: string | null;
  /** JSON of the flat raw chunked-trailer list [name, value, …]; null when there were none. */
  trailers: string | null;
  /** What ingest made of it: accepted (delivered), quarantined, duplicate or handshake. */
  disposition: Generated<string>;
  /** The sender verdict; null when the bucket did not verify. */
  verify_scheme: string | null;
  /** verified, invalid, missing, expired, or unverified (imported). */
  verify_result: string | null;
  verify_reason: string | null;
  /** The dedup key the request carried (when the bucket dedups and the key was there). */
  dedup_key: string | null;
  /** For a duplicate: the id of the request it repeats. */
  duplicate_of: string | null;
}

/** Dedup keys seen per bucket, each kept until expires_at (the window), apart from request retention. */
export interface DedupKeysTable {
  bucket: string;
  key: string;
  request_id: string;
  expires_at: number;
}

export type DeliveryState = 'pending' | 'retrying' | 'delivering' | 'delivered' | 'failed' | 'exhausted' | 'superseded';

export interface DeliveriesTable {
  id: string;
  request_id: string;
  bucket: string;
  /** null: follows the bucket's current destination; set for replays to another URL. */
  destination: string | null;
  generation: number;
  state: DeliveryState;
  attempts: number;
  next_attempt_at: number;
  lease_until: number | null;
  trigger: 'initial' | 'replay';
  replay_id: string | null;
  deferrals: number;
  last_deferral_reason: string | null;
  created_at: number;
  updated_at: number;
  first_attempt_at: number | null;
  paused_ms_at_first: number | null;
  lease_attempt: string | null;
  last_status: number | null;
  last_error: string | null;
  last_attempt_at: number | null;
  settled_at: number | null;
  supersede_requested: number;
  /** 1 on the request's highest-generation delivery to the bucket destination (the one that gives the request its state). */
  latest: number;
}

export interface ReplaysTable {
  id: string;
  bucket: string;
  selection: string;
  destination: string | null;
  rate_count: number | null;
  rate_per_ms: number | null;
  total: number;
  superseded: number;
  created_at: number;
}

export type AttemptOutcome = 'delivered' | 'retry' | 'failed' | 'exhausted' | 'lease_expired' | 'released';

export interface AttemptsTable {
  id: string;
  delivery_id: string;
  request_id: string;
  bucket: string;
  number: number;
  url: string;
  started_at: number;
  duration_ms: number | null;
  status: number | null;
  error_class: string | null;
  error_message: string | null;
  /** JSON flat list [name, value, …] of the response headers. */
  response_headers: string | null;
  /** The first 4 KiB of the response body. */
  response_body: Buffer | null;
  response_truncated: number;
  outcome: AttemptOutcome | null;
  reason: string | null;
  next_attempt_at: number | null;
  next_why: string | null;
  /** The worker that made the attempt (workers.id); null for attempts from before it was recorded. */
  worker_id: string | null;
}

export interface WorkerLeaseTable {
  name: string;
  holder: string;
  info: string;
  acquired_at: number;
  heartbeat_at: number;
  expires_at: number;
}

export interface RejectionsTable {
  /** '' for refusals that name no existing bucket (unknown bucket, parse errors). */
  bucket: string;
  reason: string;
  count: number;
  last_at: number;
}

/** Operator settings shared by every process of the database (`hookbucket settings`); a missing key is its default. */
export interface SettingsTable {
  key: string;
  value: string;
  updated_at: number;
}

export interface MetaTable {
  key: string;
  value: Generated<number>;
}

/** A bucket's pacer state, owned by the store (src/store/pacer-row.ts maps it). */
export interface BucketPacerTable {
  bucket: string;
  /** The bucket this state is for: a pacer row of an older bucket of the same name counts as none. */
  bucket_created_at: number;
  /** The token bucket: when it is full again (ms, with a fraction). */
  full_at: number;
  /** The retry budget's window: JSON [[epoch second, first attempts, retries], …]. */
  budget: string;
  /** A bucket-wide Retry-After block until this time; 0: none. */
  blocked_until: number;
  /** The latest clock reading this row was moved at. */
  counted_at: number;
  /**
   * Deferrals recorded by claims, by reason, since the bucket was made (each claim counts the ones
   * it wrote on the head of the line: once per walk and reason). deferral-counts.ts maps them.
   */
  deferred_rate: number;
  deferred_retry_budget: number;
  deferred_retry_after: number;
  deferred_replay_rate: number;
}

export interface ReplayPacerTable {
  replay_id: string;
  full_at: number;
}

/** Receivers and workers, each with a heartbeat. */
export interface WorkersTable {
  id: string;
  /** 'receiver', 'worker' or 'receiver,worker' (serve with its worker). */
  roles: string;
  host: string;
  pid: number;
  /** JSON: version and settings worth showing. */
  info: string;
  /** A worker's --lease; null for a receiver. */
  lease_ms: number | null;
  started_at: number;
  heartbeat_at: number;
  /** Alive until this time unless it beats again. */
  expires_at: number;
  /** Set on a clean stop. */
  stopped_at: number | null;
}

export interface Database {
  buckets: BucketsTable;
  requests: RequestsTable;
  deliveries: DeliveriesTable;
  attempts: AttemptsTable;
  replays: ReplaysTable;
  worker_lease: WorkerLeaseTable;
  bucket_pacer: BucketPacerTable;
  replay_pacer: ReplayPacerTable;
  workers: WorkersTable;
  rejections: RejectionsTable;
  meta: MetaTable;
  dedup_keys: DedupKeysTable;
  settings: SettingsTable;
}

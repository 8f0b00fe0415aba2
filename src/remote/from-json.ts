/**
 * The API's JSON (the CLI's `--json` shapes, src/json/, src/replay/replay-json.ts,
 * src/stats/stats-report.ts) turned back into the Store's types, so that the CLI's commands render
 * a remote server's data with their own code. And the other way for writes: a BucketPatch as the
 * body of POST/PATCH /api/buckets (the CLI's flag formats, docs/api.md).
 */
import { DEFAULT_RETRY_ON, formatRetryOn, parseRetryOn } from '../policy/classify.js';
import { formatRate, parseRate } from '../policy/token-bucket.js';
import type { Schedule } from '../policy/schedule.js';
import type { StatsReport } from '../stats/stats-report.js';
import type { StatsFields } from '../stats/stats.js';
import type {
  AttemptRecord,
  Bucket,
  BucketCounts,
  BucketPatch,
  DeliveryHistory,
  ListedRequest,
  ProcessRecord,
  Replay,
  ReplayProgress,
  RequestPage,
  StoredRequest,
} from '../store/store.js';
import type { RequestFilter } from '../store/store.js';
import { filterJson } from '../options/request-filter.js';
import type { Query } from './api-client.js';
import { parseDuration } from '../config/units.js';
import { dedupKeyText, parseDedupKey } from '../policy/dedup.js';
import { parseVerifyScheme, schemeText } from '../policy/verify.js';
import { formatDuration } from '../shared/format-duration.js';
import { type FingerprintsOnly, SET_ON_SERVER } from '../options/provider-settings.js';
import type { ProviderSettings } from '../store/store.js';

/* eslint-disable @typescript-eslint/no-explicit-any */
// biome-ignore lint/suspicious/noExplicitAny: server JSON, read field by field
type J = any;

const ms = (iso: string | null | undefined): number | null => (iso === null || iso === undefined ? null : Date.parse(iso));
const msOr0 = (iso: string | null | undefined): number => ms(iso) ?? 0;
const flat = (pairs: Array<[string, string]> | null | undefined): string[] => (pairs ?? []).flat();
const bytes = (text: string, encoding: string | null | undefined): Buffer => Buffer.from(text, encoding === 'base64' ? 'base64' : 'utf8');

export function bucketFromJson(j: J): Bucket {
  const s = j.schedule;
  const schedule = {
    baseMs: s.base_ms,
    multiplier: s.multiplier,
    capMs: s.cap_ms === null ? Infinity : s.cap_ms,
    jitter: s.jitter,
    ...(s.max_attempts !== null ? { maxAttempts: s.max_attempts } : { giveUpMs: s.give_up_ms }),
  } as Schedule;
  // The JSON always spells the retried set out; the default set reads back as "the default".
  const retryOn = j.retry_on === formatRetryOn(DEFAULT_RETRY_ON) ? null : (parseRetryOn(j.retry_on) ?? null);
  return {
    name: j.name,
    destination: j.destination,
    maxBody: j.max_body,
    ackStatus: j.ack_status,
    ackBody: j.ack_body,
    ackContentType: j.ack_content_type,
    paused: j.paused,
    createdAt: msOr0(j.created_at),
    updatedAt: msOr0(j.updated_at),
    provider: providerFromJson(j),
    drain: {
      rate: j.rate === null ? null : (parseRate(j.rate) ?? null),
      burst: j.burst,
      concurrency: j.concurrency,
      timeoutMs: j.timeout_ms,
      schedule,
      retryOn,
      retryBudget: { fraction: j.retry_budget, floorPerSecond: j.retry_floor },
      forwardPath: j.forward_path,
      forwardRawPath: j.forward_raw_path,
      forwardHeaders: (j.forward_headers ?? []).map(([n, v]: [string, string]) => [n, v] as [string, string]),
    },
    pausedAt: ms(j.paused_at),
    // Not in the JSON: only differences of it are shown (bucket resume), and those are taken before and after.
    pausedTotalMs: j.paused_total_ms ?? 0,
    retainMs: j.retain_ms,
    retainStates: j.retain_states,
    deletingAt: ms(j.deleting_at),
  };
}

/**
 * The provider settings of a bucket's JSON. The server never sends a secret: the secret lists
 * come back empty with the server's `fingerprints` (printed as they are, and a change that gives no
 * new secret leaves the server's in place), a set token as SET_ON_SERVER.
 */
export function providerFromJson(j: J): ProviderSettings {
  const fps = (list: J): string[] => ((list ?? []) as J[]).map((s) => String(s.fingerprint));
  const v = j.verify;
  return {
    verify:
      v === null || v === undefined
        ? null
        : ({
            scheme: parseVerifyScheme(v.scheme),
            secrets: [],
            fingerprints: fps(v.secrets),
            toleranceMs: parseDuration(v.tolerance) ?? 0,
            onInvalid: v.on_invalid === 'reject' ? 'reject' : 'quarantine',
          } as NonNullable<ProviderSettings['verify']> & FingerprintsOnly),
    handshakes: j.handshakes ?? [],
    verifyToken: j.verify_token_set === true ? SET_ON_SERVER : null,
    graphClientState: j.graph_client_state_set === true ? SET_ON_SERVER : null,
    methods: j.methods ?? null,
    dedup:
      j.dedup === null || j.dedup === undefined ? null : { key: parseDedupKey(j.dedup.key), windowMs: parseDuration(j.dedup.window) ?? 0 },
    sign:
      j.sign === null || j.sign === undefined
        ? null
        : ({ scheme: 'standard', secrets: [], fingerprints: fps(j.sign.secrets) } as NonNullable<ProviderSettings['sign']> &
            FingerprintsOnly),
  };
}

/** The provider part of a BucketPatch as the bucket body; secret lists only when they hold secrets (not fingerprints read back). */
function providerBody(p: Partial<ProviderSettings>, b: Record<string, unknown>): void {
  if (p.verify !== undefined) {
    const v = p.verify as (NonNullable<ProviderSettings['verify']> & FingerprintsOnly) | null;
    b.verify = v === null ? null : schemeText(v.scheme);
    if (v !== null) {
      if (v.fingerprints === undefined) b.verify_secrets = v.secrets;
      b.verify_tolerance = formatDuration(v.toleranceMs);
      b.on_invalid = v.onInvalid;
    }
  }
  if (p.handshakes !== undefined) b.handshakes = p.handshakes;
  if (p.verifyToken !== undefined) b.verify_token = p.verifyToken;
  if (p.graphClientState !== undefined) b.graph_client_state = p.graphClientState;
  if (p.methods !== undefined) b.methods = p.methods === null ? null : p.methods.join(',');
  if (p.dedup !== undefined) {
    b.dedup = p.dedup === null ? null : dedupKeyText(p.dedup.key);
    if (p.dedup !== null) b.dedup_window = formatDuration(p.dedup.windowMs);
  }
  if (p.sign !== undefined) {
    const s = p.sign as (NonNullable<ProviderSettings['sign']> & FingerprintsOnly) | null;
    b.sign = s === null ? null : s.scheme;
    if (s !== null && s.fingerprints === undefined) b.sign_secrets = s.secrets;
  }
}

export function countsFromJson(j: J): BucketCounts {
  return { requests: j.requests ?? 0, bytes: j.bytes ?? 0, states: j.states ?? {}, rejections: j.rejections ?? {} };
}

/** A BucketPatch as the API's bucket body: each value in the CLI's own format, null where a --no-* flag removes it. */
export function bucketBody(p: BucketPatch): Record<string, unknown> {
  const b: Record<string, unknown> = {};
  if (p.destination !== undefined) b.destination = p.destination;
  if (p.maxBody !== undefined) b.max_body = p.maxBody;
  if (p.ackStatus !== undefined) b.ack_status = p.ackStatus;
  if (p.ackBody !== undefined) b.ack_body = p.ackBody;
  if (p.ackContentType !== undefined) b.ack_content_type = p.ackContentType;
  if (p.retainMs !== undefined) b.retain = p.retainMs === null ? null : `${p.retainMs}ms`;
  // --no-retain resets the states itself; the API refuses states sent beside it.
  if (p.retainStates !== undefined && p.retainMs !== null) b.retain_states = p.retainStates;
  const d = p.drain ?? {};
  if (d.rate !== undefined) b.rate = d.rate === null ? null : formatRate(d.rate);
  // With --no-rate the burst goes back to its default on its own (a burst beside it is refused).
  if (d.burst !== undefined && d.rate !== null) b.burst = d.burst;
  if (d.concurrency !== undefined) b.concurrency = d.concurrency;
  if (d.timeoutMs !== undefined) b.timeout = `${d.timeoutMs}ms`;
  if (d.schedule !== undefined) {
    const s = d.schedule;
    b.base = `${s.baseMs}ms`;
    b.multiplier = s.multiplier;
    b.cap = Number.isFinite(s.capMs) ? `${s.capMs}ms` : 'none';
    b.jitter = s.jitter;
    if (s.maxAttempts !== undefined) b.max_attempts = s.maxAttempts;
    else b.give_up = `${s.giveUpMs}ms`;
  }
  if (d.retryOn !== undefined) b.retry_on = d.retryOn === null ? null : formatRetryOn(d.retryOn);
  if (d.retryBudget !== undefined) {
    b.retry_budget = d.retryBudget.fraction;
    b.retry_floor = d.retryBudget.floorPerSecond;
  }
  if (d.forwardPath !== undefined) b.forward_path = d.forwardPath;
  if (d.forwardRawPath !== undefined) b.forward_raw_path = d.forwardRawPath;
  if (d.forwardHeaders !== undefined) b.forward_headers = d.forwardHeaders.map(([n, v]) => `${n}: ${v}`);
  if (p.provider !== undefined) providerBody(p.provider, b);
  return b;
}

/** A RequestFilter as the API's query parameters (times absolute, as the CLI resolved them). */
export function filterQuery(filter: RequestFilter): Query {
  const q: Query = {};
  for (const [k, v] of Object.entries(filterJson(filter))) {
    if (Array.isArray(v)) q[k] = k === 'header' ? (v as string[]) : (v as string[]).join(',');
    else if (v !== undefined) q[k] = String(v);
  }
  return q;
}

export function requestPageFromJson(j: J, bucket: string): RequestPage {
  return {
    requests: (j.requests as J[]).map(
      (r): ListedRequest => ({
        id: r.id,
        bucket,
        receivedAt: msOr0(r.received_at),
        method: r.method,
        path: r.path,
        query: r.query,
        size: r.size,
        state: r.state,
        attempts: r.attempts,
        lastStatus: r.last_status,
        generation: r.generation,
        disposition: r.disposition ?? 'accepted',
        verdict: r.verification ?? null,
      }),
    ),
    nextCursor: j.next_cursor,
  };
}

/** A stored request from GET /api/requests/{id} (or an export line); `body` replaces the JSON's when given (the exact bytes). */
export function requestFromJson(j: J, body?: Buffer): StoredRequest {
  const trailers = flat(j.trailers);
  return {
    id: j.id,
    bucket: j.bucket,
    receivedAt: msOr0(j.received_at),
    method: j.method,
    path: j.path,
    query: j.query,
    rawHeaders: flat(j.headers),
    body: body ?? bytes(j.body, j.body_encoding),
    size: j.size,
    sha256: j.sha256,
    peer: j.peer ?? null,
    state: j.state,
    ...(trailers.length > 0 ? { rawTrailers: trailers } : {}),
    disposition: j.disposition ?? 'accepted',
    verdict: j.verification ?? null,
    dedupKey: j.dedup_key ?? null,
    duplicateOf: j.duplicate_of ?? null,
  };
}

function attemptFromJson(a: J): AttemptRecord {
  return {
    id: a.id,
    number: a.number,
    url: a.url,
    startedAt: msOr0(a.started_at),
    durationMs: a.duration_ms,
    status: a.status,
    errorClass: a.error_class,
    errorMessage: a.error_message,
    responseHeaders: a.response_headers === null ? null : flat(a.response_headers),
    responseBody: a.response_body === null ? null : bytes(a.response_body, a.response_body_encoding),
    responseTruncated: a.response_truncated,
    outcome: a.outcome,
    reason: a.reason,
    nextAttemptAt: ms(a.next_attempt_at),
    nextWhy: a.next_why,
    workerId: a.worker,
  };
}

export function historyFromJson(deliveries: J[]): DeliveryHistory[] {
  return deliveries.map((d) => ({
    id: d.id,
    generation: d.generation,
    destination: d.destination,
    state: d.state,
    trigger: d.trigger,
    replayId: d.replay_id,
    attempts: d.attempts,
    // Shown only while pending or retrying, which is when the JSON carries it.
    nextAttemptAt: msOr0(d.next_attempt_at),
    deferrals: d.deferrals,
    lastDeferralReason: d.last_deferral_reason,
    createdAt: msOr0(d.created_at),
    settledAt: ms(d.settled_at),
    supersedeRequested: d.supersede_requested,
    latest: d.latest,
    attemptLog: (d.attempt_log as J[]).map(attemptFromJson),
  }));
}

export function replayFromJson(j: J): Replay {
  return {
    id: j.id,
    bucket: j.bucket,
    selection: j.selection,
    destination: j.destination,
    rate: j.rate === null ? null : (parseRate(j.rate) ?? null),
    total: j.total,
    superseded: j.superseded_at_start,
    createdAt: msOr0(j.created_at),
  };
}

export function progressFromJson(p: J): ReplayProgress {
  const settled = p.total - p.remaining;
  return {
    total: p.total,
    pending: p.pending,
    retrying: p.retrying,
    delivering: p.delivering,
    held: p.held,
    delivered: p.delivered,
    failed: p.failed,
    exhausted: p.exhausted,
    superseded: p.superseded,
    settled,
    paused: p.paused,
    // Not in the JSON, and read by no command (replays wait measures its pace from what it sees).
    lastSettledAt: null,
  };
}

export function processFromJson(p: J): ProcessRecord {
  return {
    id: p.id,
    roles: p.roles,
    host: p.host,
    pid: p.pid,
    // Only the recorded ingest address travels (stats' `url`), in the row's own info format.
    info: typeof p.url === 'string' ? JSON.stringify({ url: p.url }) : '',
    leaseMs: p.lease_ms,
    startedAt: msOr0(p.started_at),
    heartbeatAt: msOr0(p.heartbeat_at),
    expiresAt: 0,
    stoppedAt: ms(p.stopped_at),
    alive: p.alive,
    inflight: p.inflight,
  };
}

const NOT_FIELDS = new Set([
  'bucket',
  'window_ms',
  'since',
  'until',
  'buckets',
  'workers_alive',
  'delivering_dead_worker',
  'processes',
  'stuck',
  'stuck_buckets',
]);

function fieldsOf(j: J): StatsFields {
  const f: Record<string, unknown> = {};
  for (const [k, v] of Object.entries(j)) if (!NOT_FIELDS.has(k)) f[k] = v;
  return f as unknown as StatsFields;
}

/** GET /api/stats as the report `stats` and `health` render (statsJson's inverse). */
export function statsReportFromJson(j: J): StatsReport {
  return {
    bucket: j.bucket,
    windowMs: j.window_ms,
    sinceMs: msOr0(j.since),
    untilMs: msOr0(j.until),
    fields: fieldsOf(j),
    perBucket: ((j.buckets ?? []) as J[]).map((b) => {
      const { bucket, ...rest } = b;
      return { bucket, fields: rest as StatsFields };
    }),
    processes: ((j.processes ?? []) as J[]).map(processFromJson),
    stuck: ((j.stuck ?? []) as J[]).map((s) => ({
      bucket: s.bucket,
      timeoutMs: s.timeout_ms,
      leaseMs: s.lease_ms,
      source: s.lease_source,
    })),
  };
}

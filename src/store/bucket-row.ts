import type { Insertable, Selectable } from 'kysely';
/**
 * The buckets row and the app's Bucket, both ways. Dialect-neutral: every dialect stores the same
 * columns (integers for flags, epoch-ms integers for times), and values go through Number() so a
 * driver returning bigint or numeric columns as strings reads the same.
 */
import { DEFAULT_RETRY_ON, formatRetryOn, parseRetryOn } from '../policy/classify.js';
import { DEFAULT_SCHEDULE, type Jitter, type Schedule } from '../policy/schedule.js';
import type { BucketsTable } from './schema.js';
import { DEFAULT_PRUNE_STATES, parsePruneStates } from '../retention/rules.js';
import { DEFAULT_DRAIN, DEFAULT_MAX_BODY } from './bucket-defaults.js';
import { NO_PROVIDER, providerColumns, toProvider } from './provider-row.js';
import type { Bucket, BucketPatch, DrainSettings, NewBucket, PrunableState } from './store.js';

/** A bucket row as the app sees it. */
export function toBucket(r: Selectable<BucketsTable>): Bucket {
  const shape = {
    baseMs: Number(r.base_ms),
    multiplier: Number(r.multiplier),
    capMs: r.cap_ms === null ? Infinity : Number(r.cap_ms),
    jitter: r.jitter as Jitter,
  };
  const schedule: Schedule =
    r.give_up_ms !== null
      ? { ...shape, giveUpMs: Number(r.give_up_ms) }
      : { ...shape, maxAttempts: Number(r.max_attempts ?? DEFAULT_SCHEDULE.maxAttempts) };
  const pairs = JSON.parse(r.forward_headers) as string[];
  const forwardHeaders: Array<[string, string]> = [];
  for (let i = 0; i + 1 < pairs.length; i += 2) forwardHeaders.push([pairs[i]!, pairs[i + 1]!]);
  return {
    name: r.name,
    destination: r.destination,
    maxBody: Number(r.max_body),
    ackStatus: Number(r.ack_status),
    ackBody: r.ack_body,
    ackContentType: r.ack_content_type,
    paused: Number(r.paused) === 1,
    createdAt: Number(r.created_at),
    updatedAt: Number(r.updated_at),
    pausedAt: r.paused_at === null ? null : Number(r.paused_at),
    pausedTotalMs: Number(r.paused_total_ms),
    retainMs: r.retain_ms === null ? null : Number(r.retain_ms),
    retainStates: retainStatesFrom(r.retain_states),
    deletingAt: r.deleting_at === null || r.deleting_at === undefined ? null : Number(r.deleting_at),
    provider: toProvider(r),
    drain: {
      rate: r.rate_count === null || r.rate_per_ms === null ? null : { count: Number(r.rate_count), perMs: Number(r.rate_per_ms) },
      burst: Number(r.burst),
      concurrency: Number(r.concurrency),
      timeoutMs: Number(r.timeout_ms),
      schedule,
      retryOn: r.retry_on === null ? null : (parseRetryOn(r.retry_on) ?? DEFAULT_RETRY_ON),
      retryBudget: { fraction: Number(r.retry_budget), floorPerSecond: Number(r.retry_floor) },
      forwardPath: Number(r.forward_path) === 1,
      forwardRawPath: Number(r.forward_raw_path) === 1,
      forwardHeaders,
    },
  };
}

/** The stored `--retain-state` list; null (or nothing usable): delivered only. */
function retainStatesFrom(text: string | null): PrunableState[] {
  if (text === null) return [...DEFAULT_PRUNE_STATES];
  const parsed = parsePruneStates(text);
  return parsed.ok ? parsed.states : [...DEFAULT_PRUNE_STATES];
}

/** Columns for the retention settings given; the default states (delivered only) store as null. */
export function retentionColumns(p: { retainMs?: number | null; retainStates?: readonly PrunableState[] }): Partial<BucketsTable> {
  const v: Partial<BucketsTable> = {};
  if (p.retainMs !== undefined) v.retain_ms = p.retainMs;
  if (p.retainStates !== undefined) {
    const isDefault =
      p.retainStates.length === DEFAULT_PRUNE_STATES.length && p.retainStates.every((s) => DEFAULT_PRUNE_STATES.includes(s));
    v.retain_states = isDefault ? null : p.retainStates.join(',');
  }
  return v;
}

/** Columns for the drain settings given (the rest stay as they are). */
export function drainColumns(d: Partial<DrainSettings>): Partial<BucketsTable> {
  const v: Partial<BucketsTable> = {};
  if (d.rate !== undefined) {
    v.rate_count = d.rate === null ? null : d.rate.count;
    v.rate_per_ms = d.rate === null ? null : d.rate.perMs;
  }
  if (d.burst !== undefined) v.burst = d.burst;
  if (d.concurrency !== undefined) v.concurrency = d.concurrency;
  if (d.timeoutMs !== undefined) v.timeout_ms = d.timeoutMs;
  if (d.schedule !== undefined) {
    const s = d.schedule;
    v.base_ms = s.baseMs;
    v.multiplier = s.multiplier;
    v.cap_ms = Number.isFinite(s.capMs) ? s.capMs : null;
    v.max_attempts = s.maxAttempts ?? null;
    v.give_up_ms = s.giveUpMs ?? null;
    v.jitter = s.jitter;
  }
  if (d.retryOn !== undefined) v.retry_on = d.retryOn === null ? null : formatRetryOn(d.retryOn);
  if (d.retryBudget !== undefined) {
    v.retry_budget = d.retryBudget.fraction;
    v.retry_floor = d.retryBudget.floorPerSecond;
  }
  if (d.forwardPath !== undefined) v.forward_path = d.forwardPath ? 1 : 0;
  if (d.forwardRawPath !== undefined) v.forward_raw_path = d.forwardRawPath ? 1 : 0;
  if (d.forwardHeaders !== undefined) v.forward_headers = JSON.stringify(d.forwardHeaders.flat());
  return v;
}

type DrainColumns = Omit<
  BucketsTable,
  | 'name'
  | 'destination'
  | 'max_body'
  | 'ack_status'
  | 'ack_body'
  | 'ack_content_type'
  | 'paused'
  | 'created_at'
  | 'updated_at'
  | 'paused_at'
  | 'paused_total_ms'
  | ProviderColumnName
>;

type ProviderColumnName =
  | 'verify_scheme'
  | 'verify_secrets'
  | 'verify_tolerance_ms'
  | 'on_invalid'
  | 'handshakes'
  | 'verify_token'
  | 'graph_client_state'
  | 'methods'
  | 'dedup_key'
  | 'dedup_window_ms'
  | 'sign_scheme'
  | 'sign_secrets';

/** A new bucket's row, unpaused, created at `nowMs`. */
export function newBucketColumns(b: NewBucket, nowMs: number): Insertable<BucketsTable> {
  return {
    name: b.name,
    destination: b.destination ?? null,
    max_body: b.maxBody ?? DEFAULT_MAX_BODY,
    ack_status: b.ackStatus ?? 200,
    ack_body: b.ackBody ?? null,
    ack_content_type: b.ackContentType ?? null,
    paused: 0,
    created_at: nowMs,
    updated_at: nowMs,
    paused_at: null,
    paused_total_ms: 0,
    ...retentionColumns({ retainMs: b.retainMs ?? null, ...(b.retainStates ? { retainStates: b.retainStates } : {}) }),
    // Every drain setting is given here, defaults filled in, so every column is set.
    ...(drainColumns({ ...DEFAULT_DRAIN, ...b.drain }) as DrainColumns),
    on_invalid: 'quarantine',
    ...providerColumns({ ...NO_PROVIDER, ...b.provider }),
  };
}

/** Columns for the settings a patch gives (the rest stay as they are), updated at `nowMs`. */
export function bucketPatchColumns(patch: BucketPatch, nowMs: number): Partial<BucketsTable> {
  const values: Partial<BucketsTable> = { updated_at: nowMs };
  if (patch.destination !== undefined) values.destination = patch.destination;
  if (patch.maxBody !== undefined) values.max_body = patch.maxBody;
  if (patch.ackStatus !== undefined) values.ack_status = patch.ackStatus;
  if (patch.ackBody !== undefined) values.ack_body = patch.ackBody;
  if (patch.ackContentType !== undefined) values.ack_content_type = patch.ackContentType;
  if (patch.drain !== undefined) Object.assign(values, drainColumns(patch.drain));
  if (patch.provider !== undefined) Object.assign(values, providerColumns(patch.provider));
  Object.assign(values, retentionColumns(patch));
  return values;
}

/** Columns that pause a bucket at `nowMs`; none when it is paused already. */
export function pauseColumns(b: Bucket, nowMs: number): Partial<BucketsTable> {
  return b.paused ? {} : { paused: 1, paused_at: nowMs, updated_at: nowMs };
}

/** Columns that resume a bucket at `nowMs`, adding the pause to its paused total; none when it is not paused. */
export function resumeColumns(b: Bucket, nowMs: number): Partial<BucketsTable> {
  return b.paused
    ? { paused: 0, paused_at: null, paused_total_ms: b.pausedTotalMs + Math.max(0, nowMs - (b.pausedAt ?? nowMs)), updated_at: nowMs }
    : {};
}

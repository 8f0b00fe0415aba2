/**
 * The `--json` shapes that the CLI prints and the admin API answers (README "JSON fields"): one
 * function per object, so that both say the same thing in the same words.
 */
import { DEFAULT_RETRY_ON, formatRetryOn } from '../policy/classify.js';
import type { Schedule } from '../policy/schedule.js';
import { formatRate } from '../policy/token-bucket.js';
import type { Bucket, BucketCounts } from '../store/store.js';
import { iso } from './iso.js';

/** Stable JSON shape of a bucket (README "JSON fields"). Durations in ms; forwarded header values unredacted. */
export function bucketJson(b: Bucket, counts?: BucketCounts) {
  const d = b.drain;
  const s = d.schedule;
  return {
    name: b.name,
    destination: b.destination,
    max_body: b.maxBody,
    ack_status: b.ackStatus,
    ack_body: b.ackBody,
    ack_content_type: b.ackContentType,
    rate: d.rate === null ? null : formatRate(d.rate),
    burst: d.burst,
    concurrency: d.concurrency,
    timeout_ms: d.timeoutMs,
    schedule: scheduleSettingsJson(s),
    retry_on: formatRetryOn(d.retryOn ?? DEFAULT_RETRY_ON),
    retry_budget: d.retryBudget.fraction,
    retry_floor: d.retryBudget.floorPerSecond,
    forward_path: d.forwardPath,
    forward_raw_path: d.forwardRawPath,
    forward_headers: d.forwardHeaders.map(([name, value]): [string, string] => [name, value]),
    paused: b.paused,
    paused_at: iso(b.pausedAt),
    retain_ms: b.retainMs,
    retain_states: b.retainStates,
    deleting: b.deletingAt !== null,
    deleting_at: iso(b.deletingAt),
    created_at: iso(b.createdAt),
    updated_at: iso(b.updatedAt),
    ...(counts ? { requests: counts.requests, bytes: counts.bytes, states: counts.states, rejections: counts.rejections } : {}),
  };
}

/** A retry schedule's settings, as a bucket's `schedule` and `schedule --json` give them; durations in ms, null for "none". */
export function scheduleSettingsJson(s: Schedule) {
  return {
    base_ms: s.baseMs,
    multiplier: s.multiplier,
    cap_ms: Number.isFinite(s.capMs) ? s.capMs : null,
    max_attempts: s.maxAttempts ?? null,
    give_up_ms: s.giveUpMs ?? null,
    jitter: s.jitter,
  };
}

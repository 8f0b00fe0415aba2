/**
 * The `--json` shapes that the CLI prints and the admin API answers (README "JSON fields"): one
 * function per object, so that both say the same thing in the same words.
 */
import { DEFAULT_RETRY_ON, formatRetryOn } from '../policy/classify.js';
import type { Schedule } from '../policy/schedule.js';
import { formatRate } from '../policy/token-bucket.js';
import { dedupKeyText } from '../policy/dedup.js';
import { schemeText } from '../policy/verify.js';
import { formatDuration } from '../shared/format-duration.js';
import type { Bucket, BucketCounts, ProviderSettings } from '../store/store.js';
import { secretFingerprint } from '../verify/verify-stream.js';
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
    ...providerJson(b.provider),
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

/**
 * The fingerprints of a secret list. A list read back from the admin API holds no secrets, only
 * the fingerprints the server sent (`fingerprints`, src/options/provider-settings.ts).
 */
export function fingerprintsOf(s: { secrets: readonly string[]; fingerprints?: string[] }): string[] {
  return s.fingerprints ?? s.secrets.map(secretFingerprint);
}

/**
 * A bucket's provider settings (README "JSON fields"): secrets as fingerprints only, tokens as
 * whether they are set; durations in the CLI's text form (`5m`, `72h`), as the flags take them.
 */
export function providerJson(p: ProviderSettings) {
  return {
    verify:
      p.verify === null
        ? null
        : {
            scheme: schemeText(p.verify.scheme),
            secrets: fingerprintsOf(p.verify).map((fingerprint) => ({ fingerprint })),
            tolerance: formatDuration(p.verify.toleranceMs),
            on_invalid: p.verify.onInvalid,
          },
    handshakes: [...p.handshakes],
    verify_token_set: p.verifyToken !== null,
    graph_client_state_set: p.graphClientState !== null,
    methods: p.methods === null ? null : [...p.methods],
    dedup: p.dedup === null ? null : { key: dedupKeyText(p.dedup.key), window: formatDuration(p.dedup.windowMs) },
    sign: p.sign === null ? null : { scheme: p.sign.scheme, secrets: fingerprintsOf(p.sign).map((fingerprint) => ({ fingerprint })) },
  };
}

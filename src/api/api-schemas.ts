/**
 * The admin API's schemas: inputs in the CLI's own formats, parsed by the CLI's own parsers
 * (src/options), and the outputs, which are the `--json` shapes (src/json, README "JSON fields").
 * The OpenAPI document is generated from these same schemas.
 */
import { z } from '@hono/zod-openapi';
import { JITTERS } from '../policy/schedule.js';
import { REQUEST_STATES } from '../options/request-filter.js';
import { BUCKET_NAME } from '../ingest/bucket-name.js';

/**
 * The API's numbers keep their documented unit (ms for a duration, bytes for a size), JSON number
 * or text alike: the CLI refuses a number without a unit, the API's JSON is for programs.
 */
export function inMs<T>(parse: (value: string) => T): (value: string) => T {
  return (v) => parse(/^\s*\d+(?:\.\d+)?\s*$/.test(v) ? `${v.trim()}ms` : v);
}

export function inBytes<T>(parse: (value: string) => T): (value: string) => T {
  return (v) => parse(/^\s*\d+(?:\.\d+)?\s*$/.test(v) ? `${v.trim()}B` : v);
}

/**
 * A string in a CLI format, parsed by the CLI's parser for it (which throws with the CLI's own
 * message). Numbers are taken too where the CLI's format reads a bare number (ms, bytes, counts).
 */
export function cliValue<T>(parse: (value: string) => T, description: string, example: string, numbers = false) {
  const input = numbers ? z.union([z.string(), z.number()]) : z.string();
  return input
    .transform((v, ctx) => {
      try {
        return parse(String(v));
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
        return z.NEVER;
      }
    })
    .openapi({ description, example });
}

/** A comma list, an array of them, or (in a query) the parameter repeated: joined for the CLI's comma-list parsers. */
export function cliList<T>(parse: (value: string) => T, description: string, example: string) {
  return z
    .union([z.string(), z.array(z.string())])
    .transform((v, ctx) => {
      try {
        return parse(Array.isArray(v) ? v.join(',') : v);
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
        return z.NEVER;
      }
    })
    .openapi({ description, example });
}

/** Each value on its own (header matches: a value may hold commas). */
export function cliRepeat<T>(parse: (value: string) => T[], description: string, example: string) {
  return z
    .union([z.string(), z.array(z.string())])
    .transform((v, ctx) => {
      try {
        return (Array.isArray(v) ? v : [v]).flatMap((x) => parse(x));
      } catch (e) {
        ctx.addIssue({ code: 'custom', message: (e as Error).message });
        return z.NEVER;
      }
    })
    .openapi({ description, example });
}

export const BucketNameParam = z.object({
  name: z
    .string()
    .regex(BUCKET_NAME, 'invalid bucket name: use ^[a-z0-9][a-z0-9_-]{0,62}$')
    .openapi({ param: { name: 'name', in: 'path' }, example: 'stripe', description: 'bucket name, ^[a-z0-9][a-z0-9_-]{0,62}$' }),
});

export const IdParam = z.object({
  id: z
    .string()
    .max(100)
    .openapi({ param: { name: 'id', in: 'path' }, example: '019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00' }),
});

export const ErrorSchema = z
  .object({
    error: z.string().openapi({ example: 'bucket stripe not found' }),
    code: z.string().openapi({ example: 'not_found', description: 'stable code (docs/api.md "Errors")' }),
  })
  .openapi('Error');

/* ---- outputs: the --json shapes ---- */

const iso = z.string().openapi({ example: '2026-12-01T10:00:00.000Z' });
const isoOrNull = iso.nullable();
const counts = z.record(z.string(), z.number());
const pairs = z.array(z.tuple([z.string(), z.string()]));
const STATES = REQUEST_STATES as unknown as [string, ...string[]];

export const BucketSchema = z
  .object({
    name: z.string(),
    destination: z.string().nullable(),
    max_body: z.number(),
    ack_status: z.number(),
    ack_body: z.string().nullable(),
    ack_content_type: z.string().nullable(),
    rate: z.string().nullable().openapi({ example: '200/s' }),
    burst: z.number(),
    concurrency: z.number(),
    timeout_ms: z.number(),
    schedule: z.object({
      base_ms: z.number(),
      multiplier: z.number(),
      cap_ms: z.number().nullable(),
      max_attempts: z.number().nullable(),
      give_up_ms: z.number().nullable(),
      jitter: z.enum(JITTERS as unknown as [string, ...string[]]),
    }),
    retry_on: z.string(),
    retry_budget: z.number(),
    retry_floor: z.number(),
    forward_path: z.boolean(),
    forward_raw_path: z.boolean(),
    forward_headers: pairs,
    paused: z.boolean(),
    paused_at: isoOrNull,
    retain_ms: z.number().nullable(),
    retain_states: z.array(z.string()),
    verify: z
      .object({
        scheme: z.string().openapi({ example: 'stripe' }),
        secrets: z.array(z.object({ fingerprint: z.string().openapi({ example: 'sha256:3f7a0c9e12ab' }) })),
        tolerance: z.string().openapi({ example: '5m' }),
        on_invalid: z.enum(['quarantine', 'reject']),
      })
      .nullable()
      .openapi({ description: 'sender verification; the secrets as fingerprints only, never the secrets' }),
    handshakes: z.array(z.string()).openapi({ description: "handshakes answered besides the verify scheme's own" }),
    verify_token_set: z.boolean(),
    graph_client_state_set: z.boolean(),
    methods: z.array(z.string()).nullable().openapi({ description: 'null: any method' }),
    dedup: z.object({ key: z.string().openapi({ example: 'provider' }), window: z.string().openapi({ example: '72h' }) }).nullable(),
    sign: z.object({ scheme: z.literal('standard'), secrets: z.array(z.object({ fingerprint: z.string() })) }).nullable(),
    generated_sign_secret: z.string().optional().openapi({
      description: 'only in the answer to a create or change with sign_secrets ["generate"]: the new secret, given out this once',
    }),
    deleting: z.boolean(),
    deleting_at: isoOrNull,
    created_at: isoOrNull,
    updated_at: isoOrNull,
    requests: z.number().optional().openapi({ description: 'with counts only (GET)' }),
    bytes: z.number().optional(),
    states: z.record(z.string(), z.number()).optional(),
    rejections: counts.optional(),
  })
  .openapi('Bucket');

export const BucketListSchema = z
  .object({
    buckets: z.array(BucketSchema),
    unattributed_rejections: counts,
    next_cursor: z
      .string()
      .nullable()
      .optional()
      .openapi({ description: 'with ?limit: pass as ?after for the next page; null on the last page (absent without ?limit)' }),
  })
  .openapi('BucketList');

export const DeletedSchema = z.object({ name: z.string(), deleted: z.literal(true), requests: z.number() }).openapi('Deleted');

export const ListedRequestSchema = z
  .object({
    id: z.string(),
    received_at: isoOrNull,
    method: z.string(),
    path: z.string(),
    query: z.string().nullable(),
    size: z.number(),
    state: z.enum(STATES),
    attempts: z.number(),
    last_status: z.number().nullable(),
    generation: z.number().nullable(),
  })
  .openapi('ListedRequest');

export const RequestPageSchema = z
  .object({
    requests: z.array(ListedRequestSchema),
    next_cursor: z.string().nullable().openapi({ description: 'pass as cursor for the next page; null on the last' }),
  })
  .openapi('RequestPage');

const AttemptSchema = z.object({
  id: z.string(),
  number: z.number(),
  url: z.string(),
  started_at: z.string(),
  gap_ms: z.number().nullable(),
  duration_ms: z.number().nullable(),
  status: z.number().nullable(),
  error_class: z.string().nullable(),
  error_message: z.string().nullable(),
  outcome: z.string().nullable(),
  reason: z.string().nullable(),
  next_attempt_at: z.string().nullable(),
  next_why: z.string().nullable(),
  worker: z.string().nullable(),
  response_headers: pairs.nullable(),
  response_body: z.string().nullable(),
  response_body_encoding: z.enum(['utf8', 'base64']).nullable(),
  response_truncated: z.boolean(),
});

const DeliverySchema = z.object({
  id: z.string(),
  generation: z.number(),
  destination: z.string().nullable(),
  state: z.string(),
  trigger: z.enum(['initial', 'replay']),
  replay_id: z.string().nullable(),
  latest: z.boolean(),
  attempts: z.number(),
  deferrals: z.number(),
  last_deferral_reason: z.string().nullable(),
  next_attempt_at: z.string().nullable(),
  created_at: z.string(),
  settled_at: z.string().nullable(),
  supersede_requested: z.boolean(),
  attempt_log: z.array(AttemptSchema),
});

export const StoredRequestSchema = z
  .object({
    id: z.string(),
    bucket: z.string(),
    received_at: isoOrNull,
    method: z.string(),
    path: z.string(),
    query: z.string().nullable(),
    headers: pairs.openapi({ description: 'as received: order, case and repeats kept' }),
    body: z.string(),
    body_encoding: z.enum(['utf8', 'base64']),
    trailers: pairs,
    size: z.number(),
    sha256: z.string(),
    peer: z.string().nullable(),
    state: z.enum(STATES),
    deliveries: z.array(DeliverySchema),
  })
  .openapi('StoredRequest');

const ProgressSchema = z.object({
  total: z.number(),
  delivered: z.number(),
  failed: z.number(),
  exhausted: z.number(),
  superseded: z.number(),
  pending: z.number(),
  retrying: z.number(),
  delivering: z.number(),
  held: z.number(),
  remaining: z.number(),
  paused: z.boolean(),
});

export const ReplaySchema = z
  .object({
    id: z.string(),
    bucket: z.string(),
    selection: z.record(z.string(), z.unknown()),
    destination: z.string().nullable(),
    rate: z.string().nullable(),
    total: z.number(),
    superseded_at_start: z.number(),
    created_at: isoOrNull,
    progress: ProgressSchema.optional(),
    settled: z.boolean().optional(),
  })
  .openapi('Replay');

export const ReplayListSchema = z.object({ replays: z.array(ReplaySchema) }).openapi('ReplayList');

export const DryRunSchema = z
  .object({
    dry_run: z.literal(true),
    bucket: z.string(),
    destination: z.string(),
    count: z.number(),
    sample: z.array(
      z.object({
        id: z.string(),
        received_at: isoOrNull,
        method: z.string(),
        path: z.string(),
        query: z.string().nullable(),
        state: z.string(),
      }),
    ),
  })
  .openapi('ReplayDryRun');

/** One step of `requests verify`: its counts (`requests verify --json`) and where the next goes on. */
export const VerifyStepSchema = z
  .object({
    checked: z.number().openapi({ description: 'requests checked in this call' }),
    verified: z.number(),
    invalid: z.number(),
    missing: z.number(),
    expired: z.number(),
    released: z.number().openapi({ description: 'quarantined requests accepted (and due for delivery) by this call' }),
    duplicates: z.number().openapi({
      description: 'quarantined requests that verify but whose dedup key another request holds: stored as duplicate, not delivered',
    }),
    next_cursor: z
      .string()
      .nullable()
      .openapi({ description: 'pass back as cursor, with the same body, for the next batch; null when done' }),
  })
  .openapi('VerifyStep');

export const NothingToReplaySchema = z.object({ replay: z.null(), count: z.literal(0) }).openapi('NothingToReplay');

/** `stats --json`: the fields are README "stats"; the schema names the frame and lets the fields through. */
export const StatsSchema = z
  .object({
    bucket: z.string().nullable(),
    window_ms: z.number(),
    since: isoOrNull,
    until: isoOrNull,
  })
  .catchall(z.unknown())
  .openapi('Stats');

export const HealthSchema = z
  .object({
    healthy: z.boolean(),
    expression: z.string().nullable(),
    bucket: z.string().nullable(),
    window_ms: z.number(),
    since: isoOrNull,
    until: isoOrNull,
    tripped: z.array(z.object({ condition: z.string(), result: z.boolean(), values: z.record(z.string(), z.number().nullable()) })),
    stuck: z
      .array(z.object({ bucket: z.string(), timeout_ms: z.number(), lease_ms: z.number(), lease_source: z.enum(['worker', 'default']) }))
      .openapi({ description: 'buckets whose attempt timeout is not shorter than the lease: never healthy while any is listed' }),
    values: z.record(z.string(), z.number().nullable()),
  })
  .openapi('Health');

export const HealthFailureSchema = z
  .object({ healthy: z.literal(false), error: z.string(), code: z.string() })
  .openapi('HealthStorageFailure');

/**
 * The body of POST /buckets and PATCH /buckets/{name}: the `bucket create|update` flags in
 * snake_case, each value in the CLI's format and parsed by the CLI's parser, so that limits match.
 * In a PATCH, null removes a setting as the --no-* flags do.
 */
import { z } from '@hono/zod-openapi';
import type { BucketSettingsOpts } from '../options/bucket-settings.js';
import { pruneStatesArg } from '../options/bucket-settings.js';
import {
  burstArg,
  capArg,
  concurrencyArg,
  durationMsArg,
  fractionArg,
  maxAttemptsArg,
  multiplierArg,
  positiveDurationMsArg,
  rateArg,
  retryFloorArg,
  retryOnArg,
  timeoutArg,
} from '../options/drain-settings.js';
import { ackStatusArg, contentTypeArg, forwardHeaderArg, maxBodyArg, urlArg } from '../options/parsers.js';
import { JITTERS } from '../policy/schedule.js';
import { AppError } from '../shared/errors.js';
import { BUCKET_NAME } from '../ingest/bucket-name.js';
import { cliList, cliValue, inBytes, inMs } from './api-schemas.js';
import {
  dedupKeyArg,
  handshakeArg,
  MAX_SECRETS,
  methodsArg,
  onInvalidArg,
  signSchemeArg,
  verifySchemeArg,
  wholeSecondsArg,
} from '../options/provider-settings.js';
import { generateSigningSecret } from '../verify/sign.js';

/** Secrets travel in the body (over the token-authenticated admin API) and are never answered: the answer has fingerprints. */
const secretList = (description: string) =>
  z
    .array(z.string())
    .max(MAX_SECRETS)
    .openapi({ description, example: ['whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw'] });

const settings = {
  destination: cliValue(urlArg, 'consumer URL the drain worker forwards to (--destination); null removes it', 'http://localhost:3000/hooks')
    .nullable()
    .optional(),
  max_body: cliValue(
    inBytes(maxBodyArg),
    'largest body accepted, at most 100MiB (--max-body); a number is bytes',
    '25MiB',
    true,
  ).optional(),
  ack_status: cliValue(ackStatusArg, '2xx status answered to the sender (--ack-status)', '200', true).optional(),
  ack_body: z
    .string()
    .nullable()
    .optional()
    .openapi({ description: 'body answered to the sender (--ack-body); null: the default {"id":"<id>"}' }),
  ack_content_type: cliValue(contentTypeArg, 'content type of the ack body (--ack-content-type); null: the default', 'text/plain')
    .nullable()
    .optional(),
  retain: cliValue(inMs(positiveDurationMsArg), 'serve prunes requests older than this (--retain); null turns retention off', '30d', true)
    .nullable()
    .optional(),
  retain_states: cliList(
    pruneStatesArg,
    'the states retain prunes (--retain-state): delivered, failed, exhausted, none',
    'delivered,exhausted',
  ).optional(),
  rate: cliValue(rateArg, 'cap every attempt at this rate (--rate); null removes the cap', '200/s').nullable().optional(),
  burst: cliValue(burstArg, 'attempts allowed back to back under the rate (--burst)', '5', true).optional(),
  concurrency: cliValue(concurrencyArg, 'attempts in flight at once (--concurrency)', '4', true).optional(),
  timeout: cliValue(inMs(timeoutArg), 'time limit of one attempt, at most 10m (--timeout); a number is ms', '30s', true).optional(),
  base: cliValue(inMs(positiveDurationMsArg), 'gap before the first retry (--base)', '30s', true).optional(),
  multiplier: cliValue(multiplierArg, 'each gap is the previous one times this (--multiplier)', '3', true).optional(),
  cap: cliValue(inMs(capArg), 'longest gap, or none (--cap)', '3h', true).optional(),
  max_attempts: cliValue(maxAttemptsArg, 'give up after this many attempts (--max-attempts); not with give_up', '14', true).optional(),
  give_up: cliValue(
    inMs(durationMsArg),
    'give up when the next attempt would fall this long after the first (--give-up); not with max_attempts',
    '48h',
    true,
  ).optional(),
  jitter: z
    .enum(JITTERS as unknown as [string, ...string[]])
    .optional()
    .openapi({ description: '--jitter' }),
  retry_on: cliValue(retryOnArg, 'outcomes retried (--retry-on), or default; null: the default set', '5xx,429,network,timeout')
    .nullable()
    .optional(),
  retry_budget: cliValue(fractionArg, 'retries allowed per first attempt over 60 s (--retry-budget)', '0.1', true).optional(),
  retry_floor: cliValue(
    retryFloorArg,
    'retries per second allowed however quiet the bucket, or a rate like 30/m (--retry-floor)',
    '1',
    true,
  ).optional(),
  forward_path: z.boolean().optional().openapi({ description: '--forward-path / --no-forward-path' }),
  forward_raw_path: z.boolean().optional().openapi({ description: '--forward-raw-path / --no-forward-raw-path' }),
  forward_headers: z
    .array(cliValue(forwardHeaderArg, '"Name: value"', 'Authorization: Bearer abc123'))
    .nullable()
    .optional()
    .openapi({
      description: 'the whole list of headers added to every forwarded request ("Name: value" each); null or [] removes them all',
    }),
  verify: cliValue(
    verifySchemeArg,
    "check each sender's signature (--verify): stripe, github, shopify, slack, standard, zoom, meta, dropbox, twitter or hmac:<header>:<sha256|sha1>:<hex|base64>[:<prefix>]; null turns it off",
    'stripe',
  )
    .nullable()
    .optional(),
  verify_secrets: secretList(
    "the whole list of verify secrets, in the provider's own format (--verify-secret); any one matching passes; omitted with verify: the bucket's secrets stay",
  ).optional(),
  verify_tolerance: cliValue(
    inMs(wholeSecondsArg),
    'how far a signed timestamp may be from the arrival (--verify-tolerance); whole seconds; a number is ms',
    '5m',
    true,
  ).optional(),
  on_invalid: cliValue(onInvalidArg, 'quarantine or reject (--on-invalid)', 'quarantine').optional(),
  handshakes: z
    .array(cliValue(handshakeArg, 'graph, meta or dropbox', 'graph'))
    .nullable()
    .optional()
    .openapi({
      description: "the whole list of handshakes answered besides the verify scheme's own (--handshake); null or [] removes them",
    }),
  verify_token: z
    .string()
    .nullable()
    .optional()
    .openapi({ description: "Meta's hub.verify_token (--verify-token); never answered back (verify_token_set); null removes it" }),
  graph_client_state: z
    .string()
    .nullable()
    .optional()
    .openapi({ description: "Microsoft Graph's clientState (--graph-client-state); never answered back; null removes it" }),
  methods: cliList(methodsArg, 'the methods accepted, others get 405 (--methods); null: any method', 'POST,PUT').nullable().optional(),
  dedup: cliValue(dedupKeyArg, 'provider, header:<name> or json:<dotted.path> (--dedup); null turns dedup off', 'provider')
    .nullable()
    .optional(),
  dedup_window: cliValue(
    inMs(wholeSecondsArg),
    'how long a dedup key is remembered (--dedup-window); a number is ms',
    '72h',
    true,
  ).optional(),
  sign: cliValue(signSchemeArg, 're-sign every delivery attempt (--sign): standard; null turns it off', 'standard').nullable().optional(),
  sign_secrets: secretList(
    'the whole list of signing secrets, whsec_… (--sign-secret); "generate" makes a new one, answered once as generated_sign_secret',
  ).optional(),
};

export const BucketPatchBody = z.strictObject(settings).openapi('BucketSettings');

export const BucketCreateBody = z
  .strictObject({
    name: z.string().regex(BUCKET_NAME, 'invalid bucket name: use ^[a-z0-9][a-z0-9_-]{0,62}$').openapi({ example: 'stripe' }),
    ...settings,
  })
  .openapi('BucketCreate');

type SettingsBody = z.output<typeof BucketPatchBody>;

/**
 * The body as the CLI's parsed options (null → the --no-* form), for bucketPatchFrom; with
 * `"sign_secrets": ["generate"]`, the secret made (for the answer's generated_sign_secret).
 */
export function settingsOpts(b: SettingsBody): BucketSettingsOpts & { generated?: string } {
  if (b.max_attempts !== undefined && b.give_up !== undefined) {
    throw new AppError('usage', 'max_attempts and give_up cannot be combined: a schedule gives up after one or the other');
  }
  const o: BucketSettingsOpts = {};
  const nullable = <T>(v: T | null | undefined): T | false | undefined => (v === null ? false : v);
  if (b.destination !== undefined) o.destination = nullable(b.destination)!;
  if (b.max_body !== undefined) o.maxBody = b.max_body;
  if (b.ack_status !== undefined) o.ackStatus = b.ack_status;
  if (b.ack_body !== undefined) o.ackBody = nullable(b.ack_body)!;
  if (b.ack_content_type !== undefined) o.ackContentType = nullable(b.ack_content_type)!;
  if (b.retain !== undefined) o.retain = nullable(b.retain)!;
  if (b.retain_states !== undefined) o.retainState = b.retain_states;
  if (b.rate !== undefined) o.rate = nullable(b.rate)!;
  if (b.burst !== undefined) o.burst = b.burst;
  if (b.concurrency !== undefined) o.concurrency = b.concurrency;
  if (b.timeout !== undefined) o.timeout = b.timeout;
  if (b.base !== undefined) o.base = b.base;
  if (b.multiplier !== undefined) o.multiplier = b.multiplier;
  if (b.cap !== undefined) o.cap = b.cap;
  if (b.max_attempts !== undefined) o.maxAttempts = b.max_attempts;
  if (b.give_up !== undefined) o.giveUp = b.give_up;
  if (b.jitter !== undefined) o.jitter = b.jitter as NonNullable<BucketSettingsOpts['jitter']>;
  if (b.retry_on !== undefined) o.retryOn = b.retry_on === null ? 'default' : b.retry_on;
  if (b.retry_budget !== undefined) o.retryBudget = b.retry_budget;
  if (b.retry_floor !== undefined) o.retryFloor = b.retry_floor;
  if (b.forward_path !== undefined) o.forwardPath = b.forward_path;
  if (b.forward_raw_path !== undefined) o.forwardRawPath = b.forward_raw_path;
  // The whole list: as --no-forward-header with a --forward-header per entry.
  if (b.forward_headers !== undefined) o.forwardHeader = { clear: true, set: b.forward_headers ?? [] };
  if (b.verify !== undefined) o.verify = nullable(b.verify)!;
  if (b.verify_secrets !== undefined) o.verifySecrets = b.verify_secrets;
  if (b.verify_tolerance !== undefined) o.verifyTolerance = b.verify_tolerance;
  if (b.on_invalid !== undefined) o.onInvalid = b.on_invalid;
  if (b.handshakes !== undefined) o.handshake = b.handshakes ?? [];
  if (b.verify_token !== undefined) o.verifyToken = nullable(b.verify_token)!;
  if (b.graph_client_state !== undefined) o.graphClientState = nullable(b.graph_client_state)!;
  if (b.methods !== undefined) o.methods = nullable(b.methods)!;
  if (b.dedup !== undefined) o.dedup = nullable(b.dedup)!;
  if (b.dedup_window !== undefined) o.dedupWindow = b.dedup_window;
  if (b.sign !== undefined) o.sign = nullable(b.sign)!;
  if (b.sign_secrets !== undefined) {
    if (b.sign_secrets.filter((s) => s === 'generate').length > 1)
      throw new AppError('invalid_option', 'sign_secrets: "generate" once per request');
    const generated = b.sign_secrets.includes('generate') ? generateSigningSecret() : undefined;
    o.signSecrets = b.sign_secrets.map((s) => (s === 'generate' ? generated! : s));
    if (generated !== undefined) return { ...o, generated };
  }
  return o;
}

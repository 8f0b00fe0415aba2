/**
 * Duplicate events (`--dedup <key>`): which key names an event, read from a request's headers and
 * body. Pure: the store checks and records keys inside the ingest commit (so two stored requests
 * with one key can never both be delivered); this module parses the setting and extracts the key.
 *
 * Keys:
 * - `provider`: the verify scheme's documented idempotency key: Stripe's event `id` (body),
 *   `X-GitHub-Delivery`, `X-Shopify-Event-Id`, Standard Webhooks' `webhook-id`, Slack's `event_id`
 *   (body), Zoom's and Meta's have none documented (no key: not de-duplicated);
 * - `header:<name>`: a header's value (the first, when repeated);
 * - `json:<dotted.path>`: a string or number at that path in a JSON object body.
 *
 * A request without the key is never de-duplicated. The key stored is prefixed with its source
 * (`h:`/`j:`), so a header value can never collide with a body value of another setting.
 */
import { headerValues } from './verify.js';

export type DedupKey = { kind: 'provider' } | { kind: 'header'; name: string } | { kind: 'json'; path: string[] };

/** Stripe retries for up to 3 days, so a window shorter than that lets its retries through. */
export const DEFAULT_DEDUP_WINDOW_MS = 72 * 3_600_000;

/** Keys longer than this are refused as keys (the request is stored, not de-duplicated). */
export const MAX_DEDUP_KEY_LENGTH = 512;

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const PATH_PART = /^[^.]+$/;

export class DedupConfigError extends Error {}

/** `provider`, `header:<name>` or `json:<dotted.path>`. */
export function parseDedupKey(text: string): DedupKey {
  const t = text.trim();
  if (t === 'provider') return { kind: 'provider' };
  if (t.startsWith('header:')) {
    const name = t.slice('header:'.length);
    if (!HEADER_NAME.test(name)) throw new DedupConfigError(`dedup key "${t}": header:<name> needs a valid header name`);
    return { kind: 'header', name: name.toLowerCase() };
  }
  if (t.startsWith('json:')) {
    const path = t.slice('json:'.length).split('.');
    if (path.length === 0 || !path.every((p) => PATH_PART.test(p))) {
      throw new DedupConfigError(`dedup key "${t}": json:<dotted.path> needs a path such as data.id`);
    }
    return { kind: 'json', path };
  }
  throw new DedupConfigError(`unknown dedup key "${t}"; use provider, header:<name> or json:<dotted.path>`);
}

/** The key as `parseDedupKey` reads it back. */
export function dedupKeyText(k: DedupKey): string {
  if (k.kind === 'provider') return 'provider';
  if (k.kind === 'header') return `header:${k.name}`;
  return `json:${k.path.join('.')}`;
}

/** What a provider's own idempotency key is, by verify scheme; null: the provider documents none. */
export function providerDedupKey(scheme: string | null): DedupKey | null {
  switch (scheme) {
    case 'stripe':
      return { kind: 'json', path: ['id'] };
    case 'github':
      return { kind: 'header', name: 'x-github-delivery' };
    case 'shopify':
      return { kind: 'header', name: 'x-shopify-event-id' };
    case 'standard':
      return { kind: 'header', name: 'webhook-id' };
    case 'slack':
      return { kind: 'json', path: ['event_id'] };
    default:
      return null;
  }
}

/** A value at a dotted path of a JSON object body, as a key: strings and finite numbers only. */
function jsonValue(body: Uint8Array, path: readonly string[]): string | null {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'));
  } catch {
    return null;
  }
  for (const p of path) {
    if (typeof v !== 'object' || v === null || Array.isArray(v) || !Object.hasOwn(v, p)) return null;
    v = (v as Record<string, unknown>)[p];
  }
  if (typeof v === 'string') return v;
  if (typeof v === 'number' && Number.isFinite(v)) return String(v);
  return null;
}

/**
 * The request's dedup key under the setting, or null when it carries none (then it is not
 * de-duplicated). `scheme` is the bucket's verify scheme, which `provider` keys depend on.
 */
export function extractDedupKey(key: DedupKey, scheme: string | null, rawHeaders: readonly string[], body: Uint8Array): string | null {
  const k = key.kind === 'provider' ? providerDedupKey(scheme) : key;
  if (k === null || k.kind === 'provider') return null;
  let value: string | null;
  let tag: string;
  if (k.kind === 'header') {
    value = headerValues(rawHeaders, k.name)[0] ?? null;
    tag = 'h';
  } else {
    value = jsonValue(body, k.path);
    tag = 'j';
  }
  if (value === null || value.length === 0 || value.length > MAX_DEDUP_KEY_LENGTH) return null;
  return `${tag}:${value}`;
}

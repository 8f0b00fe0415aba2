/**
 * Sender verification at ingest: which headers a provider signs with, what bytes go into the HMAC
 * before the body, and what a match (or no match) means. Pure: the HMAC itself and the
 * constant-time comparison run at the edge (src/verify/), over the body as it streams in; this
 * module parses headers and secrets and judges, with the time passed in.
 *
 * Each scheme follows its provider's documentation:
 * - `stripe`: `Stripe-Signature: t=<secs>,v1=<hex>[,v1=…]`, HMAC-SHA256 over `<t>.<body>`, the
 *   `whsec_…` string used verbatim as the key;
 * - `github`, `meta`: `X-Hub-Signature-256: sha256=<hex>` over the body;
 * - `shopify`: `X-Shopify-Hmac-Sha256: <base64>` over the body;
 * - `slack`: `X-Slack-Signature: v0=<hex>` over `v0:<X-Slack-Request-Timestamp>:<body>`;
 * - `standard` (Standard Webhooks): `webhook-signature: v1,<base64> [v1,<base64> …]` over
 *   `<webhook-id>.<webhook-timestamp>.<body>`, the key being the base64 after `whsec_`;
 * - `zoom`: `x-zm-signature: v0=<hex>` over `v0:<x-zm-request-timestamp>:<body>`;
 * - `dropbox`: `X-Dropbox-Signature: <hex>` over the body;
 * - `twitter`: `x-twitter-webhooks-signature: sha256=<base64>` over the body;
 * - `hmac:<header>:<sha256|sha1>:<hex|base64>[:<prefix>]`: the generic form for the rest.
 *
 * Verdicts: `missing` (a header the scheme needs is absent), `invalid` (present but malformed, or
 * no secret produced any of its signatures), `expired` (a signature matched, but its timestamp is
 * outside the tolerance: authentic, yet old enough to be a replay), `verified`. The signature is
 * checked before the timestamp, as Stripe's own library does, so `expired` always means authentic.
 * Schemes without a signed timestamp (github, meta, shopify, dropbox, twitter, hmac) never expire;
 * Zoom signs its timestamp but documents no tolerance, so hookbucket applies none to it either.
 */

export const PROVIDER_SCHEMES = ['stripe', 'github', 'shopify', 'slack', 'standard', 'zoom', 'meta', 'dropbox', 'twitter'] as const;
export type ProviderScheme = (typeof PROVIDER_SCHEMES)[number];
export type HmacAlgorithm = 'sha256' | 'sha1';
export type SignatureEncoding = 'hex' | 'base64';

export type VerifyScheme =
  | { kind: ProviderScheme }
  | { kind: 'hmac'; header: string; algorithm: HmacAlgorithm; encoding: SignatureEncoding; prefix: string };

export type VerifyResult = 'verified' | 'invalid' | 'missing' | 'expired';
export const VERIFY_RESULTS: readonly VerifyResult[] = ['verified', 'invalid', 'missing', 'expired'];

/** What a verifying bucket stores beside each request: kept as evidence, shown by `requests show`. */
export interface VerifyVerdict {
  scheme: string;
  result: VerifyResult;
  /** A stable word: `no_signature_header`, `no_matching_signature`, `timestamp_outside_tolerance`, … */
  reason: string;
}

/** The default timestamp tolerance: the 5 minutes Stripe, Slack and Standard Webhooks each document. */
export const DEFAULT_TOLERANCE_MS = 5 * 60_000;

/** Why a scheme or secret was refused: the CLI turns it into a usage error. */
export class VerifyConfigError extends Error {}

const HEADER_NAME = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** `stripe`, `github`, …, or `hmac:<header>:<sha256|sha1>:<hex|base64>[:<prefix>]`. */
export function parseVerifyScheme(text: string): VerifyScheme {
  const t = text.trim();
  if ((PROVIDER_SCHEMES as readonly string[]).includes(t)) return { kind: t as ProviderScheme };
  if (!t.startsWith('hmac:')) {
    throw new VerifyConfigError(
      `unknown verify scheme "${t}"; use one of ${PROVIDER_SCHEMES.join(', ')}, or hmac:<header>:<sha256|sha1>:<hex|base64>[:<prefix>]`,
    );
  }
  const parts = t.slice('hmac:'.length).split(':');
  const [header, algorithm, encoding] = parts;
  // The prefix may itself hold colons (`v0:`), so everything after the fourth field is the prefix.
  const prefix = parts.slice(3).join(':');
  if (parts.length < 3 || header === undefined || !HEADER_NAME.test(header)) {
    throw new VerifyConfigError(`hmac scheme "${t}": expected hmac:<header>:<sha256|sha1>:<hex|base64>[:<prefix>]`);
  }
  if (algorithm !== 'sha256' && algorithm !== 'sha1')
    throw new VerifyConfigError(`hmac scheme "${t}": the algorithm must be sha256 or sha1`);
  if (encoding !== 'hex' && encoding !== 'base64') throw new VerifyConfigError(`hmac scheme "${t}": the encoding must be hex or base64`);
  return { kind: 'hmac', header: header.toLowerCase(), algorithm, encoding, prefix };
}

/** The scheme as `parseVerifyScheme` reads it back. */
export function schemeText(s: VerifyScheme): string {
  if (s.kind !== 'hmac') return s.kind;
  return `hmac:${s.header}:${s.algorithm}:${s.encoding}${s.prefix === '' ? '' : `:${s.prefix}`}`;
}

export function schemeAlgorithm(s: VerifyScheme): HmacAlgorithm {
  return s.kind === 'hmac' ? s.algorithm : 'sha256';
}

const BASE64 = /^[A-Za-z0-9+/]*={0,2}$/;

/**
 * The HMAC key a secret stands for. Each provider's format is kept as documented, never converted:
 * Stripe's `whsec_…` is the key as it is written; a Standard Webhooks secret is the base64 after
 * `whsec_` (24 to 64 bytes; the prefix may be left off, as the reference library allows); every
 * other scheme's secret is its UTF-8 text.
 */
export function secretKey(scheme: VerifyScheme, secret: string): Buffer {
  if (secret.length === 0) throw new VerifyConfigError('a verify secret must not be empty');
  if (scheme.kind !== 'standard') return Buffer.from(secret, 'utf8');
  const b64 = secret.startsWith('whsec_') ? secret.slice('whsec_'.length) : secret;
  if (!BASE64.test(b64) || b64.length % 4 !== 0) {
    throw new VerifyConfigError('a Standard Webhooks secret is whsec_ followed by base64');
  }
  const key = Buffer.from(b64, 'base64');
  if (key.length < 24 || key.length > 64) {
    throw new VerifyConfigError(`a Standard Webhooks secret decodes to 24 to 64 bytes; this one is ${key.length}`);
  }
  return key;
}

/** What the edge computes: the HMAC of `prefix` then the body, compared against each candidate. */
export interface VerifyPlan {
  scheme: string;
  algorithm: HmacAlgorithm;
  /**
   * The bytes signed before the body (`<t>.` for Stripe; empty for body-only schemes), as a byte
   * string: one char per byte (each under U+0100), so the edge writes it as latin1.
   */
  prefix: string;
  /**
   * The signatures the request carries, trimmed (hex also lower-cased), each checked to be
   * well-formed in `encoding`; any one matching passes.
   */
  candidates: string[];
  encoding: SignatureEncoding;
  /** The signed timestamp, when the scheme has one and applies a tolerance to it. */
  timestampMs: number | null;
}

/**
 * A text's UTF-8 as a byte string (one char per byte); ASCII is its own. A Standard Webhooks id is
 * signed this way: the reference library encodes `<id>.<timestamp>.<body>` as UTF-8, and a Node
 * or Python sender writes an id's chars under U+0100 on the wire as single latin1 bytes, which
 * Node reads back as the same chars.
 */
export function utf8Bytes(text: string): string {
  return ASCII.test(text) ? text : Buffer.from(text, 'utf8').toString('latin1');
}
const ASCII = /^[\x00-\x7f]*$/;

/** Every value of a header (names compared case-insensitively), from Node's flat raw list. */
export function headerValues(rawHeaders: readonly string[], name: string): string[] {
  const lower = name.toLowerCase();
  const out: string[] = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) {
    const n = rawHeaders[i]!;
    // Only a name of the same length can match: most are skipped without lower-casing a copy.
    if (n.length === lower.length && n.toLowerCase() === lower) out.push(rawHeaders[i + 1]!);
  }
  return out;
}

const DIGITS = /^\d{1,15}$/;
const HEX = /^[0-9a-fA-F]+$/;

/** The value, trimmed, when it is well-formed `encoding` (non-empty); otherwise null. */
function wellFormed(value: string, encoding: SignatureEncoding): string | null {
  const v = value.trim();
  if (v.length === 0) return null;
  // The regex, not Buffer's own stop at a non-hex character: Node reads only the low byte of each
  // UTF-16 unit there, so 'š' (U+0161) would decode as 'a'.
  // Hex in lower case: one spelling per byte string, so the edge compares it as text.
  if (encoding === 'hex') return HEX.test(v) && v.length % 2 === 0 ? v.toLowerCase() : null;
  return BASE64.test(v) && v.length % 4 === 0 ? v : null;
}

type Planned = { plan: VerifyPlan } | { verdict: VerifyVerdict };

const refuse = (scheme: string, result: 'missing' | 'invalid', reason: string): Planned => ({ verdict: { scheme, result, reason } });

/** Candidates from header values of the form `<prefix><encoded>`; values without the prefix are ignored. */
function prefixed(values: readonly string[], prefix: string, encoding: SignatureEncoding): string[] {
  const out: string[] = [];
  for (const v of values) {
    const t = v.trim();
    if (!t.startsWith(prefix)) continue;
    const d = wellFormed(t.slice(prefix.length), encoding);
    if (d !== null) out.push(d);
  }
  return out;
}

/** A plan, or `malformed_signature_header` when no candidate was well-formed. */
function planned(
  scheme: string,
  algorithm: HmacAlgorithm,
  prefix: string,
  candidates: string[],
  encoding: SignatureEncoding,
  timestampMs: number | null,
): Planned {
  if (candidates.length === 0) return refuse(scheme, 'invalid', 'malformed_signature_header');
  return { plan: { scheme, algorithm, prefix, candidates, encoding, timestampMs } };
}

/** Every value of the header, or null when there is none. */
function present(rawHeaders: readonly string[], name: string): string[] | null {
  const v = headerValues(rawHeaders, name);
  return v.length === 0 ? null : v;
}

function oneTimestamp(rawHeaders: readonly string[], name: string): string | null | 'malformed' {
  const values = headerValues(rawHeaders, name);
  if (values.length === 0) return null;
  const v = values[0]!.trim();
  return values.length === 1 && DIGITS.test(v) ? v : 'malformed';
}

/**
 * Reads the request's signature headers: either a plan for the HMAC, or a verdict already
 * (`missing` or `invalid`) when the headers alone decide.
 */
export function planVerify(scheme: VerifyScheme, rawHeaders: readonly string[]): Planned {
  const name = schemeText(scheme);
  const algorithm = schemeAlgorithm(scheme);
  switch (scheme.kind) {
    case 'stripe': {
      const values = present(rawHeaders, 'stripe-signature');
      if (values === null) return refuse(name, 'missing', 'no_signature_header');
      // `k=v` items separated by commas, read in place (this runs for every request into the bucket).
      const header = values.length === 1 ? values[0]! : values.join(',');
      let t: string | null = null;
      const candidates: string[] = [];
      // `eq` only moves forward (searched again only once an item has passed it), so a header of
      // many items without `=` is read in linear time, not rescanned to its end for each item.
      let eq = -1;
      for (let at = 0; at < header.length; ) {
        let end = header.indexOf(',', at);
        if (end < 0) end = header.length;
        if (eq < at) {
          eq = header.indexOf('=', at);
          if (eq < 0) eq = header.length;
        }
        if (eq < end) {
          const k = header.slice(at, eq).trim();
          if (k === 't') t = t === null ? header.slice(eq + 1, end).trim() : 'duplicate';
          else if (k === 'v1') {
            const d = wellFormed(header.slice(eq + 1, end), 'hex');
            if (d !== null) candidates.push(d);
          }
        }
        at = end + 1;
      }
      if (t === null || !DIGITS.test(t)) return refuse(name, 'invalid', 'malformed_timestamp');
      return planned(name, algorithm, `${t}.`, candidates, 'hex', Number(t) * 1000);
    }
    case 'github':
    case 'meta': {
      const values = present(rawHeaders, 'x-hub-signature-256');
      if (values === null) return refuse(name, 'missing', 'no_signature_header');
      return planned(name, algorithm, '', prefixed(values, 'sha256=', 'hex'), 'hex', null);
    }
    case 'shopify': {
      const values = present(rawHeaders, 'x-shopify-hmac-sha256');
      if (values === null) return refuse(name, 'missing', 'no_signature_header');
      return planned(name, algorithm, '', prefixed(values, '', 'base64'), 'base64', null);
    }
    case 'slack':
    case 'zoom': {
      const [sigHeader, tsHeader] =
        scheme.kind === 'slack' ? ['x-slack-signature', 'x-slack-request-timestamp'] : ['x-zm-signature', 'x-zm-request-timestamp'];
      const values = present(rawHeaders, sigHeader);
      if (values === null) return refuse(name, 'missing', 'no_signature_header');
      const ts = oneTimestamp(rawHeaders, tsHeader);
      if (ts === null) return refuse(name, 'missing', 'no_timestamp_header');
      if (ts === 'malformed') return refuse(name, 'invalid', 'malformed_timestamp');
      return planned(
        name,
        algorithm,
        `v0:${ts}:`,
        prefixed(values, 'v0=', 'hex'),
        'hex',
        scheme.kind === 'slack' ? Number(ts) * 1000 : null,
      );
    }
    case 'standard': {
      const values = present(rawHeaders, 'webhook-signature');
      if (values === null) return refuse(name, 'missing', 'no_signature_header');
      const ids = headerValues(rawHeaders, 'webhook-id');
      if (ids.length === 0) return refuse(name, 'missing', 'no_id_header');
      if (ids.length > 1) return refuse(name, 'invalid', 'malformed_id');
      const ts = oneTimestamp(rawHeaders, 'webhook-timestamp');
      if (ts === null) return refuse(name, 'missing', 'no_timestamp_header');
      if (ts === 'malformed') return refuse(name, 'invalid', 'malformed_timestamp');
      const sigs = values.join(' ').split(' ');
      // The id is signed as its text's UTF-8, as the reference library signs and checks it (see utf8Bytes).
      return planned(name, algorithm, `${utf8Bytes(ids[0]!)}.${ts}.`, prefixed(sigs, 'v1,', 'base64'), 'base64', Number(ts) * 1000);
    }
    case 'dropbox': {
      const values = present(rawHeaders, 'x-dropbox-signature');
      if (values === null) return refuse(name, 'missing', 'no_signature_header');
      return planned(name, algorithm, '', prefixed(values, '', 'hex'), 'hex', null);
    }
    case 'twitter': {
      const values = present(rawHeaders, 'x-twitter-webhooks-signature');
      if (values === null) return refuse(name, 'missing', 'no_signature_header');
      return planned(name, algorithm, '', prefixed(values, 'sha256=', 'base64'), 'base64', null);
    }
    case 'hmac': {
      const values = present(rawHeaders, scheme.header);
      if (values === null) return refuse(name, 'missing', 'no_signature_header');
      return planned(name, algorithm, '', prefixed(values, scheme.prefix, scheme.encoding), scheme.encoding, null);
    }
  }
}

/**
 * The verdict once the edge has compared: `matched` says whether any secret's HMAC equalled any
 * candidate. `nowMs` is the time the tolerance is measured from: the arrival for a new request,
 * `received_at` when `requests verify` re-checks a stored one.
 */
export function judgeVerify(plan: VerifyPlan, matched: boolean, nowMs: number, toleranceMs: number): VerifyVerdict {
  if (!matched) return { scheme: plan.scheme, result: 'invalid', reason: 'no_matching_signature' };
  if (plan.timestampMs !== null && Math.abs(nowMs - plan.timestampMs) > toleranceMs) {
    return { scheme: plan.scheme, result: 'expired', reason: 'timestamp_outside_tolerance' };
  }
  return { scheme: plan.scheme, result: 'verified', reason: 'signature_matched' };
}

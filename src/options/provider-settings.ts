/**
 * A bucket's provider settings as `bucket create|update` and the admin API's bucket body give them
 * (verification, URL handshakes, methods, dedup, re-signing): the value parsers, and the merge onto
 * the bucket's current settings with the checks that span several options. Pure: the secret
 * sources (files, the environment, `--sign-secret generate`) are read at the edge
 * (src/cli/provider-options.ts) and arrive here as lists of strings.
 *
 * No message here ever holds a secret or a token: a refused secret is named by its position.
 */
import { InvalidArgumentError } from 'commander';
import { DEFAULT_DEDUP_WINDOW_MS, DedupConfigError, type DedupKey, parseDedupKey, providerDedupKey } from '../policy/dedup.js';
import { HANDSHAKES, type HandshakeName, handshakeOfScheme } from '../policy/handshake.js';
import { DEFAULT_TOLERANCE_MS, parseVerifyScheme, schemeText, secretKey, VerifyConfigError, type VerifyScheme } from '../policy/verify.js';
import { AppError } from '../shared/errors.js';
import { durationMsArg } from './drain-settings.js';
import type { OnInvalid, ProviderSettings, SignSettings, VerifySettings } from '../store/store.js';

/** Secrets per list: each one is an HMAC per request, so rotation (two or three) is what the list is for. */
export const MAX_SECRETS = 10;
/** Longest secret accepted, in characters (Standard Webhooks' 64 bytes are 92 in base64). */
export const MAX_SECRET_LENGTH = 1024;
/** Graph documents clientState as at most 128 characters. */
export const MAX_GRAPH_CLIENT_STATE = 128;
export const MAX_VERIFY_TOKEN = 1024;
/** The dedup index is kept for the window; a month bounds its size (Stripe retries for 3 days). */
export const MAX_DEDUP_WINDOW_MS = 30 * 86_400_000;

/** The handshakes `--handshake` names; slack, zoom and twitter need their scheme's secret, so they come with `--verify`. */
export const NAMED_HANDSHAKES: readonly HandshakeName[] = ['graph', 'meta', 'dropbox'];

/**
 * A provider settings object read back from the admin API, which never sends a secret: the
 * secrets list is then empty and `fingerprints` says what the server holds. Never used to verify.
 */
export type FingerprintsOnly = { fingerprints?: string[] };

/** Stands for a token the server holds (verify_token_set, graph_client_state_set); never valid as a token. */
export const SET_ON_SERVER = '\u0000(set on the server)';

/** What the options give, parsed; `false`: the --no-* form. Secret lists are gathered from every source. */
export interface ProviderOpts {
  verify?: VerifyScheme | false;
  verifySecrets?: string[];
  verifyTolerance?: number;
  onInvalid?: OnInvalid;
  /** The whole list (`--handshake`, repeatable); [] from `--no-handshake`. */
  handshake?: HandshakeName[];
  verifyToken?: string | false;
  graphClientState?: string | false;
  methods?: string[] | false;
  dedup?: DedupKey | false;
  dedupWindow?: number;
  sign?: 'standard' | false;
  signSecrets?: string[];
}

/** A tolerance or window: whole seconds (providers' timestamps are in seconds, and `bucket show` prints them so). */
export function wholeSecondsArg(value: string): number {
  const ms = durationMsArg(value);
  if (ms < 1000 || ms % 1000 !== 0) throw new InvalidArgumentError('whole seconds, at least 1s, like 5m or 72h');
  return ms;
}

export function verifySchemeArg(value: string): VerifyScheme {
  try {
    return parseVerifyScheme(value);
  } catch (e) {
    if (e instanceof VerifyConfigError) throw new InvalidArgumentError(e.message);
    throw e;
  }
}

export function onInvalidArg(value: string): OnInvalid {
  const v = value.trim();
  if (v !== 'quarantine' && v !== 'reject')
    throw new InvalidArgumentError('quarantine (stored, never delivered, release with requests verify --release) or reject (401)');
  return v;
}

export function handshakeArg(value: string): HandshakeName {
  const v = value.trim().toLowerCase();
  if (!(HANDSHAKES as readonly string[]).includes(v)) {
    throw new InvalidArgumentError(
      `unknown handshake "${value}"; use ${NAMED_HANDSHAKES.join(', ')} (slack, zoom and twitter come with --verify)`,
    );
  }
  return v as HandshakeName;
}

const METHOD = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;

/** `POST,PUT` → ['POST', 'PUT']: HTTP tokens, upper-cased, each once. */
export function methodsArg(value: string): string[] {
  const out: string[] = [];
  for (const part of value.split(',')) {
    const m = part.trim();
    if (m === '') continue;
    if (!METHOD.test(m) || m.length > 32) throw new InvalidArgumentError(`"${m}" is not an HTTP method; a comma list like POST,PUT`);
    const up = m.toUpperCase();
    if (!out.includes(up)) out.push(up);
  }
  if (out.length === 0) throw new InvalidArgumentError('one or more methods, a comma list like POST,PUT');
  return out;
}

export function dedupKeyArg(value: string): DedupKey {
  try {
    return parseDedupKey(value);
  } catch (e) {
    if (e instanceof DedupConfigError) throw new InvalidArgumentError(e.message);
    throw e;
  }
}

export function signSchemeArg(value: string): 'standard' {
  if (value.trim() !== 'standard')
    throw new InvalidArgumentError('standard (Standard Webhooks: webhook-id, webhook-timestamp, webhook-signature)');
  return 'standard';
}

/** Schemes whose signature covers a timestamp that hookbucket checks against the tolerance. */
const TIMESTAMPED = new Set(['stripe', 'slack', 'standard']);

const CONTROL = /[\x00-\x1f\x7f]/;

function checkSecrets(list: readonly string[], scheme: VerifyScheme, flag: string): string[] {
  const out: string[] = [];
  list.forEach((s, i) => {
    const which = list.length > 1 ? `${flag} #${i + 1}` : flag;
    if (s.length === 0) throw new AppError('invalid_secret', `${which} is empty`);
    if (s.length > MAX_SECRET_LENGTH) throw new AppError('invalid_secret', `${which} is longer than ${MAX_SECRET_LENGTH} characters`);
    if (CONTROL.test(s))
      throw new AppError('invalid_secret', `${which} holds a control character (a newline from a file or a paste?); it was not stored`);
    try {
      secretKey(scheme, s);
    } catch (e) {
      if (e instanceof VerifyConfigError) throw new AppError('invalid_secret', `${which} (${schemeText(scheme)}): ${e.message}`);
      throw e;
    }
    if (!out.includes(s)) out.push(s);
  });
  if (out.length > MAX_SECRETS)
    throw new AppError('invalid_option', `${flag}: at most ${MAX_SECRETS} secrets (rotation needs two or three)`);
  return out;
}

function checkText(value: string, flag: string, max: number): string {
  if (value.length === 0 || value.length > max || CONTROL.test(value)) {
    throw new AppError('invalid_option', `${flag}: 1 to ${max} characters without control characters`);
  }
  return value;
}

const hasSecrets = (s: { secrets: string[] } & FingerprintsOnly) => s.secrets.length > 0 || (s.fingerprints?.length ?? 0) > 0;

/**
 * The provider part of a bucket patch: the options merged onto `current` (NO_PROVIDER for a new
 * bucket), checked as a whole. `warn` receives what is allowed but likely not meant. Throws
 * AppError `invalid_option`, `invalid_secret` or `secret_required` (exit 2, HTTP 400).
 */
export function providerPatchFrom(
  o: ProviderOpts,
  current: ProviderSettings,
  warn: (message: string) => void = () => {},
): Partial<ProviderSettings> {
  const p: Partial<ProviderSettings> = {};

  // Verification.
  const verifyDetail = o.verifySecrets !== undefined || o.verifyTolerance !== undefined || o.onInvalid !== undefined;
  if (o.verify === false) {
    if (verifyDetail) {
      throw new AppError('invalid_option', '--no-verify turns verification off; drop --verify-secret, --verify-tolerance and --on-invalid');
    }
    p.verify = null;
  } else if (o.verify !== undefined || verifyDetail) {
    const was = current.verify as (VerifySettings & FingerprintsOnly) | null;
    const scheme = o.verify ?? was?.scheme;
    if (scheme === undefined) {
      throw new AppError(
        'invalid_option',
        'the bucket does not verify: give --verify <scheme> with --verify-secret, --verify-tolerance or --on-invalid',
      );
    }
    const name = schemeText(scheme);
    let next: VerifySettings & FingerprintsOnly;
    const toleranceMs = o.verifyTolerance ?? was?.toleranceMs ?? DEFAULT_TOLERANCE_MS;
    const onInvalid = o.onInvalid ?? was?.onInvalid ?? 'quarantine';
    if (o.verifySecrets !== undefined) {
      next = { scheme, secrets: checkSecrets(o.verifySecrets, scheme, '--verify-secret'), toleranceMs, onInvalid };
    } else if (was !== null && was.fingerprints !== undefined) {
      // Read back from the API: the server keeps (and re-checks) the secrets it holds.
      next = { scheme, secrets: [], fingerprints: was.fingerprints, toleranceMs, onInvalid };
    } else {
      // The current secrets stay; a new scheme must accept them.
      next = { scheme, secrets: was === null ? [] : checkSecrets(was.secrets, scheme, 'the current secret'), toleranceMs, onInvalid };
    }
    if (!hasSecrets(next)) {
      throw new AppError(
        'secret_required',
        `--verify ${name} needs a secret: --verify-secret <secret>, --verify-secret-file <path>, or HOOKBUCKET_VERIFY_SECRET_<BUCKET>`,
      );
    }
    if (toleranceMs <= 0) throw new AppError('invalid_option', '--verify-tolerance must be above zero');
    if (o.verifyTolerance !== undefined && !TIMESTAMPED.has(scheme.kind)) {
      warn(`${name} signs no timestamp that hookbucket checks: --verify-tolerance has no effect on it`);
    }
    p.verify = next;
  }

  // Handshakes named besides the scheme's own.
  if (o.handshake !== undefined) {
    const list: HandshakeName[] = [];
    for (const h of o.handshake) {
      if (!NAMED_HANDSHAKES.includes(h)) {
        throw new AppError(
          'invalid_option',
          `--handshake ${h}: the ${h} handshake needs that scheme's secret, so it comes with --verify ${h}; --handshake names ${NAMED_HANDSHAKES.join(', ')}`,
        );
      }
      if (!list.includes(h)) list.push(h);
    }
    p.handshakes = list;
  }
  if (o.verifyToken !== undefined)
    p.verifyToken = o.verifyToken === false ? null : checkText(o.verifyToken, '--verify-token', MAX_VERIFY_TOKEN);
  if (o.graphClientState !== undefined) {
    p.graphClientState =
      o.graphClientState === false ? null : checkText(o.graphClientState, '--graph-client-state', MAX_GRAPH_CLIENT_STATE);
  }
  if (o.methods !== undefined) p.methods = o.methods === false ? null : o.methods;

  // Dedup.
  if (o.dedup === false) {
    if (o.dedupWindow !== undefined) throw new AppError('invalid_option', '--no-dedup turns dedup off; drop --dedup-window');
    p.dedup = null;
  } else if (o.dedup !== undefined || o.dedupWindow !== undefined) {
    const key = o.dedup ?? current.dedup?.key;
    if (key === undefined) throw new AppError('invalid_option', '--dedup-window needs --dedup <key>: the bucket does not de-duplicate');
    const windowMs = o.dedupWindow ?? current.dedup?.windowMs ?? DEFAULT_DEDUP_WINDOW_MS;
    if (windowMs <= 0 || windowMs > MAX_DEDUP_WINDOW_MS) throw new AppError('invalid_option', '--dedup-window: above zero and at most 30d');
    p.dedup = { key, windowMs };
  }

  // Re-signing.
  if (o.sign === false) {
    if (o.signSecrets !== undefined) throw new AppError('invalid_option', '--no-sign turns re-signing off; drop --sign-secret');
    p.sign = null;
  } else if (o.sign !== undefined || o.signSecrets !== undefined) {
    const was = current.sign as (SignSettings & FingerprintsOnly) | null;
    let next: SignSettings & FingerprintsOnly;
    if (o.signSecrets !== undefined)
      next = { scheme: 'standard', secrets: checkSecrets(o.signSecrets, { kind: 'standard' }, '--sign-secret') };
    else if (was !== null && was.fingerprints !== undefined) next = { scheme: 'standard', secrets: [], fingerprints: was.fingerprints };
    else next = { scheme: 'standard', secrets: was?.secrets ?? [] };
    if (!hasSecrets(next)) {
      throw new AppError(
        'secret_required',
        '--sign standard needs a secret: --sign-secret whsec_… (repeatable), or --sign-secret generate',
      );
    }
    p.sign = next;
  }

  // What holds only for the settings as a whole.
  const after: ProviderSettings = { ...current, ...p };
  const scheme = after.verify === null ? null : after.verify.scheme.kind;
  if (after.dedup !== null && after.dedup.key.kind === 'provider' && providerDedupKey(scheme) === null) {
    throw new AppError(
      'invalid_option',
      `--dedup provider: ${scheme === null ? 'the bucket does not verify, so no provider is known' : `${scheme === 'hmac' ? 'the hmac scheme' : scheme} documents no idempotency key`}; ` +
        'use --dedup header:<name> or --dedup json:<dotted.path> (provider works with --verify stripe, github, shopify, standard or slack)',
    );
  }
  if (after.handshakes.includes('meta') && after.verifyToken === null) {
    throw new AppError('invalid_option', '--handshake meta needs --verify-token <token>: without it every Meta handshake is answered 403');
  }
  if (scheme === 'meta' && after.verifyToken === null && (p.verify !== undefined || p.verifyToken !== undefined)) {
    warn('--verify meta without --verify-token: the Meta subscription handshake is answered 403 until one is set');
  }
  if (after.graphClientState !== null && !after.handshakes.includes('graph') && p.graphClientState !== undefined) {
    warn('--graph-client-state without --handshake graph: Graph validates the URL with a handshake before it sends notifications');
  }
  if (after.sign !== null && after.verify === null && (current.sign === null || p.verify === null)) {
    warn('--sign without --verify: every request is signed as it came, whoever sent it');
  }
  return p;
}

/** Whether a handshake is answered for this bucket: named, or brought by the verify scheme. */
export function answeredHandshakes(p: ProviderSettings): HandshakeName[] {
  const own = p.verify === null ? null : handshakeOfScheme(p.verify.scheme.kind);
  return own === null || p.handshakes.includes(own) ? [...p.handshakes] : [own, ...p.handshakes];
}

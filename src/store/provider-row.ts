/**
 * A bucket's provider settings (verification, handshakes, methods, dedup, re-signing) and their
 * columns on the buckets row, both ways; and a request's disposition and verdict columns.
 * Dialect-neutral, like bucket-row.ts. Secrets are stored as given (the HMAC needs them) and
 * never leave through human or JSON output: bucket-json.ts prints fingerprints.
 */
import { DEFAULT_DEDUP_WINDOW_MS, dedupKeyText, parseDedupKey } from '../policy/dedup.js';
import { HANDSHAKES, type HandshakeName } from '../policy/handshake.js';
import { DEFAULT_TOLERANCE_MS, parseVerifyScheme, schemeText } from '../policy/verify.js';
import type { BucketsTable, RequestsTable } from './schema.js';
import type { Disposition, OnInvalid, ProviderSettings, StoredVerdict } from './store.js';

export const NO_PROVIDER: ProviderSettings = {
  verify: null,
  handshakes: [],
  verifyToken: null,
  graphClientState: null,
  methods: null,
  dedup: null,
  sign: null,
};

type ProviderColumns = Pick<
  BucketsTable,
  | 'verify_scheme'
  | 'verify_secrets'
  | 'verify_tolerance_ms'
  | 'handshakes'
  | 'verify_token'
  | 'graph_client_state'
  | 'methods'
  | 'dedup_key'
  | 'dedup_window_ms'
  | 'sign_scheme'
  | 'sign_secrets'
> & { on_invalid?: string | null };

function stringList(json: string | null): string[] {
  if (json === null) return [];
  const v: unknown = JSON.parse(json);
  return Array.isArray(v) ? v.filter((x): x is string => typeof x === 'string') : [];
}

function commaList(text: string | null): string[] {
  return text === null || text === '' ? [] : text.split(',');
}

/**
 * The provider settings of a buckets row. Rows written before the provider migration (or read
 * from a dialect whose row lacks the columns) read as all off.
 */
export function toProvider(r: Partial<ProviderColumns>): ProviderSettings {
  const verifyScheme = r.verify_scheme ?? null;
  const onInvalid: OnInvalid = r.on_invalid === 'reject' ? 'reject' : 'quarantine';
  return {
    verify:
      verifyScheme === null
        ? null
        : {
            scheme: parseVerifyScheme(verifyScheme),
            secrets: stringList(r.verify_secrets ?? null),
            toleranceMs:
              r.verify_tolerance_ms === null || r.verify_tolerance_ms === undefined ? DEFAULT_TOLERANCE_MS : Number(r.verify_tolerance_ms),
            onInvalid,
          },
    handshakes: commaList(r.handshakes ?? null).filter((h): h is HandshakeName => (HANDSHAKES as readonly string[]).includes(h)),
    verifyToken: r.verify_token ?? null,
    graphClientState: r.graph_client_state ?? null,
    methods: r.methods === null || r.methods === undefined ? null : commaList(r.methods),
    dedup:
      r.dedup_key === null || r.dedup_key === undefined
        ? null
        : {
            key: parseDedupKey(r.dedup_key),
            windowMs: r.dedup_window_ms === null || r.dedup_window_ms === undefined ? DEFAULT_DEDUP_WINDOW_MS : Number(r.dedup_window_ms),
          },
    sign: r.sign_scheme === 'standard' ? { scheme: 'standard', secrets: stringList(r.sign_secrets ?? null) } : null,
  };
}

/** Columns for the provider settings given (the rest stay as they are). */
export function providerColumns(p: Partial<ProviderSettings>): Partial<BucketsTable> {
  const v: Partial<BucketsTable> = {};
  if (p.verify !== undefined) {
    const s = p.verify;
    v.verify_scheme = s === null ? null : schemeText(s.scheme);
    v.verify_secrets = s === null ? null : JSON.stringify(s.secrets);
    v.verify_tolerance_ms = s === null || s.toleranceMs === DEFAULT_TOLERANCE_MS ? null : s.toleranceMs;
    if (s !== null) v.on_invalid = s.onInvalid;
  }
  if (p.handshakes !== undefined) v.handshakes = p.handshakes.length === 0 ? null : p.handshakes.join(',');
  if (p.verifyToken !== undefined) v.verify_token = p.verifyToken;
  if (p.graphClientState !== undefined) v.graph_client_state = p.graphClientState;
  if (p.methods !== undefined) v.methods = p.methods === null ? null : p.methods.join(',');
  if (p.dedup !== undefined) {
    v.dedup_key = p.dedup === null ? null : dedupKeyText(p.dedup.key);
    v.dedup_window_ms = p.dedup === null || p.dedup.windowMs === DEFAULT_DEDUP_WINDOW_MS ? null : p.dedup.windowMs;
  }
  if (p.sign !== undefined) {
    v.sign_scheme = p.sign === null ? null : p.sign.scheme;
    v.sign_secrets = p.sign === null ? null : JSON.stringify(p.sign.secrets);
  }
  return v;
}

const DISPOSITION_SET = new Set<string>(['accepted', 'quarantined', 'duplicate', 'handshake']);

/** A request row's disposition; rows from before the provider migration read as accepted. */
export function toDisposition(text: string | null | undefined): Disposition {
  return text !== null && text !== undefined && DISPOSITION_SET.has(text) ? (text as Disposition) : 'accepted';
}

/** A request row's stored verdict; null when the bucket did not verify it. */
export function toVerdict(r: Partial<Pick<RequestsTable, 'verify_scheme' | 'verify_result' | 'verify_reason'>>): StoredVerdict | null {
  if (r.verify_scheme === null || r.verify_scheme === undefined || r.verify_result === null || r.verify_result === undefined) return null;
  return { scheme: r.verify_scheme, result: r.verify_result as StoredVerdict['result'], reason: r.verify_reason ?? null };
}

/** The verdict and disposition columns of a request to store. */
export function verdictColumns(
  disposition: Disposition | undefined,
  verdict: StoredVerdict | undefined | null,
): Pick<RequestsTable, 'verify_scheme' | 'verify_result' | 'verify_reason'> & { disposition: string } {
  return {
    disposition: disposition ?? 'accepted',
    verify_scheme: verdict?.scheme ?? null,
    verify_result: verdict?.result ?? null,
    verify_reason: verdict?.reason ?? null,
  };
}

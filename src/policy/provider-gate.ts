/**
 * What ingest decides for a provider-ready bucket, apart from the HMACs and comparisons (those run
 * at the edge, src/ingest/provider-gate.ts): which handshakes a bucket answers, which methods it
 * takes, what an unverified request is answered under `--on-invalid reject`, how fast handshakes
 * may come, and the `clientState` values a Microsoft Graph notification body carries. Pure.
 */
import type { HandshakeName } from './handshake.js';
import { handshakeOfScheme } from './handshake.js';
import type { TokenBucketConfig } from './token-bucket.js';
import type { VerifyResult } from './verify.js';

/** The handshakes a bucket answers: its verify scheme's own, then the ones named with `--handshake`. */
export function enabledHandshakes(schemeText: string | null, named: readonly HandshakeName[]): HandshakeName[] {
  const own = schemeText === null ? null : handshakeOfScheme(schemeText);
  const out: HandshakeName[] = own === null ? [] : [own];
  for (const n of named) if (!out.includes(n)) out.push(n);
  return out;
}

/** The method each handshake arrives with (Meta, Dropbox and X send a GET; Slack, Zoom and Graph a POST). */
export function handshakeMethod(name: HandshakeName): 'GET' | 'POST' {
  return name === 'meta' || name === 'dropbox' || name === 'twitter' ? 'GET' : 'POST';
}

/**
 * Whether a method may come in under `--methods`:
 * - `allowed`: any method (no `--methods`), or one in the list;
 * - `handshake_only`: not in the list, but the method of an enabled handshake, so the body is read
 *   and the request passes only if it is that handshake;
 * - `refused`: 405.
 */
export type MethodGate = 'allowed' | 'handshake_only' | 'refused';

export function methodGate(method: string, methods: readonly string[] | null, handshakes: readonly HandshakeName[]): MethodGate {
  if (methods === null) return 'allowed';
  const m = method.toUpperCase();
  if (methods.includes(m)) return 'allowed';
  return handshakes.some((h) => handshakeMethod(h) === m) ? 'handshake_only' : 'refused';
}

/** The `Allow` header of a 405 (RFC 9110 §15.5.6): the listed methods and the enabled handshakes' methods. */
export function allowHeader(methods: readonly string[], handshakes: readonly HandshakeName[]): string {
  const out: string[] = [];
  for (const m of [...methods.map((x) => x.toUpperCase()), ...handshakes.map(handshakeMethod)]) if (!out.includes(m)) out.push(m);
  return out.join(', ');
}

/**
 * A verdict that is not `verified`, as ingest sees it: the scheme's verdict, or Graph's clientState
 * check (scheme `graph`).
 */
export interface FailedVerdict {
  scheme: string;
  result: Exclude<VerifyResult, 'verified'>;
  reason: string;
}

/**
 * The 401 of `--on-invalid reject`: the JSON `code` (also the reason refusals are counted by) and
 * its message. The code names the result, never which secret or byte differed.
 */
export function rejectAnswer(v: FailedVerdict): { code: string; message: string } {
  if (v.scheme === 'graph') {
    return v.result === 'missing'
      ? { code: 'client_state_missing', message: 'the notification carries no clientState' }
      : { code: 'client_state_mismatch', message: 'the notification clientState does not match' };
  }
  switch (v.result) {
    case 'missing':
      return { code: 'signature_missing', message: `no ${v.scheme} signature on the request` };
    case 'expired':
      return { code: 'signature_expired', message: `the ${v.scheme} signature timestamp is outside the tolerance` };
    case 'invalid':
      return { code: 'signature_invalid', message: `the ${v.scheme} signature does not verify` };
  }
}

/**
 * Handshakes per bucket: 10 a second with a burst of 20. Providers send one at registration and a
 * few after (X's CRC hourly, Zoom's every 72 h), so this only stops someone using a bucket URL as
 * an echo or HMAC service at volume.
 */
export const HANDSHAKE_RATE: TokenBucketConfig = { rate: { count: 10, perMs: 1000 }, burst: 20 };

/** Seconds for a Retry-After header: whole seconds, at least 1. */
export function retryAfterSeconds(nowMs: number, availableAtMs: number): number {
  return Math.max(1, Math.ceil((availableAtMs - nowMs) / 1000));
}

/**
 * The `clientState` of each notification in a Microsoft Graph change-notification body
 * (`{"value":[{…,"clientState":"…"},…]}`): `missing` when the body is not such a collection, is
 * empty, or any notification carries no string clientState; otherwise the values, compared by the
 * edge in constant time.
 */
export function graphClientStates(body: Uint8Array): { kind: 'missing' } | { kind: 'states'; states: string[] } {
  let v: unknown;
  try {
    v = JSON.parse(Buffer.from(body.buffer, body.byteOffset, body.byteLength).toString('utf8'));
  } catch {
    return { kind: 'missing' };
  }
  if (typeof v !== 'object' || v === null || Array.isArray(v)) return { kind: 'missing' };
  const value = (v as Record<string, unknown>).value;
  if (!Array.isArray(value) || value.length === 0) return { kind: 'missing' };
  const states: string[] = [];
  for (const n of value) {
    if (typeof n !== 'object' || n === null) return { kind: 'missing' };
    const s = (n as Record<string, unknown>).clientState;
    if (typeof s !== 'string') return { kind: 'missing' };
    states.push(s);
  }
  return { kind: 'states', states };
}

/**
 * The I/O half of a provider-ready bucket at ingest: HMAC keys cached per settings version, the
 * per-bucket handshake rate, constant-time comparisons of tokens, Graph's clientState check and
 * the handshake answers (decisions are src/policy/provider-gate.ts and handshake.ts).
 */
import { createHash, createHmac, timingSafeEqual } from 'node:crypto';
import { type Handshake, hmacAnswer } from '../policy/handshake.js';
import { graphClientStates, HANDSHAKE_RATE } from '../policy/provider-gate.js';
import { FULL_BUCKET, type TokenBucketState, takeToken } from '../policy/token-bucket.js';
import { secretKey, type VerifyVerdict } from '../policy/verify.js';
import type { Logger } from '../shared/logger.js';
import type { VerifySettings } from '../store/store.js';
import { verifyStored } from '../verify/verify-stream.js';

/**
 * Equal in constant time whatever the lengths: both sides are hashed first, so neither the
 * length nor a common prefix of the stored value leaks through the comparison's time.
 */
export function sameSecret(given: string, stored: string): boolean {
  const a = createHash('sha256').update(given, 'utf8').digest();
  const b = createHash('sha256').update(stored, 'utf8').digest();
  return timingSafeEqual(a, b);
}

export class ProviderGate {
  readonly #log: Logger;
  /**
   * HMAC keys by settings object: resolveBucket hands out one Bucket object per settings version
   * (a new one after any bucket change), so the keys are derived once per version, not per request.
   */
  readonly #keys = new WeakMap<VerifySettings, Buffer[]>();
  /** Handshake token buckets by bucket name; in memory, as a per-process guard (not a delivery limit). */
  readonly #handshakeRate = new Map<string, TokenBucketState>();

  constructor(log: Logger) {
    this.#log = log;
  }

  /** The HMAC keys of a bucket's verify secrets. A secret that cannot be a key is skipped (and logged once per version). */
  keys(bucket: string, verify: VerifySettings): Buffer[] {
    const hit = this.#keys.get(verify);
    if (hit) return hit;
    const keys: Buffer[] = [];
    verify.secrets.forEach((s, index) => {
      try {
        keys.push(secretKey(verify.scheme, s));
      } catch (e) {
        this.#log.warn({ bucket, index, reason: (e as Error).message }, 'a verify secret cannot be used as a key; skipped');
      }
    });
    this.#keys.set(verify, keys);
    return keys;
  }

  /** Takes a handshake token for the bucket; without one, the time one is available. */
  takeHandshake(bucket: string, nowMs: number): { ok: true } | { ok: false; availableAtMs: number } {
    const take = takeToken(HANDSHAKE_RATE, this.#handshakeRate.get(bucket) ?? FULL_BUCKET, nowMs);
    if (!take.taken) return { ok: false, availableAtMs: take.nextAvailableAtMs };
    this.#handshakeRate.set(bucket, take.state);
    return { ok: true };
  }

  /**
   * Graph's clientState check: `verified` when every notification carries the configured value
   * (compared in constant time), `invalid` when one differs, `missing` when the body is not a
   * notification collection or one carries none.
   */
  graphVerdict(body: Uint8Array, expected: string): VerifyVerdict {
    const found = graphClientStates(body);
    if (found.kind === 'missing') return { scheme: 'graph', result: 'missing', reason: 'no_client_state' };
    let ok = true;
    // No early exit: every notification is compared.
    for (const s of found.states) if (!sameSecret(s, expected)) ok = false;
    return ok
      ? { scheme: 'graph', result: 'verified', reason: 'client_state_matched' }
      : { scheme: 'graph', result: 'invalid', reason: 'client_state_mismatch' };
  }

  /**
   * The answer body of an `hmac` handshake (Zoom, X), signed with the bucket's verify secret. For
   * Zoom, whose request is signed, the secret that verified the request signs the answer (during a
   * rotation that is the one Zoom holds); for X's unsigned CRC, the first secret. Null: no usable key.
   */
  hmacHandshake(
    h: Extract<Handshake, { kind: 'hmac' }>,
    bucket: string,
    verify: VerifySettings,
    request: { rawHeaders: readonly string[]; body: Uint8Array; atMs: number },
  ): { contentType: string; body: string } | null {
    const keys = this.keys(bucket, verify);
    let key = keys[0];
    if (h.name === 'zoom' && keys.length > 1) {
      // A handshake body is at most HANDSHAKE_MAX_BODY (16 KiB): checking it per key is cheap.
      key =
        keys.find(
          (k) => verifyStored(verify.scheme, [k], request.rawHeaders, request.body, request.atMs, verify.toleranceMs).result === 'verified',
        ) ?? key;
    }
    if (key === undefined) return null;
    return hmacAnswer(h.name, h.token, createHmac('sha256', key).update(h.token, 'utf8').digest());
  }
}

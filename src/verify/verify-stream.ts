/**
 * The HMAC half of sender verification (the headers and the verdict are policy/verify.ts): one
 * HMAC per secret, fed the scheme's prefix and then the body chunk by chunk as it streams in, so a
 * 100 MiB body is never hashed in one piece at the end. The comparison is constant-time
 * (`crypto.timingSafeEqual`) against every candidate the request carries, with no early exit.
 */
import { createHash, createHmac, type Hmac, timingSafeEqual } from 'node:crypto';
import { judgeVerify, planVerify, type VerifyPlan, type VerifyScheme, type VerifyVerdict } from '../policy/verify.js';

export class VerifyStream {
  readonly #plan: VerifyPlan;
  readonly #hmacs: Hmac[];

  constructor(plan: VerifyPlan, keys: readonly Buffer[]) {
    this.#plan = plan;
    this.#hmacs = keys.map((k) => createHmac(plan.algorithm, k).update(plan.prefix));
  }

  update(chunk: Uint8Array): void {
    for (const h of this.#hmacs) h.update(chunk);
  }

  /** The verdict; `nowMs` is the arrival time the tolerance is measured from. */
  finish(nowMs: number, toleranceMs: number): VerifyVerdict {
    let matched = false;
    for (const h of this.#hmacs) {
      const digest = h.digest();
      for (const c of this.#plan.candidates) {
        // The digest's length is public (it is the algorithm's); only equal lengths are compared.
        if (c.length === digest.length && timingSafeEqual(c, digest)) matched = true;
      }
    }
    return judgeVerify(this.#plan, matched, nowMs, toleranceMs);
  }
}

/** Starts verifying a request: a stream to feed the body to, or the verdict its headers already decide. */
export function startVerify(
  scheme: VerifyScheme,
  keys: readonly Buffer[],
  rawHeaders: readonly string[],
): { stream: VerifyStream } | { verdict: VerifyVerdict } {
  const planned = planVerify(scheme, rawHeaders);
  if ('verdict' in planned) return planned;
  return { stream: new VerifyStream(planned.plan, keys) };
}

/** Verifies a body held whole (`requests verify` re-checking a stored request). */
export function verifyStored(
  scheme: VerifyScheme,
  keys: readonly Buffer[],
  rawHeaders: readonly string[],
  body: Uint8Array,
  atMs: number,
  toleranceMs: number,
): VerifyVerdict {
  const started = startVerify(scheme, keys, rawHeaders);
  if ('verdict' in started) return started.verdict;
  started.stream.update(body);
  return started.stream.finish(atMs, toleranceMs);
}

/**
 * A short fingerprint of a secret for `bucket show`: the first 12 hex digits of its SHA-256. It
 * tells two secrets apart and matches a secret the operator holds, without printing the secret.
 */
export function secretFingerprint(secret: string): string {
  return `sha256:${createHash('sha256').update(secret, 'utf8').digest('hex').slice(0, 12)}`;
}

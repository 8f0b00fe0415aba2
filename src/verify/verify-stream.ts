/**
 * The HMAC half of sender verification (the headers and the verdict are policy/verify.ts): one
 * HMAC per secret over the scheme's prefix and the body. A body of one chunk is hashed when it
 * ends; a longer one chunk by chunk as it streams in, so a 100 MiB body is never hashed in one
 * piece at the end (see VerifyStream). The comparison is constant-time
 * (`crypto.timingSafeEqual`) against every candidate the request carries, with no early exit.
 */
import { createHash, type Hash, hash, timingSafeEqual } from 'node:crypto';
import { type HmacAlgorithm, judgeVerify, planVerify, type VerifyPlan, type VerifyScheme, type VerifyVerdict } from '../policy/verify.js';

/** SHA-1's and SHA-256's block size: the HMAC pads are one block (RFC 2104). */
const HMAC_BLOCK_BYTES = 64;
const EMPTY = new Uint8Array(0);
/** A first chunk up to this size is held and hashed at the end in one call (Node reads at most 64 KiB at a time). */
const ONE_SHOT_MAX_BYTES = 64 * 1024;

/** A key's HMAC pads: `key ⊕ ipad` and `key ⊕ opad`, and the hash states after each, made once per key. */
interface HmacPads {
  ipad: Buffer;
  opad: Buffer;
  inner: Hash;
  outer: Hash;
}

/**
 * Pads by key buffer and algorithm. The ingest gate hands out the same key buffers for as long as
 * a bucket's settings stay the same, so no request sets up an HMAC from its key.
 */
const padsByKey = new WeakMap<Buffer, Map<HmacAlgorithm, HmacPads>>();

/** A key's pads for `algorithm` (RFC 2104: a key longer than the block is hashed first). */
export function hmacPads(algorithm: HmacAlgorithm, key: Buffer): HmacPads {
  let byAlgorithm = padsByKey.get(key);
  const hit = byAlgorithm?.get(algorithm);
  if (hit) return hit;
  const k = key.length > HMAC_BLOCK_BYTES ? createHash(algorithm).update(key).digest() : key;
  const ipad = Buffer.alloc(HMAC_BLOCK_BYTES, 0x36);
  const opad = Buffer.alloc(HMAC_BLOCK_BYTES, 0x5c);
  for (let i = 0; i < k.length; i++) {
    ipad[i]! ^= k[i]!;
    opad[i]! ^= k[i]!;
  }
  const pads = { ipad, opad, inner: createHash(algorithm).update(ipad), outer: createHash(algorithm).update(opad) };
  if (!byAlgorithm) padsByKey.set(key, (byAlgorithm = new Map()));
  byAlgorithm.set(algorithm, pads);
  return pads;
}

/** `H(opad ‖ H(ipad ‖ prefix ‖ body))` in two one-shot hashes, for a body held in one piece. */
function oneShotHmac(algorithm: HmacAlgorithm, pads: HmacPads, prefix: Buffer, body: Uint8Array): Buffer {
  const inner = Buffer.allocUnsafe(HMAC_BLOCK_BYTES + prefix.length + body.length);
  pads.ipad.copy(inner, 0);
  prefix.copy(inner, HMAC_BLOCK_BYTES);
  inner.set(body, HMAC_BLOCK_BYTES + prefix.length);
  const innerDigest = hash(algorithm, inner, 'buffer');
  const outer = Buffer.allocUnsafe(HMAC_BLOCK_BYTES + innerDigest.length);
  pads.opad.copy(outer, 0);
  innerDigest.copy(outer, HMAC_BLOCK_BYTES);
  return hash(algorithm, outer, 'buffer');
}

/**
 * One HMAC per key over the scheme's prefix and the body. A first chunk of up to 64 KiB is held,
 * not hashed: most webhook bodies arrive in one chunk, and those are hashed at the end in two
 * one-shot calls, with no hash object made per request. From a second chunk on, each key's inner
 * hash is fed as the body streams in, so a large body is never hashed in one piece at the end.
 * (Timed inside serve during `npm run bench:verify`: setting up `createHmac` per request took about
 * 7 µs, almost half of the check's 16 µs; docs/benchmarks.md "Verification at ingest".)
 */
export class VerifyStream {
  readonly #plan: VerifyPlan;
  readonly #keys: readonly Buffer[];
  /** The body's only chunk so far; null before the first and once streaming. */
  #first: Uint8Array | null = null;
  /** Per key once a second chunk came: the running inner hash, and the outer pad state to finish with. */
  #streaming: Array<{ inner: Hash; outer: Hash }> | null = null;

  constructor(plan: VerifyPlan, keys: readonly Buffer[]) {
    this.#plan = plan;
    this.#keys = keys;
  }

  update(chunk: Uint8Array): void {
    if (this.#streaming === null) {
      if (this.#first === null && chunk.length <= ONE_SHOT_MAX_BYTES) {
        this.#first = chunk;
        return;
      }
      const first = this.#first;
      this.#first = null;
      this.#streaming = this.#keys.map((k) => {
        const pads = hmacPads(this.#plan.algorithm, k);
        const inner = pads.inner.copy().update(this.#plan.prefix);
        if (first !== null) inner.update(first);
        return { inner, outer: pads.outer };
      });
    }
    for (const h of this.#streaming) h.inner.update(chunk);
  }

  /** The verdict; `nowMs` is the arrival time the tolerance is measured from. */
  finish(nowMs: number, toleranceMs: number): VerifyVerdict {
    const { algorithm, prefix } = this.#plan;
    const streaming = this.#streaming;
    const digests =
      streaming !== null
        ? streaming.map((h) => h.outer.copy().update(h.inner.digest()).digest())
        : this.#keys.map((k) => oneShotHmac(algorithm, hmacPads(algorithm, k), prefix, this.#first ?? EMPTY));
    let matched = false;
    for (const digest of digests) {
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

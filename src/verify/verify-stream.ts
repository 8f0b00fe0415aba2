/**
 * The HMAC half of sender verification (the headers and the verdict are policy/verify.ts): one
 * HMAC per secret over the scheme's prefix and the body. A body of one chunk is hashed when it
 * ends; a longer one chunk by chunk as it streams in, so a 100 MiB body is never hashed in one
 * piece at the end (see VerifyStream). Every candidate the request carries is compared, with no
 * early exit: hex ones as text in a constant-time loop (sameText), base64 ones as bytes with
 * `crypto.timingSafeEqual`.
 */
import { createHash, type Hash, hash, timingSafeEqual } from 'node:crypto';
import {
  type HmacAlgorithm,
  judgeVerify,
  planVerify,
  type SignatureEncoding,
  type VerifyPlan,
  type VerifyScheme,
  type VerifyVerdict,
} from '../policy/verify.js';

/** SHA-1's and SHA-256's block size: the HMAC pads are one block (RFC 2104). */
const HMAC_BLOCK_BYTES = 64;
const DIGEST_BYTES: Record<HmacAlgorithm, number> = { sha256: 32, sha1: 20 };
const EMPTY = new Uint8Array(0);
/** A first chunk up to this size is held and hashed at the end in one call (Node reads at most 64 KiB at a time). */
const ONE_SHOT_MAX_BYTES = 64 * 1024;

/**
 * A key's HMAC pads (RFC 2104), made once per key: `key ⊕ ipad` to put in front of a one-chunk
 * body, the hash state after it for a streamed body, and the outer hash's input.
 */
interface HmacPads {
  ipad: Buffer;
  inner: Hash;
  /** `key ⊕ opad ‖ <inner digest>`: the inner digest is written into its tail before each outer hash. */
  outerInput: Buffer;
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
  // The outer input starts with `key ⊕ opad`; its tail takes the inner digest.
  const outerInput = Buffer.alloc(HMAC_BLOCK_BYTES + DIGEST_BYTES[algorithm]);
  outerInput.fill(0x5c, 0, HMAC_BLOCK_BYTES);
  for (let i = 0; i < k.length; i++) {
    ipad[i]! ^= k[i]!;
    outerInput[i]! ^= k[i]!;
  }
  const pads = { ipad, inner: createHash(algorithm).update(ipad), outerInput };
  if (!byAlgorithm) padsByKey.set(key, (byAlgorithm = new Map()));
  byAlgorithm.set(algorithm, pads);
  return pads;
}

/*
 * Why the one-chunk path is written the way it is. Node 20 allocates a new ArrayBuffer for every
 * Buffer a hash returns and for every 8 KiB pool slab `Buffer.allocUnsafe` draws from; on this
 * machine each costs about 1 µs and more work for the GC, more than hashing 2 KiB does (measured
 * in a loop: `hash(…, 'buffer')` of 96 bytes 1,420 ns, of the same bytes as a 'binary' (latin1)
 * string 239 ns). So the HMAC's input is assembled in a reused scratch buffer and the inner hash
 * returns a 'binary' string (one char per byte, so `write(…, 'binary')` puts the exact bytes
 * back). Inside serve each call into Node's C++ costs about as much again as the work it does
 * (its code is cold between requests), so the path makes as few as it can: the outer hash of a hex
 * scheme returns hex text, compared as text with no decoding (see finish). All of it is
 * synchronous on the one event loop, so no two checks use the scratch at once. What the buffers
 * hold stays until the next check overwrites it: the last body, and the last key's `key ⊕ ipad`
 * (scratchPads keeps that key's pads reachable too).
 */
let scratch = Buffer.allocUnsafeSlow(4 * 1024);
/** Whose `key ⊕ ipad` the scratch's first block holds: the same key's next check leaves it there. */
let scratchPads: HmacPads | null = null;
/** A prefix up to this long is copied char by char: cheaper than a call into C++ for the few bytes most schemes sign first. */
const PREFIX_LOOP_MAX = 64;
const digestScratch: Record<HmacAlgorithm, Buffer> = {
  sha256: Buffer.alloc(DIGEST_BYTES.sha256),
  sha1: Buffer.alloc(DIGEST_BYTES.sha1),
};

/** `H(key ⊕ opad ‖ inner)` as `encoding` text; `inner` is the inner digest as a 'binary' string. */
function outerHash(algorithm: HmacAlgorithm, pads: HmacPads, inner: string, encoding: 'hex' | 'binary'): string {
  pads.outerInput.write(inner, HMAC_BLOCK_BYTES, 'binary');
  return hash(algorithm, pads.outerInput, encoding);
}

/** `H(key ⊕ ipad ‖ prefix ‖ body)` as a 'binary' string, in one one-shot hash, for a body held in one piece. */
function oneShotInner(algorithm: HmacAlgorithm, pads: HmacPads, prefix: string, body: Uint8Array): string {
  // The prefix is a byte string (VerifyPlan.prefix): as many bytes as chars.
  const length = HMAC_BLOCK_BYTES + prefix.length + body.length;
  if (scratch.length < length) {
    scratch = Buffer.allocUnsafeSlow(length);
    scratchPads = null;
  }
  if (scratchPads !== pads) {
    scratch.set(pads.ipad, 0);
    scratchPads = pads;
  }
  if (prefix.length <= PREFIX_LOOP_MAX) {
    for (let i = 0; i < prefix.length; i++) scratch[HMAC_BLOCK_BYTES + i] = prefix.charCodeAt(i);
  } else scratch.write(prefix, HMAC_BLOCK_BYTES, 'latin1');
  scratch.set(body, HMAC_BLOCK_BYTES + prefix.length);
  return hash(algorithm, new Uint8Array(scratch.buffer, scratch.byteOffset, length), 'binary');
}

/**
 * Equal texts, compared without an early exit once the lengths agree (a digest's length is public:
 * it is the algorithm's). The same loop as Stripe's own Node library uses for its signatures.
 */
export function sameText(a: string, b: string): boolean {
  if (a.length !== b.length) return false;
  let diff = 0;
  for (let i = 0; i < a.length; i++) diff |= a.charCodeAt(i) ^ b.charCodeAt(i);
  return diff === 0;
}

/** The reused buffer a base64 candidate is decoded into, per algorithm: decoding allocates nothing. */
const candidateScratch: Record<HmacAlgorithm, Buffer> = {
  sha256: Buffer.alloc(DIGEST_BYTES.sha256),
  sha1: Buffer.alloc(DIGEST_BYTES.sha1),
};

/**
 * `candidate` decoded into the algorithm's candidate scratch, or null when it is not the digest's
 * length (then it cannot match). Valid until the next call.
 */
function decodedCandidate(algorithm: HmacAlgorithm, candidate: string, encoding: SignatureEncoding): Buffer | null {
  const out = candidateScratch[algorithm];
  // Well-formed (planVerify checked), so byteLength is exact; the write's count is checked as well,
  // so a short write can never leave an earlier candidate's bytes in the comparison.
  if (Buffer.byteLength(candidate, encoding) !== out.length) return null;
  return out.write(candidate, 0, encoding) === out.length ? out : null;
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
  /** Per key once a second chunk came: the running inner hash. */
  #streaming: Hash[] | null = null;

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
        const inner = hmacPads(this.#plan.algorithm, k).inner.copy().update(this.#plan.prefix, 'latin1');
        if (first !== null) inner.update(first);
        return inner;
      });
    }
    for (const inner of this.#streaming) inner.update(chunk);
  }

  /** The verdict; `nowMs` is the arrival time the tolerance is measured from. */
  finish(nowMs: number, toleranceMs: number): VerifyVerdict {
    const { algorithm, prefix, candidates, encoding } = this.#plan;
    const streaming = this.#streaming;
    // Hex signatures are compared as text: planVerify lower-cased them, and hex text has one
    // spelling per byte string. Base64 text has more than one (the last char's spare bits), so
    // base64 signatures are decoded and compared as bytes.
    const asText = encoding === 'hex';
    let matched = false;
    for (let i = 0; i < this.#keys.length; i++) {
      const pads = hmacPads(algorithm, this.#keys[i]!);
      const inner = streaming !== null ? streaming[i]!.digest('binary') : oneShotInner(algorithm, pads, prefix, this.#first ?? EMPTY);
      // Every candidate is compared, with no early exit, each key's before the next key's HMAC.
      if (asText) {
        const digest = outerHash(algorithm, pads, inner, 'hex');
        for (const c of candidates) if (sameText(c, digest)) matched = true;
      } else {
        const digest = digestScratch[algorithm];
        digest.write(outerHash(algorithm, pads, inner, 'binary'), 0, 'binary');
        for (const c of candidates) {
          const bytes = decodedCandidate(algorithm, c, encoding);
          if (bytes !== null && timingSafeEqual(bytes, digest)) matched = true;
        }
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

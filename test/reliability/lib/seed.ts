import { mulberry32 } from '../../../src/policy/prng.js';

/**
 * Seeds for the reliability suite. The suite prints its seed at start; `--seed <n>` or
 * RELIABILITY_SEED=<n> runs it again with the same random choices (kill moments, bodies, paths),
 * as far as the machine's own timing lets a rerun repeat.
 */

/** The seed from `--seed <n>` / `--seed=<n>`, then RELIABILITY_SEED, else a fresh one. */
export function resolveSeed(argv: readonly string[], env: NodeJS.ProcessEnv): number {
  const i = argv.indexOf('--seed');
  const flag = i >= 0 ? argv[i + 1] : argv.find((a) => a.startsWith('--seed='))?.slice('--seed='.length);
  const text = flag ?? env.RELIABILITY_SEED;
  if (text !== undefined && text !== '') {
    const n = Number(text);
    if (!Number.isSafeInteger(n) || n < 0 || n > 0xffff_ffff)
      throw new Error(`--seed must be an integer from 0 to 4294967295, got ${JSON.stringify(text)}`);
    return n;
  }
  return (Date.now() ^ (process.pid << 16)) >>> 0;
}

/** A per-case seed: the suite seed mixed with the case id (FNV-1a), so cases draw independently. */
export function caseSeed(seed: number, caseId: number | string): number {
  let h = 0x811c9dc5 ^ seed;
  for (const ch of `${caseId}`) {
    h ^= ch.charCodeAt(0);
    h = Math.imul(h, 0x01000193);
  }
  return h >>> 0;
}

/** A seeded PRNG in [0, 1) (mulberry32, the one `simulate` uses). */
export function seededRandom(seed: number): () => number {
  return mulberry32(seed);
}

/** An integer in [min, max], inclusive. */
export function randomInt(random: () => number, min: number, max: number): number {
  return min + Math.floor(random() * (max - min + 1));
}

/** `n` bytes from the PRNG (4 bytes per draw). */
export function randomBytesFrom(random: () => number, n: number): Buffer {
  const out = Buffer.allocUnsafe(n);
  let i = 0;
  for (; i + 4 <= n; i += 4) out.writeUInt32LE(Math.floor(random() * 4_294_967_296), i);
  for (; i < n; i++) out[i] = Math.floor(random() * 256);
  return out;
}

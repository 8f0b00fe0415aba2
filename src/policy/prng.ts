/**
 * A small seeded PRNG for reproducible jitter in `simulate` and in the Monte Carlo estimate of a
 * give-up-by-duration schedule. Production retries take `Math.random` passed in by the worker.
 *
 * mulberry32 (Tommy Ettinger, public domain): 32-bit state, period 2^32, fast and good enough for
 * spreading retries. Not for anything security-related.
 */
export function mulberry32(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    // 2^32: maps the 32-bit output onto [0, 1).
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
}

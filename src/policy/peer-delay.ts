/**
 * Slowing down repeated authentication failures from one peer, in bounded memory. Pure: the time
 * comes in as an argument, and the caller does the waiting.
 *
 * The first failure is answered at once (a typo is not an attack); each further one within
 * `forgetAfterMs` of the last waits twice as long as the one before, from `baseMs` up to `maxMs`.
 * A success forgets the peer. At most `maxPeers` are remembered: past that, the peer whose last
 * failure is oldest is forgotten first (a Map keeps insertion order, and a failure re-inserts).
 */
export interface PeerDelayOptions {
  maxPeers: number;
  baseMs: number;
  maxMs: number;
  forgetAfterMs: number;
}

export const DEFAULT_PEER_DELAY: PeerDelayOptions = {
  maxPeers: 4096,
  baseMs: 250, // 250 ms for the second failure in a row
  maxMs: 5000, // 5 s at most per answer
  forgetAfterMs: 15 * 60_000, // 15 min without a failure forgets the peer
};

export class PeerDelays {
  readonly #o: PeerDelayOptions;
  readonly #peers = new Map<string, { failures: number; lastMs: number }>();

  constructor(options: Partial<PeerDelayOptions> = {}) {
    this.#o = { ...DEFAULT_PEER_DELAY, ...options };
  }

  /** Records a failure from `peer` at `nowMs`; returns how long to wait before answering it. */
  fail(peer: string, nowMs: number): number {
    const prev = this.#peers.get(peer);
    const failures = prev && nowMs - prev.lastMs < this.#o.forgetAfterMs ? prev.failures + 1 : 1;
    this.#peers.delete(peer);
    this.#peers.set(peer, { failures, lastMs: nowMs });
    while (this.#peers.size > this.#o.maxPeers) this.#peers.delete(this.#peers.keys().next().value as string);
    return delayFor(failures, this.#o);
  }

  /** Whether `peer` failed recently enough that its next failure would wait. */
  penalized(peer: string, nowMs: number): boolean {
    const p = this.#peers.get(peer);
    return p !== undefined && nowMs - p.lastMs < this.#o.forgetAfterMs;
  }

  succeed(peer: string): void {
    this.#peers.delete(peer);
  }

  get size(): number {
    return this.#peers.size;
  }
}

/** The wait for the `failures`-th failure in a row: 0, then baseMs doubling, at most maxMs. */
export function delayFor(failures: number, o: Pick<PeerDelayOptions, 'baseMs' | 'maxMs'>): number {
  if (failures <= 1) return 0;
  return Math.min(o.maxMs, o.baseMs * 2 ** Math.min(failures - 2, 30));
}

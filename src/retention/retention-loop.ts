/**
 * Per-bucket `--retain`, applied by `serve`: shortly after start and then every 10 minutes, each
 * bucket with a retention prunes what is older than it, on the same rules as `hookbucket prune`
 * (src/retention/rules.ts). `runOnce()` is one pass, for tests and for the loop itself; the loop
 * only schedules it. Time comes from the injected clock; the timers only pace the passes.
 */
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { PruneResult, PurgeResult, Store } from '../store/store.js';
import { pruneCutoff } from './rules.js';

export const RETENTION_INTERVAL_MS = 10 * 60_000; // 10m
/** The first pass after start: late enough not to compete with start-up, soon enough to be seen working. */
export const RETENTION_FIRST_DELAY_MS = 30_000; // 30s
/**
 * The write-lock wait of one background purge batch. The pass runs on serve's main thread, where a
 * busy wait blocks the event loop (ingest's HTTP parsing included): 100 ms at most, against group
 * commits of a few ms.
 */
export const PURGE_LOCK_WAIT_MS = 100;

export interface RetentionPass {
  /** Per bucket with a retention: what its pass removed. */
  buckets: Record<string, PruneResult>;
  /** Buckets whose pass failed (the others still ran), with the error message. */
  errors: Record<string, string>;
  /** Deleting buckets (`bucket delete` not finished) whose purge this pass went on with. */
  purge?: PurgeResult;
}

export interface RetentionLoopDeps {
  store: Pick<Store, 'listBuckets' | 'prune' | 'purgeDeleting'>;
  clock: Clock;
  logger: Logger;
  intervalMs?: number;
  firstDelayMs?: number;
}

export class RetentionLoop {
  readonly #d: Required<RetentionLoopDeps>;
  readonly #stopping = new AbortController();
  #timer: NodeJS.Timeout | undefined;
  #running: Promise<RetentionPass> | undefined;

  constructor(deps: RetentionLoopDeps) {
    this.#d = { intervalMs: RETENTION_INTERVAL_MS, firstDelayMs: RETENTION_FIRST_DELAY_MS, ...deps };
  }

  /** One pass over every bucket that has a retention. Never throws for one bucket's failure. */
  async runOnce(): Promise<RetentionPass> {
    // A pass still running (a large first prune) is joined, not doubled.
    this.#running ??= this.#pass().finally(() => (this.#running = undefined));
    return this.#running;
  }

  async #pass(): Promise<RetentionPass> {
    const { store, clock, logger } = this.#d;
    const pass: RetentionPass = { buckets: {}, errors: {} };
    // Deleting buckets first: a `bucket delete` stopped by lock trouble or a crash is finished here,
    // in the same short batches, with a short lock wait (PURGE_LOCK_WAIT_MS): on lock
    // trouble it stops and the next pass goes on.
    try {
      pass.purge = await store.purgeDeleting({ signal: this.#stopping.signal, lockWaitMs: PURGE_LOCK_WAIT_MS });
      const p = pass.purge;
      if (p.requests > 0 || p.finished.length > 0 || p.stopped) {
        logger.info({ finished: p.finished, requests: p.requests, bytes: p.bytes, stopped: p.stopped }, 'purged deleting buckets');
      }
    } catch (e) {
      logger.warn({ err: e }, 'purge of deleting buckets failed');
    }
    // A bucket with --dedup and no --retain still has its expired dedup keys deleted: the dedup
    // index lives for its window, independent of request retention (nothing old enough otherwise).
    const buckets = (await store.listBuckets()).filter(
      (b) => (b.retainMs !== null || (b.provider?.dedup ?? null) !== null) && b.deletingAt === null,
    );
    for (const b of buckets) {
      if (this.#stopping.signal.aborted) break;
      try {
        const now = clock.now();
        const r = await store.prune(
          {
            bucket: b.name,
            receivedBeforeMs: b.retainMs === null ? Number.NEGATIVE_INFINITY : pruneCutoff(now, b.retainMs),
            states: b.retainMs === null ? [] : b.retainStates,
            dryRun: false,
            nowMs: now,
          },
          { signal: this.#stopping.signal },
        );
        pass.buckets[b.name] = r;
        if (r.requests > 0 || r.keptLive > 0) {
          logger.info(
            {
              bucket: b.name,
              retain_ms: b.retainMs,
              states: b.retainStates,
              requests: r.requests,
              bytes: r.bytes,
              kept_live: r.keptLive,
              reclaimed_bytes: r.reclaimedBytes,
            },
            'retention pruned old requests',
          );
        }
      } catch (e) {
        // The bucket may have been deleted meanwhile, or the lock stayed busy: try again next pass.
        pass.errors[b.name] = (e as Error).message;
        logger.warn({ bucket: b.name, err: e }, 'retention pass failed');
      }
    }
    return pass;
  }

  /** Runs a pass shortly after start, then every interval, until stop(). */
  start(): void {
    const schedule = (ms: number) => {
      this.#timer = setTimeout(() => {
        void this.runOnce()
          .catch((e: unknown) => this.#d.logger.warn({ err: e }, 'retention pass failed'))
          .finally(() => {
            if (!this.#stopping.signal.aborted) schedule(this.#d.intervalMs);
          });
      }, ms);
      // Retention never keeps the process alive by itself.
      this.#timer.unref();
    };
    schedule(this.#d.firstDelayMs);
  }

  /** Stops scheduling; a pass in progress stops at its next batch. */
  async stop(): Promise<void> {
    this.#stopping.abort();
    clearTimeout(this.#timer);
    await this.#running?.catch(() => undefined);
  }
}

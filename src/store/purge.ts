/**
 * The purge of a deleting bucket (a tombstone), as both dialects run it: batches of at most
 * PURGE_BATCH requests and PURGE_BATCH_BYTES of bodies, PURGE_GAP_MS apart, until the batch that
 * finds nothing left removes the tombstone. Each dialect runs one batch its own way
 * (sqlite/sqlite-delete.ts, whose header says why it is done this way; postgres/pg-delete.ts).
 */
import { AppError } from '../shared/errors.js';
import type { StorageErrorClassifier } from './storage-error.js';
import type { PurgeHooks, PurgeResult } from './store.js';

/** Requests per purge transaction. */
export const PURGE_BATCH = 500;
export const PURGE_BATCH_BYTES = 8 * 1024 * 1024; // 8 MiB of bodies per purge transaction
/**
 * The pause between purge transactions, ms. On SQLite the lock is left free this long after each
 * one: its busy handler is not fair (a waiting writer sleeps 1, 2, 5, … up to 100 ms between
 * tries), so a purger that begins its next batch at once finds the lock free first nearly every
 * time, and ingest's group commit, waiting its 2 s --lock-timeout, answered 503 (reliability case
 * 28: 8 of 2,843 requests while 200,000 rows were purged back to back). A gap at least as long as
 * the longest sleep lets every waiter in: ingest then waits at most about one batch. At about
 * 30 ms per batch, that is 500 rows every 130 ms: some 4,000 rows a second. PostgreSQL queues lock
 * waiters fairly, but the gap still bounds the purge's share of the server while ingest and the
 * worker run.
 */
export const PURGE_GAP_MS = 100;

export interface PurgeStep {
  requests: number;
  bytes: number;
  /** The tombstone is gone (or was never there): nothing is left to purge. */
  done: boolean;
}

/** Waits `ms`, or less when the signal aborts. */
export const pause = (ms: number, signal?: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (signal?.aborted) return resolve();
    const done = () => {
      clearTimeout(timer);
      signal?.removeEventListener('abort', done);
      resolve();
    };
    const timer = setTimeout(done, ms);
    signal?.addEventListener('abort', done, { once: true });
  });

/** The ids of a page (in id order) that one batch deletes: at least one, and at most PURGE_BATCH_BYTES of bodies after it. */
export function purgeIds(page: ReadonlyArray<{ id: string; size: number }>): { ids: string[]; bytes: number } {
  const ids: string[] = [];
  let bytes = 0;
  for (const r of page) {
    // Bounded by bytes too: a page of 25 MiB bodies would hold the locks far longer than a few ms.
    if (ids.length > 0 && bytes + Number(r.size) > PURGE_BATCH_BYTES) break;
    ids.push(r.id);
    bytes += Number(r.size);
  }
  return { ids, bytes };
}

/**
 * Store.deleteBucket's purge, after the tombstone: batches to the end. A storage error (`code`
 * gives its code; none: thrown as it is) stops it, leaving the tombstone, and says how to finish;
 * `countLeft` reads how many requests are left, for that message.
 */
export async function purgeToEnd(
  name: string,
  batch: () => PurgeStep | Promise<PurgeStep>,
  code: StorageErrorClassifier,
  countLeft: () => Promise<number>,
): Promise<{ requests: number }> {
  let requests = 0;
  try {
    for (;;) {
      const step = await batch();
      requests += step.requests;
      if (step.done) break;
      await pause(PURGE_GAP_MS);
    }
  } catch (e) {
    const c = code(e);
    if (!c) throw e;
    const left = await countLeft().catch(() => undefined);
    throw new AppError(
      c,
      `bucket ${name} is deleting; the purge stopped after ${requests} request(s)${left === undefined ? '' : ` with ${left} left`} (${(e as Error).message}): ` +
        `nothing of it is stored or sent any more; run hookbucket bucket delete ${name} again to finish (a running serve also finishes it in the background)`,
      { cause: e },
    );
  }
  return { requests };
}

/**
 * Store.purgeDeleting: finishes each deleting bucket's purge in the order given; stops on lock
 * trouble (`busy`), leaving the tombstone for the next pass, or when the signal aborts.
 */
export async function purgeEachDeleting(
  names: readonly string[],
  batch: (name: string) => PurgeStep | Promise<PurgeStep>,
  busy: (e: unknown) => boolean,
  hooks: PurgeHooks,
): Promise<PurgeResult> {
  const result: PurgeResult = { finished: [], requests: 0, bytes: 0 };
  for (const name of names) {
    for (;;) {
      if (hooks.signal?.aborted) return result;
      let step: PurgeStep;
      try {
        step = await batch(name);
      } catch (e) {
        // Lock trouble: the tombstone stands; the next round goes on from here.
        if (busy(e)) return { ...result, stopped: (e as Error).message };
        throw e;
      }
      result.requests += step.requests;
      result.bytes += step.bytes;
      if (step.done) {
        result.finished.push(name);
        break;
      }
      await pause(PURGE_GAP_MS, hooks.signal);
    }
  }
  return result;
}

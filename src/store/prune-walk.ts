/**
 * What both dialects' prune (sqlite/sqlite-retention.ts, which explains the walk; postgres/
 * pg-retention.ts) decide the same way: which of a page of candidates one batch deletes, when a
 * walk is done, and the walk over buckets and states that adds the batches up. Each dialect reads
 * the page and deletes in its own transaction.
 */
import type { Disposition, PrunableState, PruneCounts, PruneHooks, PruneResult } from './store.js';

/**
 * What a walk pages through: a prunable state, or a disposition. Requests that are not accepted
 * (quarantined, duplicate, handshake) are terminal (never delivered), so they go at the retention
 * age whatever --retain-state names; each is its own walk of requests_by_disposition.
 */
export type WalkState = PrunableState | Exclude<Disposition, 'accepted'>;
export const DISPOSITION_WALKS: ReadonlyArray<Exclude<Disposition, 'accepted'>> = ['quarantined', 'duplicate', 'handshake'];

/** The walks of one prune: the states named, then every disposition. */
export function walkStates(states: readonly PrunableState[]): WalkState[] {
  return [...states, ...DISPOSITION_WALKS];
}

/** Expired dedup keys deleted per transaction. */
export const DEDUP_PRUNE_BATCH = 1000;

/** Requests per delete transaction. */
export const PRUNE_BATCH = 500;
const PRUNE_BATCH_BYTES = 8 * 1024 * 1024; // 8 MiB of bodies per delete transaction

/** A candidate's details; `live` and `own` are 1/0 on SQLite, booleans on PostgreSQL. */
export interface PruneCandidate {
  id: string;
  at: number;
  size: number;
  /** A delivery of it is pending, retrying or delivering. */
  live: number | boolean;
  /** It has a delivery to the bucket destination. */
  own: number | boolean;
}

/** One batch's outcome: whether this state's walk is done, where it goes on from, what it counted. */
export interface PruneStep {
  done: boolean;
  next: string;
  counts: PruneCounts;
}

export const zeroCounts = (): PruneCounts => ({ requests: 0, bytes: 0, deliveries: 0, attempts: 0, keptLive: 0 });

/**
 * One batch's choice: `page` is the next ids of the walk (at most PRUNE_BATCH, in id order), `rows`
 * their details in id order. Returns the ids to delete (received before the cutoff, not live, and
 * for `none` without a delivery to the bucket destination; at least one, and at most
 * PRUNE_BATCH_BYTES of bodies after it) with the step; its counts lack deliveries and attempts,
 * which the caller counts or deletes.
 */
export function choosePrunable(
  state: WalkState,
  page: readonly string[],
  rows: readonly PruneCandidate[],
  receivedBeforeMs: number,
): { take: string[]; step: PruneStep } {
  const old = rows.filter((r) => Number(r.at) < receivedBeforeMs && (state !== 'none' || Number(r.own) === 0));
  const counts = zeroCounts();
  const take: string[] = [];
  // Where the walk goes on from: past the whole page, unless the byte bound stops it early.
  let next = page[page.length - 1]!;
  for (const r of old) {
    if (Number(r.live) === 1) continue;
    if (take.length > 0 && counts.bytes + Number(r.size) > PRUNE_BATCH_BYTES) {
      next = take[take.length - 1]!;
      break;
    }
    take.push(r.id);
    counts.bytes += Number(r.size);
  }
  // Live ones up to where the walk goes on from (the rest are seen again by the next batch).
  counts.keptLive = old.filter((r) => Number(r.live) === 1 && r.id <= next).length;
  counts.requests = take.length;
  // Nothing on this page was old enough: ids are time-ordered, so nothing after it is either.
  const noneOld = !rows.some((r) => Number(r.at) < receivedBeforeMs);
  const cutShort = next !== page[page.length - 1];
  return { take, step: { done: !cutShort && (noneOld || page.length < PRUNE_BATCH), next, counts } };
}

/**
 * Walks each bucket's candidates, one state after another, batch by batch (`run`), adding each
 * batch's counts to `total` and its bucket's. `deleted(bucket)` after a batch that took requests;
 * `between()` before the next batch of a walk not done. Stops, as it is, when the signal aborts.
 */
export async function pruneWalk(
  total: PruneResult,
  buckets: readonly string[],
  states: readonly WalkState[],
  hooks: PruneHooks,
  run: (bucket: string, state: WalkState, after: string) => PruneStep | Promise<PruneStep>,
  deleted: (bucket: string) => void,
  between?: () => Promise<void>,
): Promise<PruneResult> {
  for (const bucket of buckets) {
    const mine = (total.buckets[bucket] = zeroCounts());
    for (const state of states) {
      let after = '';
      for (;;) {
        if (hooks.signal?.aborted) return total;
        const r = await run(bucket, state, after);
        for (const k of ['requests', 'bytes', 'deliveries', 'attempts', 'keptLive'] as const) {
          mine[k] += r.counts[k];
          total[k] += r.counts[k];
        }
        after = r.next;
        if (r.counts.requests > 0) deleted(bucket);
        if (r.done) break;
        await between?.();
      }
    }
  }
  return total;
}

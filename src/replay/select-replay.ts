/**
 * Which requests a replay takes, checked the same way for `hookbucket replay` and the admin API's
 * POST /buckets/{name}/replays: the scope must be explicit, the bucket must exist, not be deleting
 * and have a destination (or a `to`), and ids named alone must all be in the bucket.
 */
import { iso } from '../json/iso.js';
import { filterJson, isEmptyFilter } from '../options/request-filter.js';
import type { Rate } from '../policy/token-bucket.js';
import { AppError, bucketNotFound } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import { deletingError, type Replay, type RequestFilter, type RequestSummary, type Store } from '../store/store.js';
import { scopeProblem } from './replay.js';

/** Requests shown in a dry run. */
export const SAMPLE = 5;

export interface ReplayAsk {
  bucket: string;
  filter: RequestFilter;
  /** Every request of the bucket (`--all`). */
  all: boolean;
  /** A `--to` URL; null: the bucket's destination. */
  to: string | null;
}

export interface ReplaySelection extends ReplayAsk {
  ids: string[];
  /** The first SAMPLE selected, oldest first. */
  sample: RequestSummary[];
  /** Where the deliveries go: `to`, or the bucket's destination. */
  destination: string;
}

/** A scope that is not explicit is a usage error, before anything is read. */
export function checkReplayScope(ask: Pick<ReplayAsk, 'filter' | 'all'>): void {
  const { ids, ...narrowing } = ask.filter;
  const problem = scopeProblem({ all: ask.all, ids: ids ?? [], filtered: !isEmptyFilter(narrowing) });
  if (problem !== undefined) throw new AppError('usage', problem);
}

/** Summaries per page of the selection: one `listRequests` call each (through the admin reader, one budget each). */
const SELECT_PAGE = 2_000;

/**
 * Reads the selection (stored when the read starts: later arrivals are not included): pages of
 * summaries, newest first, with no body read; ids handed on oldest first.
 */
export async function selectReplay(store: Pick<Store, 'getBucket' | 'listRequests'>, ask: ReplayAsk): Promise<ReplaySelection> {
  checkReplayScope(ask);
  const bucket = await store.getBucket(ask.bucket);
  if (!bucket) throw bucketNotFound(ask.bucket);
  if (bucket.deletingAt !== null) throw deletingError(ask.bucket);
  if (ask.to === null && bucket.destination === null) {
    throw new AppError(
      'invalid_option',
      `bucket ${ask.bucket} has no destination: set one (bucket update --destination) or replay --to <url>`,
    );
  }
  const ids: string[] = [];
  // The oldest SAMPLE seen so far, newest first (the pages go back in time).
  let oldest: RequestSummary[] = [];
  let before: string | undefined;
  // Only accepted requests, unless the filter names their state (quarantined, duplicate, handshake):
  // those were never delivered on purpose, and a replay of them is a deliberate choice.
  const named = new Set<string>(ask.filter.states ?? []);
  let skipped: RequestSummary | undefined;
  do {
    const page = await store.listRequests(ask.bucket, ask.filter, { limit: SELECT_PAGE, ...(before !== undefined ? { before } : {}) });
    const kept: RequestSummary[] = [];
    for (const r of page.requests) {
      if (r.disposition !== 'accepted' && !named.has(r.disposition)) {
        if (ask.filter.ids) skipped ??= r;
        continue;
      }
      ids.push(r.id);
      kept.push(r);
    }
    oldest = [...oldest, ...kept].slice(-SAMPLE);
    before = page.nextCursor ?? undefined;
  } while (before !== undefined);
  if (skipped !== undefined) {
    const r = skipped;
    throw new AppError(
      'usage',
      `request ${r.id} is ${r.disposition}, not delivered on purpose: name --state ${r.disposition} to replay it` +
        (r.disposition === 'quarantined' ? ' (or re-check it with requests verify --release)' : ''),
    );
  }
  ids.reverse();
  const sample = oldest.reverse();
  const { ids: namedIds, ...narrowing } = ask.filter;
  if (namedIds && isEmptyFilter(narrowing)) {
    const found = new Set(ids);
    const missing = namedIds.filter((id) => !found.has(id));
    if (missing.length > 0) throw new AppError('not_found', `not in bucket ${ask.bucket}: ${missing.join(', ')}`);
  }
  return { ...ask, ids, sample, destination: ask.to ?? bucket.destination! };
}

/** Stable JSON of a dry run (`replay --dry-run --json`). */
export function dryRunJson(s: ReplaySelection) {
  return {
    dry_run: true as const,
    bucket: s.bucket,
    destination: s.destination,
    count: s.ids.length,
    sample: s.sample.map((r) => ({
      id: r.id,
      received_at: iso(r.receivedAt),
      method: r.method,
      path: r.path,
      query: r.query,
      state: r.state,
    })),
  };
}

/** Creates the replay of a selection (at least one request), recording its selectors as given. */
export function startReplay(
  store: Pick<Store, 'createReplay'>,
  s: ReplaySelection,
  options: { rate: Rate | null; nowMs: number },
): Promise<Replay> {
  return store.createReplay({
    id: newId(),
    bucket: s.bucket,
    requestIds: s.ids,
    selection: s.all ? { all: true } : filterJson(s.filter),
    destination: s.to,
    rate: options.rate,
    nowMs: options.nowMs,
  });
}

import type { Store } from '../store/store.js';

/**
 * The Store methods the admin API only reads through. In `serve` on SQLite they run on a worker
 * thread with a read-only connection and a time budget per call (a long `--search` must not hold
 * ingest's event loop), so every one of them takes and returns plain, structured-clonable data;
 * elsewhere the Store itself serves them. Writes (bucket changes, replays) go to the Store. An
 * export walks `requestBatch` (bounded batches, a call each), a replay's selection `listRequests`
 * pages: an iterator cannot cross threads.
 */
export const STORE_READ_METHODS = [
  'getBucket',
  'listBuckets',
  'bucketCounts',
  'allBucketCounts',
  'unattributedRejections',
  'bucketOverview',
  'listRequests',
  'requestBatch',
  'countRequests',
  'getRequest',
  'statsSamples',
  'requestHistory',
  'getReplay',
  'listReplays',
  'replayProgress',
  'activeWorker',
  'processes',
  'tail',
  'tailRequestsPage',
  'tailAttemptsPage',
] as const satisfies readonly (keyof Store)[];

export type StoreReadMethod = (typeof STORE_READ_METHODS)[number];

/** What the admin API reads through: the Store itself, or an off-thread reader with a time budget. */
export type StoreReads = Pick<Store, StoreReadMethod>;

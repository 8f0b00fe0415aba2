/** A new bucket's settings where `bucket create` gives none, and the bounds the CLI checks. Dialect-neutral. */
import { DEFAULT_RETRY_BUDGET } from '../policy/retry-budget.js';
import { DEFAULT_SCHEDULE } from '../policy/schedule.js';
import { DEFAULT_BURST } from '../policy/token-bucket.js';
import type { DrainSettings } from './store.js';

export const DEFAULT_MAX_BODY = 25 * 1024 * 1024; // 25 MiB, GitHub's payload cap
export const MAX_MAX_BODY = 100 * 1024 * 1024; // 100 MiB

/** Attempts in flight per bucket unless `--concurrency` says otherwise. */
export const DEFAULT_CONCURRENCY = 10;
export const DEFAULT_TIMEOUT_MS = 10_000; // 10s

export const DEFAULT_DRAIN: DrainSettings = Object.freeze({
  rate: null,
  burst: DEFAULT_BURST,
  concurrency: DEFAULT_CONCURRENCY,
  timeoutMs: DEFAULT_TIMEOUT_MS,
  schedule: DEFAULT_SCHEDULE,
  retryOn: null,
  retryBudget: DEFAULT_RETRY_BUDGET,
  forwardPath: true,
  forwardRawPath: false,
  forwardHeaders: [],
});

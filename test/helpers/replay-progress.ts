import type { ReplayProgress } from '../../src/store/store.js';

/** An expected replay progress: every figure 0 (unpaused, nothing settled) but the ones given. */
export const progress = (p: Partial<ReplayProgress> = {}): ReplayProgress => ({
  total: 0,
  pending: 0,
  retrying: 0,
  delivering: 0,
  held: 0,
  delivered: 0,
  failed: 0,
  exhausted: 0,
  superseded: 0,
  settled: 0,
  paused: false,
  lastSettledAt: null,
  ...p,
});

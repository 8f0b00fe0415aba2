import type { ReplayProgress } from '../../src/store/store.js';
import { toReplayProgress } from '../../src/store/replay-rows.js';

/** An expected replay progress: every figure 0 (unpaused, nothing settled) but the ones given. */
export const progress = (p: Partial<ReplayProgress> = {}): ReplayProgress => ({ ...toReplayProgress([], false), ...p });

/**
 * `bucket create|update` (CLI and admin API) refuse an attempt timeout the worker's lease does not
 * cover (policy/lease-fit.ts): such a bucket would never be delivered.
 */
import { effectiveLease, timeoutRefusal, type EffectiveLease } from '../policy/lease-fit.js';
import { AppError } from '../shared/errors.js';
import { DEFAULT_DRAIN } from '../store/bucket-defaults.js';
import type { BucketPatch, Store } from '../store/store.js';

/** The lease that applies now: the shortest alive worker's, else `defaultLeaseMs`. */
export async function currentLease(store: Pick<Store, 'processes'>, defaultLeaseMs: number, nowMs: number): Promise<EffectiveLease> {
  return effectiveLease(await store.processes(nowMs), defaultLeaseMs);
}

/**
 * Throws `timeout_exceeds_lease` (exit 2, HTTP 400) when the timeout the patch sets does not fit.
 * For a new bucket the default timeout is checked too; an update that leaves the timeout alone is
 * not refused (`bucket show` and `stats` report a bucket that is stuck already).
 */
export async function checkTimeoutFitsLease(
  store: Pick<Store, 'processes'>,
  patch: BucketPatch,
  options: { creating: boolean; defaultLeaseMs: number; nowMs: number },
): Promise<void> {
  const timeoutMs = patch.drain?.timeoutMs ?? (options.creating ? DEFAULT_DRAIN.timeoutMs : undefined);
  if (timeoutMs === undefined) return;
  const refusal = timeoutRefusal(timeoutMs, await currentLease(store, options.defaultLeaseMs, options.nowMs));
  if (refusal !== undefined) throw new AppError('timeout_exceeds_lease', refusal);
}

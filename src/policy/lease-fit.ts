/**
 * Lease fit, pure: a delivery's lease (`--lease`, HOOKBUCKET_LEASE) must be longer than its
 * bucket's attempt timeout, or the lease would expire while the attempt still legitimately runs
 * and a second attempt would start beside it. A worker therefore skips a bucket whose timeout is
 * not shorter than its lease: that bucket is "stuck" (ingest keeps storing, nothing is sent).
 *
 * Which lease applies: the shortest among the workers alive on the database (each skips the
 * buckets that do not fit its own lease), else the configured default (the lease the next worker
 * starts with, unless it is given another).
 */
import { formatDuration } from '../shared/format-duration.js';

/** `--lease` / HOOKBUCKET_LEASE when not set: longer than any bucket's default attempt timeout (10s). */
export const DEFAULT_LEASE_MS = 60_000; // 60s

export interface LeaseHolder {
  readonly roles: ReadonlyArray<string>;
  readonly leaseMs: number | null;
  readonly alive: boolean;
}

export interface EffectiveLease {
  leaseMs: number;
  /** `worker`: an alive worker's --lease; `default`: no worker alive, the configured default. */
  source: 'worker' | 'default';
}

/** The lease a bucket's timeout must stay below: the shortest of the alive workers', else `defaultLeaseMs`. */
export function effectiveLease(processes: readonly LeaseHolder[], defaultLeaseMs: number): EffectiveLease {
  let shortest: number | undefined;
  for (const p of processes) {
    if (!p.alive || !p.roles.includes('worker') || p.leaseMs === null) continue;
    if (shortest === undefined || p.leaseMs < shortest) shortest = p.leaseMs;
  }
  return shortest === undefined ? { leaseMs: defaultLeaseMs, source: 'default' } : { leaseMs: shortest, source: 'worker' };
}

/** Whether an attempt timeout fits under a lease (strictly shorter). */
export function timeoutFits(timeoutMs: number, leaseMs: number): boolean {
  return timeoutMs < leaseMs;
}

export interface StuckBucket {
  bucket: string;
  timeoutMs: number;
  leaseMs: number;
  source: EffectiveLease['source'];
}

/** The buckets (not being deleted) whose timeout does not fit the lease, in the order given. */
export function stuckBuckets(
  buckets: ReadonlyArray<{ name: string; deletingAt: number | null; drain: { timeoutMs: number } }>,
  lease: EffectiveLease,
): StuckBucket[] {
  return buckets
    .filter((b) => b.deletingAt === null && !timeoutFits(b.drain.timeoutMs, lease.leaseMs))
    .map((b) => ({ bucket: b.name, timeoutMs: b.drain.timeoutMs, leaseMs: lease.leaseMs, source: lease.source }));
}

/** Where the lease comes from and how to raise it, for messages. */
export function leaseText(lease: EffectiveLease): string {
  return lease.source === 'worker'
    ? `the running worker's lease ${formatDuration(lease.leaseMs)}`
    : `the lease ${formatDuration(lease.leaseMs)} (HOOKBUCKET_LEASE or its default; no worker is running)`;
}

/** Why a bucket is stuck, and the two ways out. */
export function stuckText(s: StuckBucket): string {
  return (
    `bucket ${s.bucket}: attempt timeout ${formatDuration(s.timeoutMs)} is not shorter than ${leaseText(s)}; ` +
    `its deliveries wait (ingest keeps storing): lower --timeout (hookbucket bucket update ${s.bucket} --timeout <d>) ` +
    'or restart the worker with a longer --lease / HOOKBUCKET_LEASE'
  );
}

/** The refusal of a bucket create/update whose timeout would not fit, or undefined when it fits. */
export function timeoutRefusal(timeoutMs: number, lease: EffectiveLease): string | undefined {
  if (timeoutFits(timeoutMs, lease.leaseMs)) return undefined;
  return (
    `--timeout ${formatDuration(timeoutMs)} must be shorter than ${leaseText(lease)}, or the worker would never deliver this bucket: ` +
    'choose a shorter --timeout, or raise the lease (serve/worker --lease, HOOKBUCKET_LEASE) and restart the worker first'
  );
}

/**
 * A `stats` report: the fields of src/stats/stats.ts for one bucket or all, over a window ending
 * now, with the processes registered on the database; and its JSON (`stats --json`, the admin
 * API's GET /stats). Reads only `statsSamples` and `processes`.
 */
import { recordedUrl } from '../policy/public-url.js';
import { iso } from '../json/iso.js';
import { systemClock, type Clock } from '../shared/clock.js';
import { DEFAULT_LEASE_MS, effectiveLease, stuckBuckets, type StuckBucket } from '../policy/lease-fit.js';
import type { ProcessRecord, Store } from '../store/store.js';
import { computeStats, type StatsFields } from './stats.js';

export const DEFAULT_WINDOW_MS = 3_600_000; // 1h

export interface StatsReport {
  /** null: every bucket together. */
  bucket: string | null;
  windowMs: number;
  sinceMs: number;
  untilMs: number;
  fields: StatsFields;
  /** Each bucket's own fields, when `bucket` is null. */
  perBucket: Array<{ bucket: string; fields: StatsFields }>;
  /**
   * Receivers and workers registered on the database: the live ones, dead ones still holding
   * leased deliveries, and those seen within the window.
   */
  processes: ProcessRecord[];
  /**
   * Buckets in scope whose attempt timeout the lease does not cover (the shortest alive worker's
   * --lease, else the configured default): the worker skips them, nothing of them is delivered.
   */
  stuck: StuckBucket[];
}

/** The stats of one bucket, or of every bucket together, over the window that ends now. */
export async function loadStats(
  store: Pick<Store, 'statsSamples' | 'processes' | 'listBuckets'>,
  bucket: string | undefined,
  windowMs: number,
  clock: Clock = systemClock,
  /** The configured --lease (HOOKBUCKET_LEASE), for when no worker is alive. */
  defaultLeaseMs: number = DEFAULT_LEASE_MS,
): Promise<StatsReport> {
  const untilMs = clock.now();
  const sinceMs = untilMs - windowMs;
  const { buckets, unattributedRejections } = await store.statsSamples({
    ...(bucket !== undefined ? { bucket } : {}),
    sinceMs,
    untilMs: untilMs + 1,
  });
  // All buckets: refusals that named no bucket (unknown_bucket, parse errors) count too.
  const fields = computeStats(buckets, untilMs, bucket === undefined ? unattributedRejections : {});
  const perBucket = bucket === undefined ? buckets.map((s) => ({ bucket: s.bucket, fields: computeStats([s], untilMs) })) : [];
  const processes = (await store.processes(untilMs, { limit: PROCESSES_SHOWN })).filter(
    (p) => p.alive || p.inflight > 0 || p.heartbeatAt >= sinceMs,
  );
  const inScope = (await store.listBuckets()).filter((b) => bucket === undefined || b.name === bucket);
  const stuck = stuckBuckets(inScope, effectiveLease(processes, defaultLeaseMs));
  return { bucket: bucket ?? null, windowMs, sinceMs, untilMs, fields, perBucket, processes, stuck };
}

/** Processes read for `stats` at most (newest first). */
const PROCESSES_SHOWN = 100;

/** Workers alive now, and deliveries leased to workers that are not: they go out again only once their lease ends. */
export function workerFigures(processes: readonly ProcessRecord[]): { workers_alive: number; delivering_dead_worker: number } {
  let alive = 0;
  let dead = 0;
  for (const p of processes) {
    if (p.alive && p.roles.includes('worker')) alive++;
    if (!p.alive) dead += p.inflight;
  }
  return { workers_alive: alive, delivering_dead_worker: dead };
}

/** Stable JSON shape (README "JSON fields"): the fields at the top level, as `health` names them. */
export function statsJson(r: StatsReport) {
  return {
    bucket: r.bucket,
    window_ms: r.windowMs,
    since: iso(r.sinceMs),
    until: iso(r.untilMs),
    ...r.fields,
    ...(r.bucket === null ? { buckets: r.perBucket.map((b) => ({ bucket: b.bucket, ...b.fields })) } : {}),
    ...workerFigures(r.processes),
    stuck_buckets: r.stuck.length,
    stuck: r.stuck.map(stuckJson),
    processes: r.processes.map((p) => ({
      id: p.id,
      roles: p.roles,
      host: p.host,
      pid: p.pid,
      alive: p.alive,
      started_at: iso(p.startedAt),
      heartbeat_at: iso(p.heartbeatAt),
      stopped_at: p.stoppedAt === null ? null : iso(p.stoppedAt),
      lease_ms: p.leaseMs,
      inflight: p.inflight,
      // The ingest address a receiver recorded (null for a worker alone): `bucket show --api` prints it.
      url: recordedUrl(p.info) ?? null,
    })),
  };
}

/** One stuck bucket in `stats --json` / GET /api/stats (`stuck`). */
export function stuckJson(s: StuckBucket) {
  return { bucket: s.bucket, timeout_ms: s.timeoutMs, lease_ms: s.leaseMs, lease_source: s.source };
}

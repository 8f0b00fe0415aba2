/**
 * Shared by the scale-out benchmarks (bench/scale-drain.ts, bench/scale-ingest.ts,
 * bench/wake-latency.ts): the real CLI binary as separate processes on one PostgreSQL database
 * (`serve --no-worker` receivers, `worker` processes; test/reliability/lib/serve-process.ts spawns
 * them), their CPU from /proc, and the statistics the reports use (their formats and tables are
 * bench/report.ts's).
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import {
  hookbucket,
  startServe,
  startWorkerProcess,
  type HookbucketProcess,
  type ServeHandle,
} from '../test/reliability/lib/serve-process.js';
import { createBenchDatabase, procCpuUs, type BenchDatabase } from './pg-bench.js';
import { median as medianOfAll, progress } from './report.js';

/** The system's 1/5/15-minute load averages (/proc/loadavg, what `uptime` prints). */
export function loadAvg(): number[] {
  return os.loadavg();
}

/**
 * The order of the configurations in round `round` (1-based): rotated by one each round, so each
 * configuration runs first, in the middle and last equally often over as many rounds as there are
 * configurations.
 */
export function rotation<T>(configs: readonly T[], round: number): T[] {
  const k = (round - 1) % configs.length;
  return [...configs.slice(k), ...configs.slice(0, k)];
}

/** Every process of a run: a throwaway database, a temp folder for spools, the children. */
export class Cluster {
  readonly db: BenchDatabase;
  readonly tmp: string;
  readonly receivers: ServeHandle[] = [];
  readonly workers: HookbucketProcess[] = [];

  private constructor(db: BenchDatabase, tmp: string) {
    this.db = db;
    this.tmp = tmp;
  }

  static async create(server: string): Promise<Cluster> {
    const db = await createBenchDatabase(server);
    return new Cluster(db, await mkdtemp(join(os.tmpdir(), 'hookbucket-scale-')));
  }

  /** A one-shot command on the run's database (`bucket create …`), which also migrates it the first time. */
  async cli(args: string[]): Promise<string> {
    return (await hookbucket(['--db', this.db.url, '--spool-dir', join(this.tmp, 'spool-cli'), ...args])).stdout;
  }

  /** `serve --no-worker --durability full` on a port the OS picks, resolved once it listens. */
  async startReceiver(): Promise<ServeHandle> {
    const i = this.receivers.length;
    const h = await startServe({
      db: this.db.url,
      flags: ['--no-worker', '--durability', 'full', '--log-level', 'info', '--spool-dir', join(this.tmp, `spool-r${i}`)],
    });
    this.receivers.push(h);
    return h;
  }

  /** n `worker` processes, started together, resolved once each says it is active. */
  async startWorkers(n: number): Promise<HookbucketProcess[]> {
    const started = await Promise.all(
      Array.from({ length: n }, (_, i) =>
        startWorkerProcess({
          db: this.db.url,
          flags: ['--log-level', 'info', '--spool-dir', join(this.tmp, `spool-w${this.workers.length + i}`)],
        }),
      ),
    );
    this.workers.push(...started);
    return started;
  }

  /** Summed CPU (µs) of the given processes now; NaN when one can no longer be read. */
  static async cpuUs(procs: readonly HookbucketProcess[]): Promise<number> {
    let sum = 0;
    for (const p of procs) {
      const us = await procCpuUs(p.pid);
      if (us === undefined) return NaN;
      sum += us;
    }
    return sum;
  }

  /** SIGTERM to every child (SIGKILL past 15 s), then the database is dropped and the folder removed. */
  async close(): Promise<void> {
    const all = [...this.receivers.map((r) => r.proc), ...this.workers];
    const ends = await Promise.all(all.map((p) => p.term(15_000)));
    await this.db.drop();
    await rm(this.tmp, { recursive: true, force: true });
    const forced = ends.filter((e) => e.forced).length;
    if (forced > 0) progress(`${forced} process(es) needed SIGKILL to stop`);
  }
}

/** The value at fraction p (0..1) of sorted values, nearest rank. */
export function percentile(sorted: readonly number[], p: number): number {
  if (sorted.length === 0) return NaN;
  return sorted[Math.min(sorted.length - 1, Math.max(0, Math.ceil(p * sorted.length) - 1))]!;
}

/**
 * The median of the finite values: a run whose process CPU could no longer be read (NaN) is left
 * out rather than spoiling the sort.
 */
export function median(values: readonly number[]): number {
  return medianOfAll(values.filter(Number.isFinite));
}

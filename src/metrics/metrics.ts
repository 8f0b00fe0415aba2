/**
 * Prometheus metrics for one process (docs/metrics.md lists every series). A Registry of its own,
 * never prom-client's global one, so that tests (and a process that ever runs two servers) hold
 * several side by side.
 *
 * Three kinds of figures:
 * - counters this process counts as things happen: requests stored and refused (ingest, through
 *   instrumentSink), attempts and deferrals (the drain worker, through its DrainObserver), only once
 *   the store has recorded them;
 * - gauges read from the database when scraped (deliveries by state, the oldest waiting request's
 *   age, the database's size), through a cache of `cacheMs` so that scrapes cannot hammer it. They
 *   are the database's, so every receiver reports the same values;
 * - Node's default process metrics.
 *
 * Labels are bounded: bucket, reason, outcome and state, never a path or an id. A bucket that no
 * longer exists loses its series at the next scrape that finds it gone.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { DrainObserver } from '../drain/drain-observer.js';
import type { DeferReason } from '../policy/pacer.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import type { AttemptOutcome, DeliveryState } from '../store/schema.js';
import type { Bucket, IngestSink, StatsQuery, StatsSample, StorageSize } from '../store/store.js';

/** How long figures read from the database are reused: a scrape every second costs one read per 5 s. */
export const DEFAULT_METRICS_CACHE_MS = 5_000; // 5 s

/**
 * Attempt durations, seconds: from a fast loopback answer to the default 10 s attempt timeout and a
 * long one (a bucket's --timeout stays under the worker's --lease, 60 s by default).
 */
export const ATTEMPT_DURATION_BUCKETS = [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

/** The delivery states a `hookbucket_deliveries` series is written for, zeros included, so that an alert sees a state appear. */
const DELIVERY_STATES: readonly DeliveryState[] = ['pending', 'retrying', 'delivering', 'delivered', 'failed', 'exhausted', 'superseded'];

/**
 * Where the database figures come from; each part is optional, and what is missing is not
 * exported. `serve` gives all three (the Store, or an off-thread reader of it); a standalone worker
 * gives `listBuckets` only (DrainStore), for the removal of deleted buckets' series.
 */
export interface MetricsSource {
  /** Every live bucket's figures (Store.statsSamples; the metrics ask for an empty window, so only the counts are read). */
  statsSamples?(query: StatsQuery): Promise<{ buckets: StatsSample[] }>;
  /** The live buckets, when statsSamples is not given. */
  listBuckets?(): Promise<ReadonlyArray<Pick<Bucket, 'name'>>>;
  storageSize?(): Promise<StorageSize>;
}

export interface MetricsDeps {
  source: MetricsSource;
  clock: Clock;
  logger: Logger;
  /** `--metrics-bucket-histograms`: a `bucket` label on the attempt-duration histogram. */
  bucketHistograms?: boolean;
  cacheMs?: number;
  /** Node's process metrics (default true; tests that make many registries may leave them out). */
  processMetrics?: boolean;
}

interface Snapshot {
  /** When it was read (clock ms). */
  readAt: number;
  /** Counting sequence when the read began: a bucket counted after it may be newer than the read. */
  seq: number;
  /** Live bucket names; undefined: unknown (no source for it, or the read failed). */
  live: Set<string> | undefined;
  samples: StatsSample[] | undefined;
  size: StorageSize | undefined;
}

export class Metrics implements DrainObserver {
  readonly registry = new Registry();
  readonly #d: MetricsDeps;
  readonly #cacheMs: number;
  readonly #received: Counter<'bucket'>;
  readonly #refused: Counter<'bucket' | 'reason'>;
  readonly #attempts: Counter<'bucket' | 'outcome'>;
  readonly #duration: Histogram<'bucket'>;
  readonly #deferrals: Counter<'bucket' | 'reason'>;
  readonly #readErrors: Counter;
  /** Per bucket, the counting sequence of its last count (see #prune). */
  readonly #touched = new Map<string, number>();
  #seq = 0;
  #snapshot: Snapshot | undefined;
  #loading: Promise<Snapshot> | undefined;

  constructor(deps: MetricsDeps) {
    this.#d = deps;
    this.#cacheMs = deps.cacheMs ?? DEFAULT_METRICS_CACHE_MS;
    const registers = [this.registry];
    if (deps.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
    this.#received = new Counter({
      name: 'hookbucket_requests_received_total',
      help: 'Requests stored (committed and acknowledged) by this process, by bucket.',
      labelNames: ['bucket'],
      registers,
    });
    this.#refused = new Counter({
      name: 'hookbucket_ingest_refused_total',
      help: 'Requests refused by this process, by bucket and reason (the error code); bucket="" when no existing bucket applies.',
      labelNames: ['bucket', 'reason'],
      registers,
    });
    this.#attempts = new Counter({
      name: 'hookbucket_attempts_total',
      help: 'Delivery attempts recorded by this process, by bucket and outcome.',
      labelNames: ['bucket', 'outcome'],
      registers,
    });
    this.#duration = new Histogram({
      name: 'hookbucket_attempt_duration_seconds',
      help: 'Delivery attempt durations, connect to last response byte read.',
      labelNames: deps.bucketHistograms ? ['bucket'] : [],
      buckets: ATTEMPT_DURATION_BUCKETS,
      registers,
    });
    this.#deferrals = new Counter({
      name: 'hookbucket_deferrals_total',
      help: 'Deliveries held back by a claim of this process, by bucket and reason (rate, retry_budget, retry_after, replay_rate).',
      labelNames: ['bucket', 'reason'],
      registers,
    });
    this.#readErrors = new Counter({
      name: 'hookbucket_metrics_read_errors_total',
      help: 'Scrapes whose database figures could not be read (those gauges were left out).',
      registers,
    });
    const snapshot = () => this.#fresh();
    const clock = deps.clock;
    if (deps.source.statsSamples) {
      new Gauge({
        name: 'hookbucket_deliveries',
        help: "Deliveries by bucket and state, each request's latest generation (superseded: earlier generations); read from the database.",
        labelNames: ['bucket', 'state'],
        registers,
        async collect() {
          this.reset();
          for (const s of (await snapshot()).samples ?? []) {
            for (const state of DELIVERY_STATES)
              this.set({ bucket: s.bucket, state }, state === 'superseded' ? s.superseded : (s.latest[state] ?? 0));
          }
        },
      });
      new Gauge({
        name: 'hookbucket_oldest_waiting_age_seconds',
        help: 'Age of the oldest request still pending, retrying or delivering, by bucket (0 when none waits); read from the database.',
        labelNames: ['bucket'],
        registers,
        async collect() {
          this.reset();
          const now = clock.now();
          for (const s of (await snapshot()).samples ?? []) {
            this.set({ bucket: s.bucket }, s.oldestWaitingAt === null ? 0 : Math.max(0, now - s.oldestWaitingAt) / 1000);
          }
        },
      });
      new Gauge({
        name: 'hookbucket_bucket_paused',
        help: 'Whether the bucket is paused (1) or not (0); read from the database.',
        labelNames: ['bucket'],
        registers,
        async collect() {
          this.reset();
          for (const s of (await snapshot()).samples ?? []) this.set({ bucket: s.bucket }, s.paused ? 1 : 0);
        },
      });
    }
    if (deps.source.storageSize) {
      new Gauge({
        name: 'hookbucket_database_bytes',
        help: 'Database size: the SQLite file, or pg_database_size(current_database()) on PostgreSQL.',
        registers,
        async collect() {
          // An unlabelled gauge reads 0 after reset(); remove() leaves no sample at all, rather than a false 0.
          const size = (await snapshot()).size;
          if (size) this.set(size.databaseBytes);
          else this.remove();
        },
      });
      new Gauge({
        name: 'hookbucket_database_wal_bytes',
        help: "SQLite's -wal file size; not exported on PostgreSQL (its WAL is the whole server's).",
        registers,
        async collect() {
          const size = (await snapshot()).size;
          if (size && size.walBytes !== null) this.set(size.walBytes);
          else this.remove();
        },
      });
    }
  }

  /** A request was stored and acknowledged. */
  requestReceived(bucket: string): void {
    this.#touch(bucket);
    this.#received.inc({ bucket });
  }

  /** Ingest refused a request; `bucket` is '' unless an existing bucket applies (ingest's rule: invented names add no series). */
  ingestRefused(bucket: string, reason: string): void {
    this.#touch(bucket);
    this.#refused.inc({ bucket, reason });
  }

  attemptRecorded(bucket: string, outcome: AttemptOutcome, durationMs: number | null): void {
    this.#touch(bucket);
    this.#attempts.inc({ bucket, outcome });
    if (durationMs === null) return;
    if (this.#d.bucketHistograms) this.#duration.observe({ bucket }, durationMs / 1000);
    else this.#duration.observe(durationMs / 1000);
  }

  deferred(bucket: string, reason: DeferReason | 'replay_rate', count: number): void {
    this.#touch(bucket);
    this.#deferrals.inc({ bucket, reason }, count);
  }

  /**
   * `hookbucket_admin_auth_failures_total{reason}`: the admin listener's refused credentials
   * (`missing`, `invalid`), read from its counts at scrape time.
   */
  countAdminAuthFailures(failures: () => { missing: number; invalid: number }): void {
    new Counter({
      name: 'hookbucket_admin_auth_failures_total',
      help: 'Admin requests refused 401, by reason: missing (no credentials) or invalid (a wrong token, a bad or expired session cookie).',
      labelNames: ['reason'],
      registers: [this.registry],
      collect() {
        const f = failures();
        this.reset();
        this.inc({ reason: 'missing' }, f.missing);
        this.inc({ reason: 'invalid' }, f.invalid);
      },
    });
  }

  /** The exposition text (Prometheus text format 0.0.4) with its content type. */
  async render(): Promise<{ contentType: string; body: string }> {
    const snapshot = await this.#fresh();
    await this.#prune(snapshot);
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }

  #touch(bucket: string): void {
    if (bucket !== '') this.#touched.set(bucket, ++this.#seq);
  }

  /** The database figures, read again once older than cacheMs; one read at a time. */
  #fresh(): Promise<Snapshot> {
    const s = this.#snapshot;
    if (s !== undefined && this.#d.clock.now() - s.readAt < this.#cacheMs) return Promise.resolve(s);
    return (this.#loading ??= this.#read().finally(() => (this.#loading = undefined)));
  }

  async #read(): Promise<Snapshot> {
    const { source, clock } = this.#d;
    const seq = this.#seq;
    const now = clock.now();
    let samples: StatsSample[] | undefined;
    let live: Set<string> | undefined;
    let size: StorageSize | undefined;
    try {
      if (source.statsSamples) {
        // An empty window: only the counts by state and the oldest waiting request are read.
        samples = (await source.statsSamples({ sinceMs: now, untilMs: now })).buckets;
        live = new Set(samples.map((b) => b.bucket));
      } else if (source.listBuckets) {
        live = new Set((await source.listBuckets()).map((b) => b.name));
      }
      if (source.storageSize) size = await source.storageSize();
    } catch (e) {
      this.#readErrors.inc();
      this.#d.logger.warn({ err: e }, 'metrics: reading figures from the database failed; database gauges left out of this scrape');
      samples = undefined;
      live = undefined;
      size = undefined;
    }
    const snapshot: Snapshot = { readAt: now, seq, live, samples, size };
    this.#snapshot = snapshot;
    return snapshot;
  }

  /**
   * Removes the counter and histogram series of buckets the snapshot did not find. A bucket counted
   * after the read began (made a moment ago) is kept until a later read has seen the bucket list.
   */
  async #prune(snapshot: Snapshot): Promise<void> {
    const live = snapshot.live;
    if (live === undefined) return;
    const gone = new Set<string>();
    for (const [bucket, seq] of this.#touched) {
      if (!live.has(bucket) && seq <= snapshot.seq) gone.add(bucket);
    }
    if (gone.size === 0) return;
    for (const metric of [this.#received, this.#refused, this.#attempts, this.#deferrals] as Array<Counter<string>>) {
      for (const v of (await metric.get()).values) {
        if (gone.has(String(v.labels.bucket))) metric.remove(v.labels as Record<string, string>);
      }
    }
    if (this.#d.bucketHistograms) for (const bucket of gone) this.#duration.remove({ bucket });
    for (const bucket of gone) this.#touched.delete(bucket);
  }
}

export function createMetrics(deps: MetricsDeps): Metrics {
  return new Metrics(deps);
}

/**
 * The ingest sink, counting what it stores and refuses: a request is counted once its row is
 * committed (submit resolved), a refusal as ingest reports it (server.ts and ingest/routes.ts both
 * go through countRejection, with bucket '' for an unknown bucket).
 */
export function instrumentSink(sink: IngestSink, metrics: Pick<Metrics, 'requestReceived' | 'ingestRefused'>): IngestSink {
  return {
    async submit(request, options) {
      await sink.submit(request, options);
      metrics.requestReceived(request.bucket);
    },
    countRejection(bucket, reason) {
      sink.countRejection(bucket, reason);
      metrics.ingestRefused(bucket, reason);
    },
    health: () => sink.health(),
    accepting: () => sink.accepting(),
    close: () => sink.close(),
  };
}

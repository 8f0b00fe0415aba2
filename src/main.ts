import type { IncomingMessage, Server, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { createAdminApp, createApp } from './app.js';
import { AdminAuth } from './admin/auth.js';
import { AdminLimits } from './admin/limits.js';
import { checkAdminListener, type Config } from './config/config.js';
import { hostAllowList, type HostAllowList } from './policy/admin-host.js';
import { createAdminHttpServer, createHttpServer } from './server.js';
import { createUiApp } from './ui/ui-app.js';
import type { Clock } from './shared/clock.js';
import type { Logger } from './shared/logger.js';
import { createDeliveryAgent } from './drain/forward.js';
import { DestinationGuard } from './drain/destination-guard.js';
import { DrainWorker, type StartMode } from './drain/worker.js';
import { DeliveryLog } from './drain/delivery-log.js';
import { RetentionLoop } from './retention/retention-loop.js';
import { AppError } from './shared/errors.js';
import { openStore } from './store/open-store.js';
import type { DrainStore, IngestSink, ProcessBeat, ProcessRegistry, StatsQuery, Store } from './store/store.js';
import { stuckBuckets, stuckText } from './policy/lease-fit.js';
import { PROCESS_TTL_MS } from './store/process-row.js';
import { newId } from './shared/ids.js';
import { hostname, networkInterfaces } from 'node:os';
import type { DrainObserver } from './drain/drain-observer.js';
import { createMetrics, instrumentSink, type Metrics } from './metrics/metrics.js';
import { metricsHandler } from './metrics/metrics-route.js';
import { createApiApp } from './api/api-app.js';
import { EventHub } from './api/event-hub.js';
import { openStoreReads, type OpenedStoreReads } from './api/open-store-reads.js';
import type { StoreReads } from './api/store-reads.js';
import { startMetricsListener, type RunningMetricsListener } from './metrics/metrics-listener.js';

/** How often a stopping server closes connections that became idle. */
const IDLE_SWEEP_MS = 50;

export interface RunningServer {
  readonly url: string;
  readonly port: number;
  readonly server: Server;
  /** The admin listener (API, metrics), unless `--no-admin`. */
  readonly admin: RunningAdmin | undefined;
  /** The drain worker, unless `--no-worker`. */
  readonly worker: RunningWorker | undefined;
  /** Per-bucket `--retain`, applied periodically (runOnce() for tests). */
  readonly retention: RetentionLoop;
  /** This process's Prometheus metrics: mount createMetricsRoute(metrics) at /metrics on the admin listener. */
  readonly metrics: Metrics;
  /**
   * Two-phase stop: stop accepting, let in-flight requests commit (within the HTTP grace, default
   * HTTP_DRAIN_GRACE_MS), flush; then stop the worker (in-flight deliveries get the worker grace,
   * default --shutdown-grace), close. A number bounds both phases (tests and benches stop quickly).
   */
  close(grace?: number | StopGrace): Promise<void>;
}

/** How long each phase of serve's stop may take (docs: total stop time). */
export interface StopGrace {
  /** In-flight HTTP requests (ingest and admin) get this to be answered; then their connections are cut. Default 10 s. */
  httpGraceMs?: number;
  /** In-flight deliveries get this to finish before they are released. Default --shutdown-grace. */
  workerGraceMs?: number;
}

/** serve's HTTP drain on stop: in-flight requests get this long to commit and be answered. */
export const HTTP_DRAIN_GRACE_MS = 10_000; // 10s

export interface RunningAdmin {
  readonly url: string;
  readonly port: number;
  readonly server: Server;
  readonly auth: AdminAuth;
  readonly limits: AdminLimits;
  /** The one poller behind GET /api/events. */
  readonly events: EventHub;
}

/**
 * Listens, and turns "address in use" into `port_in_use` (exit 1) with what to do about it;
 * Node's own EADDRINUSE error would surface as `internal`.
 */
async function listen(server: Server, port: number, host: string, inUse: string): Promise<number> {
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(port, host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code === 'EADDRINUSE')
      throw new AppError('port_in_use', inUse.replace('%s', `${host}:${port}`).replace('%p', String(port)), { cause: e });
    throw e;
  }
  return (server.address() as AddressInfo).port;
}

/** The URL to reach a listener on `host`:`port` (a wildcard bind is reached on 127.0.0.1). */
function urlOf(host: string, port: number): string {
  const h = host === '0.0.0.0' || host === '::' ? '127.0.0.1' : host;
  return `http://${h.includes(':') ? `[${h}]` : h}:${port}`;
}

/**
 * Composition root for `serve`: open store → migrate → start the writer → listen.
 * Signals and exit codes stay in the CLI entry; this only assembles and returns a handle.
 */
export async function startServer(
  config: Config,
  deps: { clock: Clock; logger: Logger /** How often stuck buckets are logged again (default 1 min). */; stuckWarnMs?: number },
): Promise<RunningServer> {
  const { clock, logger } = deps;
  // Before anything is opened: a refused admin setup is a usage error (exit 2).
  checkAdminListener(config);
  const opened = openStore(config, { clock });
  const store = await opened.store();
  let sink: IngestSink;
  let prepared: PreparedWorker | undefined;
  let worker: RunningWorker | undefined;
  // Admin reads (the API's, the metrics' database gauges) go through a reader of their own: on
  // SQLite a worker thread with a read-only connection, so a slow one never holds ingest's event
  // loop; each read has the --admin-query-budget (src/api/store-reads.ts).
  let reads: OpenedStoreReads | undefined;
  try {
    if (config.admin) reads = await openStoreReads(config, { budgetMs: config.adminQueryBudgetMs, clock, logger });
  } catch (e) {
    await store.close();
    throw e;
  }
  // The bucket gauges through the admin reader; the database size from the store (a stat of the files).
  const metricsSource = reads ? { statsSamples: (q: StatsQuery) => reads!.statsSamples(q), storageSize: () => store.storageSize() } : store;
  const metrics = createMetrics({ source: metricsSource, clock, logger, bucketHistograms: config.metricsBucketHistograms });
  try {
    // Inside serve, the ingest side's checkpoint thread keeps the WAL bounded for both. Prepared
    // (opened and checked) now, started once the ports are bound.
    if (config.worker)
      prepared = await prepareWorker(
        config,
        { clock, logger },
        {
          checkpoints: false,
          roles: ['receiver', 'worker'],
          observer: metrics,
          ...(deps.stuckWarnMs !== undefined ? { stuckWarnMs: deps.stuckWarnMs } : {}),
        },
      );
    // Each stored request counts in /metrics and in the worker's delivery log summary.
    const counted = {
      requestReceived: (bucket: string) => {
        metrics.requestReceived(bucket);
        worker?.worker.deliveryLog.requestReceived(bucket);
      },
      ingestRefused: (bucket: string, reason: string) => metrics.ingestRefused(bucket, reason),
    };
    sink = instrumentSink(await opened.ingestSink({ logger, onCommitted: () => worker?.worker.wake() }), counted);
  } catch (e) {
    await prepared?.discard().catch(() => undefined);
    await reads?.close().catch(() => undefined);
    await store.close().catch(() => undefined);
    throw e;
  }
  const app = createApp({ store, sink, clock, logger, config });
  const server = createHttpServer(app, {
    headersTimeoutMs: config.headersTimeoutMs,
    requestTimeoutMs: config.requestTimeoutMs,
    logger,
    countRejection: (b, r) => sink.countRejection(b, r),
  });
  // Node answers `Connection: keep-alive` even after server.close(), so a client sends its next
  // request on a connection the idle sweep below is about to close, and gets a reset for it
  // (reliability case 2: one per connection). Once stopping, every answer not yet started says
  // `Connection: close` instead, and the client reconnects (and is refused) rather than racing.
  const unanswered = new Set<ServerResponse>();
  let stopping = false;
  server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
    if (stopping) {
      res.shouldKeepAlive = false;
      return;
    }
    unanswered.add(res);
    res.once('close', () => unanswered.delete(res));
  });
  // The admin listener binds first: when its port is taken, serve stops before ingest has
  // acknowledged anything.
  let admin: RunningAdmin | undefined;
  // Exports name the ingest URL; its port is known once ingest has bound, after the admin listener.
  let url = urlOf(config.host, config.port);
  let starting = false;
  try {
    if (config.admin)
      admin = await startAdmin(config, { logger, clock, health: () => sink.health(), store, reads: reads!, metrics, ingestUrl: () => url });
    await listen(server, config.port, config.host, 'port %p is in use; pass --port or stop the other server');
    url = urlOf(config.host, (server.address() as AddressInfo).port);
    // Only now: a port in use above has stopped serve before its worker took the lease or sent anything.
    starting = true;
    worker = await prepared?.start('standby', { url });
  } catch (e) {
    if (server.listening) {
      const closed = new Promise<void>((r) => server.close(() => r()));
      server.closeAllConnections();
      await closed;
    }
    if (admin) {
      admin.events.close();
      const closed = new Promise<void>((r) => admin!.server.close(() => r()));
      admin.server.closeAllConnections();
      await closed;
    }
    await sink.close().catch(() => undefined);
    // A failed prepared.start() has closed what it opened.
    if (!starting) await prepared?.discard().catch(() => undefined);
    await reads?.close().catch(() => undefined);
    await store.close().catch(() => undefined);
    throw e;
  }
  const port = (server.address() as AddressInfo).port;
  // Never config.db as is: a PostgreSQL URL may carry a password.
  logger.info({ url, ...(admin ? { admin: admin.url } : {}), db: opened.location, durability: config.durability }, 'hookbucket listening');
  // On the store's connection (main thread): each prune batch is a short transaction, and the
  // event loop runs between batches, so requests keep being answered.
  const retention = new RetentionLoop({ store, clock, logger });
  retention.start();
  // A receiver without a worker registers itself (the workers table): `migrate-data` and the
  // operators' views see it. With its worker, the worker's row says both.
  const beat = config.worker ? undefined : startReceiverBeat(store, { clock, logger, url });

  let closing: Promise<void> | undefined;
  const close = (grace: number | StopGrace = {}) =>
    (closing ??= (async () => {
      const graceMs = typeof grace === 'number' ? grace : (grace.httpGraceMs ?? HTTP_DRAIN_GRACE_MS);
      const workerGraceMs =
        typeof grace === 'number' ? Math.min(grace, config.shutdownGraceMs) : (grace.workerGraceMs ?? config.shutdownGraceMs);
      stopping = true;
      for (const res of unanswered) if (!res.headersSent) res.shouldKeepAlive = false;
      const closed = new Promise<void>((r) => server.close(() => r()));
      const adminClosed = admin ? closeAdmin(admin, graceMs) : undefined;
      // Keep-alive connections become idle as their in-flight request is answered; close each
      // then, rather than waiting out keepAliveTimeout. Past the grace period, close the rest.
      const idle = setInterval(() => server.closeIdleConnections(), IDLE_SWEEP_MS);
      server.closeIdleConnections();
      const timer = setTimeout(() => server.closeAllConnections(), graceMs);
      timer.unref();
      await closed;
      clearInterval(idle);
      clearTimeout(timer);
      try {
        // Admin routes read the store: they finish (or are cut at the grace period) before it closes.
        await adminClosed;
        await sink.close();
        await retention.stop();
        await beat?.stop();
        // Stop claiming, let in-flight deliveries finish within the whole --shutdown-grace (it used
        // to be capped at the 10 s HTTP grace), then close.
        await worker?.close(workerGraceMs);
      } finally {
        // Whatever failed above, the reader's thread (or pool) and the store still close, or they
        // would keep the process from exiting.
        await reads?.close().catch((e: unknown) => logger.error({ err: e }, 'closing the admin reader failed'));
        await store.close();
      }
      logger.info('hookbucket stopped');
    })());
  return { url, port, server, admin, worker, retention, metrics, close };
}

/**
 * The admin listener on `--admin-host`:`--admin-port`: the JSON API at /api (writes through the
 * Store, reads through `reads`), /metrics, behind the listener's auth and guards.
 */
async function startAdmin(
  config: Config,
  deps: {
    logger: Logger;
    clock: Clock;
    health: () => { ok: true } | { ok: false; reason: string; code: string };
    store: Store;
    reads: StoreReads;
    metrics: Metrics;
    ingestUrl: () => string;
  },
): Promise<RunningAdmin> {
  const { logger, clock, store, reads } = deps;
  const auth = new AdminAuth({ token: config.adminToken, clock, logger });
  deps.metrics.countAdminAuthFailures(() => auth.failures());
  const limits = new AdminLimits();
  let hosts: HostAllowList = hostAllowList({ bindHost: config.adminHost, port: undefined, extraNames: config.adminHostNames });
  const events = new EventHub({ reads, clock, logger });
  const api = createApiApp({
    store,
    reads,
    clock,
    logger,
    events,
    config: {
      basePath: '/api',
      ingestBaseUrl: config.publicUrl !== '' ? () => config.publicUrl : deps.ingestUrl,
      defaultLeaseMs: config.leaseMs,
    },
  });
  const ui = createUiApp({ store, reads, clock, logger, config: { auth: auth.enabled } });
  const app = createAdminApp({
    logger,
    auth,
    limits,
    hosts: () => hosts,
    health: deps.health,
    api,
    ui,
    metrics: metricsHandler(deps.metrics),
  });
  const server = createAdminHttpServer(app, { headersTimeoutMs: config.headersTimeoutMs, requestTimeoutMs: config.requestTimeoutMs });
  let port: number;
  try {
    port = await listen(
      server,
      config.adminPort,
      config.adminHost,
      'admin port %s is already in use; each receiver on a host needs its own --admin-port (0 picks a free one), or pass --no-admin',
    );
  } catch (e) {
    events.close();
    throw e;
  }
  const wildcard = config.adminHost === '0.0.0.0' || config.adminHost === '::';
  const interfaceAddresses = wildcard ? Object.values(networkInterfaces()).flatMap((list) => (list ?? []).map((i) => i.address)) : [];
  hosts = hostAllowList({ bindHost: config.adminHost, port, extraNames: config.adminHostNames, interfaceAddresses });
  return { url: urlOf(config.adminHost, port), port, server, auth, limits, events };
}

/** Stops the admin listener: no new connections, open event streams told to end, the rest cut after the grace period. */
async function closeAdmin(admin: RunningAdmin, graceMs: number): Promise<void> {
  const closed = new Promise<void>((r) => admin.server.close(() => r()));
  // A keep-alive connection's next request is answered with `Connection: close`.
  admin.server.on('request', (_req: IncomingMessage, res: ServerResponse) => {
    res.shouldKeepAlive = false;
  });
  admin.events.close();
  admin.limits.closeStreams();
  const idle = setInterval(() => admin.server.closeIdleConnections(), IDLE_SWEEP_MS);
  admin.server.closeIdleConnections();
  const timer = setTimeout(() => admin.server.closeAllConnections(), graceMs);
  timer.unref();
  await closed;
  clearInterval(idle);
  clearTimeout(timer);
}

/** Registers a receiver in the workers table and renews its heartbeat every third of the TTL until stopped. */
function startReceiverBeat(store: ProcessRegistry, deps: { clock: Clock; logger: Logger; url: string }): { stop(): Promise<void> } {
  const beat: ProcessBeat = {
    id: `${hostname()}:${process.pid}:${newId().slice(-8)}`,
    roles: ['receiver'],
    host: hostname(),
    pid: process.pid,
    info: JSON.stringify({ url: deps.url, started_at: new Date(deps.clock.now()).toISOString() }),
    leaseMs: null,
  };
  let warned = false;
  const renew = () =>
    store.heartbeat(beat, deps.clock.now(), PROCESS_TTL_MS).then(
      () => {
        warned = false;
      },
      (e: unknown) => {
        if (!warned) deps.logger.warn({ err: e }, 'receiver heartbeat failed; trying again');
        warned = true;
      },
    );
  let current = renew();
  const timer = setInterval(() => {
    current = renew();
  }, PROCESS_TTL_MS / 3);
  timer.unref();
  return {
    async stop() {
      clearInterval(timer);
      await current;
      await store.markStopped(beat.id, deps.clock.now()).catch(() => undefined);
    },
  };
}

export interface RunningWorker {
  readonly worker: DrainWorker;
  /** A standalone worker's own metrics (none when `observer` was given: serve's metrics count for it). */
  readonly metrics: Metrics | undefined;
  /** `--metrics-port`: its /metrics listener. */
  readonly metricsListener: RunningMetricsListener | undefined;
  /** Stops claiming, lets in-flight attempts finish within graceMs, releases the rest, closes. */
  close(graceMs?: number): Promise<void>;
}

/**
 * Composition root for the drain worker (inside `serve`, or alone as `hookbucket worker`): its own
 * connection, a pooled keep-alive dispatcher, and the single-worker lease. A bucket whose attempt
 * timeout is not shorter than the lease is skipped (a delivery's lease would expire while its
 * attempt still legitimately runs, and a second attempt would start beside it): only that bucket's
 * deliveries stop, and it is logged at warn at start and every `stuckWarnMs` (policy/lease-fit.ts).
 */
export async function startWorker(
  config: Config,
  deps: { clock: Clock; logger: Logger },
  mode: StartMode,
  options: WorkerOptions = {},
): Promise<RunningWorker> {
  return (await prepareWorker(config, deps, options)).start(mode);
}

interface WorkerOptions {
  loop?: boolean;
  checkpoints?: boolean;
  roles?: ReadonlyArray<'receiver' | 'worker'>;
  /** Told about attempts and deferrals (serve's metrics); omitted: the worker makes metrics of its own. */
  observer?: DrainObserver;
  /** HOOKBUCKET_ADMIN_TOKEN, for a --metrics-host beyond loopback. */
  adminToken?: string;
  /** How often stuck buckets are logged again (default STUCK_WARN_MS; tests pass a short one). */
  stuckWarnMs?: number;
}

/** A worker opened and checked but not started: it holds no lease, has registered nothing and claims nothing yet. */
export interface PreparedWorker {
  /** Takes the lease (or stands by) and starts the loop; `url`: the ingest address a serve records in its row. */
  start(mode: StartMode, beat?: { url?: string }): Promise<RunningWorker>;
  /** Closes what was opened, never having started. */
  discard(): Promise<void>;
}

/**
 * The first half of startWorker: opens its store, starts its metrics listener, and is ready to
 * build the worker. `serve` prepares its worker before it binds its ports (a refused setting stops
 * it before anything is acknowledged) and starts it once they are bound: a port in use then stops
 * serve before its worker took the lease or made an attempt.
 */
export async function prepareWorker(
  config: Config,
  deps: { clock: Clock; logger: Logger },
  options: WorkerOptions = {},
): Promise<PreparedWorker> {
  const store = await openStore(config, { clock: deps.clock }).drainStore({
    checkpoints: options.checkpoints ?? true,
    logger: deps.logger,
  });
  // Alone, the worker counts its own attempts and deferrals; the database gauges are the
  // receivers' (docs/metrics.md), and the bucket list only removes deleted buckets' series.
  const metrics =
    options.observer === undefined
      ? createMetrics({
          source: { listBuckets: () => store.listBuckets() },
          clock: deps.clock,
          logger: deps.logger,
          bucketHistograms: config.metricsBucketHistograms,
        })
      : undefined;
  let metricsListener: RunningMetricsListener | undefined;
  // The destinations setting, judged on every new connection; the worker keeps it current.
  const destinations = new DestinationGuard();
  const dispatcher = createDeliveryAgent({ destinations });
  const discard = async () => {
    await metricsListener?.close();
    await dispatcher.close();
    await store.close();
  };
  try {
    if (metrics && config.metricsPort !== null && options.loop !== false) {
      metricsListener = await startMetricsListener(metrics, {
        host: config.metricsHost,
        port: config.metricsPort,
        token: options.adminToken,
        logger: deps.logger,
      });
    }
  } catch (e) {
    await discard().catch(() => undefined);
    throw e;
  }
  return {
    discard,
    async start(mode, beat = {}) {
      // Fault injection for the reliability suite only (undocumented): die the moment a response has
      // arrived, before its outcome is recorded.
      const crashAfterResponse = process.env.HOOKBUCKET_FAULT === 'crash-after-response';
      const worker = new DrainWorker({
        store,
        dispatcher,
        destinations,
        clock: deps.clock,
        logger: deps.logger,
        leaseMs: config.leaseMs,
        ...(options.roles ? { roles: options.roles } : {}),
        ...(beat.url !== undefined ? { beatInfo: { url: beat.url } } : {}),
        observer: options.observer ?? metrics!,
        // Inside serve, ingest tells it about received requests too (startServer).
        deliveryLog: new DeliveryLog({
          logger: deps.logger,
          clock: deps.clock,
          intervalMs: config.logIntervalMs,
          receives: options.roles?.includes('receiver') ?? false,
        }),
        ...(crashAfterResponse ? { afterResponse: () => process.kill(process.pid, 'SIGKILL') } : {}),
      });
      let watch: { stop(): void } | undefined;
      try {
        // A bucket whose timeout this lease does not cover is skipped (its deliveries wait), never a
        // reason to refuse: serve's ingest keeps running. It is said at start and once a minute.
        // `worker --once` says it once; a running worker again every intervalMs.
        watch = await watchStuckBuckets(store, {
          leaseMs: config.leaseMs,
          logger: deps.logger,
          intervalMs: options.loop === false ? null : (options.stuckWarnMs ?? STUCK_WARN_MS),
        });
        await worker.start(mode, { loop: options.loop ?? true });
      } catch (e) {
        watch?.stop();
        await discard();
        throw e;
      }
      const close = async (graceMs = config.shutdownGraceMs) => {
        watch?.stop();
        await metricsListener?.close();
        await worker.stop(graceMs);
        await dispatcher.close();
        await store.close();
      };
      return { worker, metrics, metricsListener, close };
    },
  };
}

/** Stuck buckets are logged again this often while they stay stuck. */
export const STUCK_WARN_MS = 60_000; // 1 min

/**
 * Logs each bucket whose timeout `leaseMs` does not cover (warn), now and every `intervalMs`
 * until stopped. A failed read is logged and tried again at the next tick.
 */
async function watchStuckBuckets(
  store: Pick<DrainStore, 'listBuckets'>,
  deps: { leaseMs: number; logger: Logger; intervalMs: number | null },
): Promise<{ stop(): void }> {
  const check = async () => {
    const stuck = stuckBuckets(await store.listBuckets(), { leaseMs: deps.leaseMs, source: 'worker' });
    for (const s of stuck) deps.logger.warn({ bucket: s.bucket, timeout_ms: s.timeoutMs, lease_ms: s.leaseMs, stuck: true }, stuckText(s));
  };
  await check().catch((e: unknown) => deps.logger.warn({ err: e }, 'checking for stuck buckets failed'));
  if (deps.intervalMs === null) return { stop: () => undefined };
  const timer = setInterval(() => {
    check().catch((e: unknown) => deps.logger.warn({ err: e }, 'checking for stuck buckets failed'));
  }, deps.intervalMs);
  timer.unref();
  return { stop: () => clearInterval(timer) };
}

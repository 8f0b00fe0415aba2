import { Command } from 'commander';
import { startWorker } from '../../main.js';
import { systemClock } from '../../shared/clock.js';
import { createLogger } from '../../shared/logger.js';
import { configFor } from '../context.js';
import { printJson, print, type CliIo } from '../io.js';
import { durationArg, portArg } from '../parsers.js';

interface WorkerOpts {
  lease?: string;
  shutdownGrace?: string;
  logLevel?: string;
  logInterval?: string;
  standby?: boolean;
  once?: boolean;
  json?: boolean;
  metricsPort?: string;
  metricsHost?: string;
  metricsBucketHistograms?: boolean;
}

export function makeWorkerCommand(io: CliIo): Command {
  return new Command('worker')
    .description('run the drain worker alone (for serve --no-worker): forward stored requests to each bucket destination')
    .option('--lease <duration>', 'lease on a claimed delivery, longer than every bucket timeout (default 60s)', durationArg)
    .option('--shutdown-grace <duration>', 'on SIGTERM, time in-flight deliveries get before they are released (default 10s)', durationArg)
    .option('--standby', 'SQLite: if another worker is active, wait and take over when its lease lapses (default: refuse)')
    .option('--once', 'one pass: start what is due now, wait for those attempts, print a summary, exit')
    .option('--json', 'with --once, print the summary as JSON')
    .option(
      '--metrics-port <port>',
      "serve this worker's Prometheus /metrics on this port (0: any free port; env HOOKBUCKET_METRICS_PORT)",
      portArg,
    )
    .option('--metrics-host <host>', 'address of the /metrics listener (default 127.0.0.1; beyond loopback needs HOOKBUCKET_ADMIN_TOKEN)')
    .option('--metrics-bucket-histograms', 'a bucket label on the attempt-duration histogram (one histogram per bucket)')
    .option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent (default info)')
    .option(
      '--log-interval <duration>',
      'delivery log: a summary per active bucket, and failures after the first counted, once per this (default 1m)',
      durationArg,
    )
    .addHelpText(
      'after',
      `
On SQLite only one worker is active per database (a heartbeat lease row): a second one refuses
with the holder's pid and host (exit 1, code worker_active), or waits with --standby. On
PostgreSQL any number of workers run at once and share each bucket's rate, concurrency, retry
budget and Retry-After block (rows their claims lock); a short --lease brings a dead worker's
deliveries back sooner.

With --metrics-port, the worker serves its own Prometheus metrics (attempts, durations, deferrals,
process figures) at /metrics, and nothing else; the database gauges come from serve's admin
listener (docs/metrics.md). On an address beyond loopback, every scrape needs
Authorization: Bearer $HOOKBUCKET_ADMIN_TOKEN.

Examples:
  $ hookbucket serve --no-worker & hookbucket worker
  $ hookbucket worker --standby --lease 2m
  $ hookbucket worker --db postgres://hookbucket@db/hookbucket --lease 15s
  $ hookbucket worker --once --json
  $ hookbucket worker --metrics-port 9464
  $ HOOKBUCKET_ADMIN_TOKEN=... hookbucket worker --metrics-host 0.0.0.0 --metrics-port 9464`,
    )
    .action(async (opts: WorkerOpts, cmd: Command) => {
      const config = configFor(cmd, io, {
        leaseMs: opts.lease,
        shutdownGraceMs: opts.shutdownGrace,
        logLevel: opts.logLevel ?? (opts.once ? 'warn' : undefined),
        logIntervalMs: opts.logInterval,
        metricsPort: opts.metricsPort,
        metricsHost: opts.metricsHost,
        metricsBucketHistograms: opts.metricsBucketHistograms,
      });
      const logger = createLogger(config.logLevel, io.stderr);
      // A secret, kept out of Config (settings only); used just to guard a non-loopback --metrics-host.
      const adminToken = io.env.HOOKBUCKET_ADMIN_TOKEN ?? io.dotenv.HOOKBUCKET_ADMIN_TOKEN;
      // Trapped before starting (as serve does), so a SIGTERM during start-up stops the worker
      // gracefully and releases its lease; --once stays interruptible by Ctrl-C.
      const signalled = opts.once ? undefined : io.waitForSignal();
      const running = await startWorker(config, { clock: systemClock, logger }, opts.standby && !opts.once ? 'standby' : 'refuse', {
        loop: !opts.once,
        ...(adminToken ? { adminToken } : {}),
      });
      if (opts.once) {
        const pass = await running.worker.runOnce();
        await running.close(config.shutdownGraceMs);
        if (opts.json)
          printJson(io, {
            started: pass.started,
            deferred: pass.deferred,
            next_due_at: pass.wakeAt === null ? null : new Date(pass.wakeAt).toISOString(),
          });
        else
          print(
            io,
            `started ${pass.started} attempt(s)${
              Object.keys(pass.deferred).length
                ? `; held back: ${Object.entries(pass.deferred)
                    .map(([r, n]) => `${r} ${n}`)
                    .join(', ')}`
                : ''
            }`,
          );
        return;
      }
      const sig = await signalled!;
      logger.info({ signal: sig }, 'drain worker stopping');
      await running.close();
    });
}

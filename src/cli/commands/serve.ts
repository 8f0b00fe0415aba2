import { Command, Option } from 'commander';
import { startServer } from '../../main.js';
import { systemClock } from '../../shared/clock.js';
import { createLogger } from '../../shared/logger.js';
import { configFor } from '../context.js';
import type { CliIo } from '../io.js';
import { durationArg, portArg, sizeArg } from '../parsers.js';

function collect(value: string, previous: string[] | undefined): string[] {
  return [...(previous ?? []), value];
}

export function makeServeCommand(io: CliIo): Command {
  return new Command('serve')
    .description('receive webhooks on /b/<bucket> and store them (creates and migrates the database)')
    .option('--port <port>', 'port to listen on (default 8787, env HOOKBUCKET_PORT)', portArg)
    .option('--host <host>', 'address to bind (default 0.0.0.0, env HOOKBUCKET_HOST)')
    .addOption(
      new Option('--durability <mode>', 'full: ack survives power loss; normal: survives a crash only (default full)').choices([
        'full',
        'normal',
      ]),
    )
    .option('--trust-proxy', 'take the peer address from X-Forwarded-For (behind your own proxy only)')
    .option('--no-trust-proxy', 'use the socket peer address (default)')
    .option('--max-inflight-bytes <size>', 'body bytes in flight before 503 (default 256MiB)', sizeArg)
    .option('--min-free-disk <size>', 'free disk floor before 503 (default 1GiB)', sizeArg)
    .option('--lock-timeout <duration>', 'longest wait for the write lock before 503 (default 2s)', durationArg)
    .option('--headers-timeout <duration>', 'time allowed to send headers (default 10s)', durationArg)
    .option('--request-timeout <duration>', 'time allowed to send the whole request (default 60s)', durationArg)
    .option('--log-level <level>', 'fatal|error|warn|info|debug|trace|silent (default info)')
    .option(
      '--log-interval <duration>',
      'delivery log: a summary per active bucket, and failures after the first counted, once per this (default 1m)',
      durationArg,
    )
    .option('--no-worker', 'do not run the drain worker here (store only; run hookbucket worker elsewhere)')
    .option(
      '--lease <duration>',
      'lease on a claimed delivery, longer than every bucket timeout; a bucket it does not cover is skipped and warned about (default 60s)',
      durationArg,
    )
    .option(
      '--shutdown-grace <duration>',
      'on SIGTERM, time in-flight deliveries get before they are released, after the HTTP drain of at most 10s (default 10s)',
      durationArg,
    )
    .option(
      '--admin-port <port>',
      'admin listener port: API and metrics (default 8788, env HOOKBUCKET_ADMIN_PORT; 0 picks a free one)',
      portArg,
    )
    .option(
      '--admin-host <host>',
      'admin listener address (default 127.0.0.1, env HOOKBUCKET_ADMIN_HOST); beyond loopback needs HOOKBUCKET_ADMIN_TOKEN',
    )
    .option(
      '--admin-host-name <name>',
      'also answer admin requests whose Host is this name (name or name:port; repeatable; env HOOKBUCKET_ADMIN_HOST_NAMES)',
      collect,
    )
    .option('--no-admin', 'do not start the admin listener')
    .option(
      '--admin-query-budget <duration>',
      'longest an admin API read may take; past it 503 query_timeout (default 10s, env HOOKBUCKET_ADMIN_QUERY_BUDGET)',
      durationArg,
    )
    .option(
      '--metrics-bucket-histograms',
      '/metrics: an attempt-duration histogram per bucket (default: one for all; env HOOKBUCKET_METRICS_BUCKET_HISTOGRAMS)',
    )
    .addHelpText(
      'after',
      `
Examples:
  $ hookbucket serve
  $ hookbucket serve --port 9000 --host 127.0.0.1 --durability normal
  $ hookbucket serve --no-worker          # store only; deliver with: hookbucket worker
  $ HOOKBUCKET_DB=/var/lib/hookbucket/hb.db hookbucket serve --trust-proxy
  $ hookbucket serve --admin-port 0       # admin API on a free loopback port (logged as "admin")
  $ HOOKBUCKET_ADMIN_TOKEN=$(openssl rand -hex 32) hookbucket serve --admin-host 0.0.0.0 --admin-host-name hooks.example.com
  $ hookbucket serve --no-admin

Stopping (SIGINT/SIGTERM) takes at most 10s (in-flight HTTP requests answered) + --shutdown-grace
(in-flight deliveries finish; the rest are released) + closing the store: give a supervisor's stop
timeout more than that (systemd TimeoutStopSec=30s for the defaults).

The admin listener (API, metrics) binds 127.0.0.1:8788 by default, without auth. Beyond loopback it
needs HOOKBUCKET_ADMIN_TOKEN (32+ characters; clients send Authorization: Bearer <token>, browsers
log in at /login), and TLS in front. See docs/admin.md.`,
    )
    .action(async (opts: Record<string, string | boolean | undefined>, cmd: Command) => {
      const config = configFor(cmd, io, {
        port: opts.port as string | undefined,
        host: opts.host as string | undefined,
        durability: opts.durability as string | undefined,
        trustProxy: opts.trustProxy as boolean | undefined,
        maxInflightBytes: opts.maxInflightBytes as string | undefined,
        minFreeDisk: opts.minFreeDisk as string | undefined,
        lockTimeoutMs: opts.lockTimeout as string | undefined,
        adminQueryBudgetMs: opts.adminQueryBudget as string | undefined,
        headersTimeoutMs: opts.headersTimeout as string | undefined,
        requestTimeoutMs: opts.requestTimeout as string | undefined,
        logLevel: opts.logLevel as string | undefined,
        logIntervalMs: opts.logInterval as string | undefined,
        // Commander sets worker: true by default for --no-worker; only an explicit --no-worker overrides env.
        worker: cmd.getOptionValueSource('worker') === 'cli' ? (opts.worker as boolean) : undefined,
        leaseMs: opts.lease as string | undefined,
        shutdownGraceMs: opts.shutdownGrace as string | undefined,
        admin: cmd.getOptionValueSource('admin') === 'cli' ? (opts.admin as boolean) : undefined,
        adminPort: opts.adminPort as string | undefined,
        adminHost: opts.adminHost as string | undefined,
        adminHostNames:
          cmd.getOptionValueSource('adminHostName') === 'cli' ? (opts.adminHostName as unknown as string[]).join(',') : undefined,
        metricsBucketHistograms: opts.metricsBucketHistograms as boolean | undefined,
      });
      const logger = createLogger(config.logLevel, io.stderr);
      // Trap signals before starting: a SIGTERM that arrives while the server and its worker
      // start (or just after "listening") must stop them gracefully, not kill the process.
      const signalled = io.waitForSignal();
      const running = await startServer(config, { clock: systemClock, logger });
      const sig = await signalled;
      logger.info({ signal: sig }, 'shutting down');
      await running.close();
    });
}

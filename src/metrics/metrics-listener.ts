/**
 * A standalone worker's own `/metrics` listener (`worker --metrics-port`): nothing else is served
 * there. Loopback by default; any other address needs HOOKBUCKET_ADMIN_TOKEN, and then every
 * request needs `Authorization: Bearer <token>` (compared in constant time, src/shared/bearer.ts).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { isLoopbackAddress } from '../config/config.js';
import { bearerMatches } from '../shared/bearer.js';
import { AppError } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { Metrics } from './metrics.js';
import { createMetricsRoute } from './metrics-route.js';

export interface MetricsListenerOptions {
  host: string;
  /** 0: any free port (the bound one is logged and returned). */
  port: number;
  /** HOOKBUCKET_ADMIN_TOKEN; required beyond loopback. */
  token: string | undefined;
  logger: Logger;
}

export interface RunningMetricsListener {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

/** A slow or stuck scraper holds a socket this long at most (Prometheus' default scrape timeout is 10 s). */
const REQUEST_TIMEOUT_MS = 15_000; // 15 s

export function createMetricsListenerApp(metrics: Pick<Metrics, 'render'>, token: string | undefined): Hono {
  const app = new Hono();
  if (token !== undefined) {
    app.use('*', async (c, next) => {
      if (bearerMatches(c.req.header('authorization'), token)) return next();
      return c.json({ error: 'a valid Authorization: Bearer token is required', code: 'unauthorized' }, 401, {
        'www-authenticate': 'Bearer',
      });
    });
  }
  app.route('/metrics', createMetricsRoute(metrics));
  app.notFound((c) => c.json({ error: 'no such route; this listener serves /metrics only', code: 'not_found' }, 404));
  return app;
}

export async function startMetricsListener(
  metrics: Pick<Metrics, 'render'>,
  opts: MetricsListenerOptions,
): Promise<RunningMetricsListener> {
  const token = opts.token === undefined || opts.token === '' ? undefined : opts.token;
  if (!isLoopbackAddress(opts.host) && token === undefined) {
    throw new AppError(
      'usage',
      `--metrics-host ${opts.host} is not a loopback address: set HOOKBUCKET_ADMIN_TOKEN so that scrapes need a Bearer token, or keep the default 127.0.0.1`,
    );
  }
  const app = createMetricsListenerApp(metrics, token);
  const server: Server = createServer(
    { requestTimeout: REQUEST_TIMEOUT_MS, headersTimeout: REQUEST_TIMEOUT_MS },
    getRequestListener(app.fetch),
  );
  try {
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(opts.port, opts.host, () => {
        server.off('error', reject);
        resolve();
      });
    });
  } catch (e) {
    const code = (e as NodeJS.ErrnoException).code;
    if (code === 'EADDRINUSE')
      throw new AppError(
        'port_in_use',
        `metrics port ${opts.port} on ${opts.host} is in use; pick another --metrics-port (0: any free port)`,
        { cause: e },
      );
    throw e;
  }
  const port = (server.address() as AddressInfo).port;
  const host = opts.host.includes(':') ? `[${opts.host}]` : opts.host;
  const url = `http://${host}:${port}/metrics`;
  opts.logger.info({ url, port }, 'metrics listening');
  let closing: Promise<void> | undefined;
  return {
    url,
    port,
    close: () =>
      (closing ??= new Promise<void>((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      })),
  };
}

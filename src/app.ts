import { Hono } from 'hono';
import type { Clock } from './shared/clock.js';
import type { Logger } from './shared/logger.js';
import { createIngestHandler, errorBody, isIngestTarget, type Env, type IngestDeps } from './ingest/routes.js';

export interface AppDeps extends IngestDeps {
  clock: Clock;
  logger: Logger;
}

/** The Hono app: ingest under /b/, /healthz, JSON errors everywhere. */
export function createApp(deps: AppDeps): Hono<Env> {
  // Hono routes on the percent-decoded path, and its patterns do not match a decoded line break:
  // `/b/hooks/x%0Ay` fell through to a 404 instead of being stored. Route on the raw path instead;
  // ingest is decided on the raw target anyway, and no other route needs decoding.
  const app = new Hono<Env>({ getPath: (req) => rawPath(req.url) });

  const ingest = createIngestHandler(deps);
  // Ingest is decided on the raw request target before Hono routes on the normalised path.
  app.use('*', async (c, next) => (isIngestTarget(c.env.incoming.url) ? ingest(c) : next()));

  app.get('/healthz', (c) => {
    const h = deps.sink.health();
    if (h.ok) return c.json({ status: 'ok' });
    return c.json({ status: 'degraded', reason: h.reason, code: h.code }, 503);
  });

  app.notFound((c) => errorBody(c, 404, 'not_found', 'no such route; webhooks go to /b/<bucket>'));
  app.onError((err, c) => {
    deps.logger.error({ err }, 'unhandled error');
    return errorBody(c, 500, 'internal', 'internal error');
  });
  return app;
}

/** The path of a request URL as written (no percent-decoding), without its query. */
export function rawPath(url: string): string {
  const start = url.indexOf('/', url.indexOf('://') + 3);
  if (start === -1) return '/';
  const q = url.indexOf('?', start);
  return url.slice(start, q === -1 ? undefined : q);
}

import { Hono } from 'hono';
import type { Clock } from './shared/clock.js';
import type { Logger } from './shared/logger.js';
import { createIngestRoutes, errorBody, type Env, type IngestDeps } from './ingest/routes.js';

export interface AppDeps extends IngestDeps {
  clock: Clock;
  logger: Logger;
}

/** The Hono app: ingest under /b/, /healthz, JSON errors everywhere. */
export function createApp(deps: AppDeps): Hono<Env> {
  const app = new Hono<Env>();

  app.get('/healthz', (c) => {
    const h = deps.sink.health();
    if (h.ok) return c.json({ status: 'ok' });
    return c.json({ status: 'degraded', reason: h.reason, code: h.code }, 503);
  });

  app.route('/', createIngestRoutes(deps));

  app.notFound((c) => errorBody(c, 404, 'not_found', 'no such route; webhooks go to /b/<bucket>'));
  app.onError((err, c) => {
    deps.logger.error({ err }, 'unhandled error');
    return errorBody(c, 500, 'internal', 'internal error');
  });
  return app;
}

import { Hono, type Handler } from 'hono';
import type { Metrics } from './metrics.js';

/**
 * `GET /metrics`: the exposition text (Prometheus text format 0.0.4). A sub-app mounted at
 * `/metrics` by the listener that serves it (the admin listener, behind its auth; or a standalone
 * worker's own listener), so it answers its own root.
 */
export function createMetricsRoute(metrics: Pick<Metrics, 'render'>): Hono {
  const app = new Hono();
  app.get('/', metricsHandler(metrics));
  return app;
}

/** The GET handler itself, for an app that mounts it at a path of its own (the admin listener's /metrics). */
export function metricsHandler(metrics: Pick<Metrics, 'render'>): Handler {
  return async (c) => {
    const { contentType, body } = await metrics.render();
    return c.body(body, 200, { 'content-type': contentType, 'cache-control': 'no-store' });
  };
}

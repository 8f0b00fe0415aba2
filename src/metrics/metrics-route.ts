import { Hono } from 'hono';
import type { Metrics } from './metrics.js';

/**
 * `GET /metrics`: the exposition text (Prometheus text format 0.0.4). A sub-app mounted at
 * `/metrics` by the listener that serves it (the admin listener, behind its auth; or a standalone
 * worker's own listener), so it answers its own root.
 */
export function createMetricsRoute(metrics: Pick<Metrics, 'render'>): Hono {
  const app = new Hono();
  app.get('/', async (c) => {
    const { contentType, body } = await metrics.render();
    return c.body(body, 200, { 'content-type': contentType, 'cache-control': 'no-store' });
  });
  return app;
}

import { Hono, type Handler } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import type { AdminAuth } from './admin/auth.js';
import { adminError, hostGuard, mutationGuard, securityHeaders } from './admin/guards.js';
import { AdminLimits } from './admin/limits.js';
import { indexPage, loginPage } from './admin/pages.js';
import type { HostAllowList } from './policy/admin-host.js';
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

export interface AdminAppDeps {
  logger: Logger;
  /** Token auth (AdminAuth with no token: open). Its failures() feed the metrics. */
  auth: AdminAuth;
  /** Request and stream caps; closeStreams() on stop. */
  limits?: AdminLimits;
  /** The Host allow-list; a function, because the port is known only once the listener bound. */
  hosts: () => HostAllowList;
  /** The health `/healthz` answers (the same as the ingest port's). */
  health: () => { ok: true } | { ok: false; reason: string; code: string };
  /** The JSON API, mounted at /api (its routes see /api/… paths stripped to /…). */
  // biome-ignore lint/suspicious/noExplicitAny: the sub-apps' env and schema types differ; app.ts only mounts them
  api?: Hono<any, any, any>;
  /** The Prometheus handler, mounted at GET /metrics. */
  // biome-ignore lint/suspicious/noExplicitAny: the sub-apps' env and schema types differ; app.ts only mounts them
  metrics?: Handler<any>;
  /** The web inspector (src/ui), mounted at /; it replaces the placeholder index page. */
  // biome-ignore lint/suspicious/noExplicitAny: the sub-apps' env and schema types differ; app.ts only mounts them
  ui?: Hono<any, any, any>;
}

/** Request bodies the admin listener reads at most: JSON commands, not uploads. */
export const ADMIN_BODY_LIMIT = 1024 * 1024; // 1 MiB

/** Paths that answer without the token: health for probes, the login page, and logout (it only clears a cookie). */
const OPEN_PATHS: ReadonlySet<string> = new Set(['/healthz', '/login', '/logout']);
/** Paths that take a classic (JavaScript-free) form post, with a mandatory matching Origin. */
const FORM_PATHS: ReadonlySet<string> = new Set(['/login', '/logout']);

/**
 * The admin app, for its own listener (never the ingest port). In order: security headers on every
 * answer, the Host allow-list, the cross-site rules for mutating requests, a body limit, token
 * auth, then the request cap; then the routes.
 */
export function createAdminApp(deps: AdminAppDeps): Hono<Env> {
  const limits = deps.limits ?? new AdminLimits();
  const app = new Hono<Env>();
  app.use('*', securityHeaders());
  app.use('*', hostGuard(deps.hosts));
  app.use('*', mutationGuard(FORM_PATHS));
  app.use(
    '*',
    bodyLimit({
      maxSize: ADMIN_BODY_LIMIT,
      onError: (c) => adminError(c, 413, 'body_too_large', `admin request bodies are limited to ${ADMIN_BODY_LIMIT} bytes`),
    }),
  );
  app.use('*', deps.auth.middleware(OPEN_PATHS));

  app.get('/healthz', (c) => {
    const h = deps.health();
    if (h.ok) return c.json({ status: 'ok' });
    return c.json({ status: 'degraded', reason: h.reason, code: h.code }, 503);
  });
  // Health stays answerable when the admin routes are busy.
  app.use('*', limits.middleware());
  app.get('/login', (c) => (deps.auth.enabled ? c.html(loginPage(false)) : c.redirect('/', 303)));
  app.post('/login', async (c) => {
    const res = await deps.auth.login(c);
    // A form post that failed gets the form back (with the 401 status), not a JSON body.
    if (res.status === 401 && !/^application\/json/i.test(c.req.header('content-type') ?? '')) return c.html(loginPage(true), 401);
    return res;
  });
  app.post('/logout', (c) => deps.auth.logout(c));
  if (!deps.ui)
    app.get('/', (c) => c.html(indexPage({ api: deps.api !== undefined, metrics: deps.metrics !== undefined, auth: deps.auth.enabled })));
  if (deps.metrics) app.get('/metrics', deps.metrics);
  if (deps.api) app.route('/api', deps.api);
  if (deps.ui) app.route('/', deps.ui);

  app.notFound((c) => adminError(c, 404, 'not_found', 'no such admin route'));
  app.onError((err, c) => {
    deps.logger.error({ err }, 'unhandled admin error');
    return c.json({ error: 'internal error', code: 'internal' }, 500);
  });
  return app;
}

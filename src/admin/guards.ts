import { randomBytes } from 'node:crypto';
import type { Context, MiddlewareHandler } from 'hono';
import { isAllowedHost, type HostAllowList } from '../policy/admin-host.js';

/** The JSON error shape of every admin refusal (the receiver's documented one). */
export function adminError(
  c: Context,
  status: 401 | 403 | 404 | 413 | 415 | 421 | 429 | 503,
  code: string,
  message: string,
  headers?: Record<string, string>,
): Response {
  return c.json({ error: message, code }, status, headers);
}

const NONCE_KEY = 'hookbucketCspNonce';

/**
 * A per-response nonce for inline `<script nonce="…">` (later UI pages): asking for it adds
 * `'nonce-…'` to the response's script-src. Without it no inline script runs.
 */
export function cspNonce(c: Context): string {
  let nonce = c.get(NONCE_KEY as never) as string | undefined;
  if (!nonce) {
    nonce = randomBytes(16).toString('base64');
    c.set(NONCE_KEY as never, nonce as never);
  }
  return nonce;
}

/** The admin origin's policy: only its own resources, no plugins, never framed, forms only to itself. */
export function contentSecurityPolicy(nonce: string | undefined): string {
  return [
    "default-src 'self'",
    `script-src 'self'${nonce ? ` 'nonce-${nonce}'` : ''}`,
    "style-src 'self'",
    "img-src 'self' data:",
    "object-src 'none'",
    "base-uri 'none'",
    "form-action 'self'",
    "frame-ancestors 'none'",
  ].join('; ');
}

/**
 * Headers on every admin answer, refusals included. A route that sets its own
 * Content-Security-Policy (a raw body download sends `sandbox`) keeps it, with `frame-ancestors
 * 'none'` added when it lacks one. No CORS header ever leaves: the admin API is same-origin only,
 * and a mounted sub-app that set one would open it to every site.
 */
export function securityHeaders(): MiddlewareHandler {
  return async (c, next) => {
    await next();
    const h = c.res.headers;
    for (const name of [...h.keys()]) if (name.startsWith('access-control-')) h.delete(name);
    h.set('x-content-type-options', 'nosniff');
    h.set('x-frame-options', 'DENY');
    // `same-origin`, not `no-referrer`: under no-referrer a browser sends `Origin: null` with a
    // form post (Fetch, "append a request Origin header"), and the login form's post would then
    // always be refused by mutationGuard. Other sites still get no referrer at all.
    h.set('referrer-policy', 'same-origin');
    h.set('cross-origin-opener-policy', 'same-origin');
    h.set('cross-origin-resource-policy', 'same-origin');
    const own = h.get('content-security-policy');
    if (own === null) h.set('content-security-policy', contentSecurityPolicy(c.get(NONCE_KEY as never) as string | undefined));
    else if (!/(^|;)\s*frame-ancestors\b/i.test(own)) h.set('content-security-policy', `${own}; frame-ancestors 'none'`);
    if (!h.has('cache-control')) h.set('cache-control', 'no-store');
  };
}

/**
 * DNS rebinding guard: `Host` must be on the allow-list (checked on loopback too). Through
 * `app.request()` there may be no Host header; the URL's authority stands in for it.
 */
export function hostGuard(allow: () => HostAllowList): MiddlewareHandler {
  return async (c, next) => {
    const host = c.req.header('host') ?? new URL(c.req.url).host;
    if (!isAllowedHost(host, allow())) {
      return adminError(
        c,
        421,
        'host_not_allowed',
        'this admin listener does not answer to that Host; add the name with --admin-host-name',
      );
    }
    await next();
  };
}

const MUTATING = new Set(['POST', 'PUT', 'PATCH', 'DELETE']);

/** Whether a Content-Type header value is JSON (`application/json`, parameters allowed). */
export function isJsonContentType(value: string | undefined): boolean {
  return value !== undefined && /^application\/json\s*(;|$)/i.test(value.trim());
}

/** Whether an Origin header names the origin that `host` (the request's Host) serves. */
export function originMatchesHost(origin: string, host: string): boolean {
  if (origin === 'null') return false;
  let o: URL;
  try {
    o = new URL(origin);
  } catch {
    return false;
  }
  if (o.protocol !== 'http:' && o.protocol !== 'https:') return false;
  let h: URL;
  try {
    h = new URL(`${o.protocol}//${host}`);
  } catch {
    return false;
  }
  // URL drops the scheme's default port on both sides (:80, :443) and lower-cases the names.
  return o.host === h.host;
}

/**
 * Cross-site request forgery guard for mutating requests (POST, PUT, PATCH, DELETE):
 *  - `Content-Type: application/json` (else 415 `unsupported_media_type`): an HTML form or a
 *    `text/plain` fetch can be sent cross-site without a CORS preflight, a JSON one cannot;
 *  - an `Origin`, when present, that is this listener's own (else 403 `origin_mismatch`), and no
 *    `Sec-Fetch-Site` other than same-origin (another port of the same host is same-site, and
 *    SameSite=Strict cookies go there too). The CLI sends neither header, and authenticates with
 *    its Bearer token, which a browser never adds on its own.
 * `formPaths` (the login form) take a classic form post instead of JSON, but then need an Origin,
 * and it must match: browsers send one with every POST.
 */
export function mutationGuard(formPaths: ReadonlySet<string>): MiddlewareHandler {
  return async (c, next) => {
    if (!MUTATING.has(c.req.method)) return next();
    const origin = c.req.header('origin');
    const host = c.req.header('host') ?? new URL(c.req.url).host;
    const site = c.req.header('sec-fetch-site');
    if ((origin !== undefined && !originMatchesHost(origin, host)) || (site !== undefined && site !== 'same-origin' && site !== 'none')) {
      return adminError(c, 403, 'origin_mismatch', 'cross-origin request refused: the admin API takes requests from its own origin only');
    }
    const type = c.req.header('content-type');
    if (isJsonContentType(type)) return next();
    if (c.req.method === 'POST' && formPaths.has(c.req.path) && /^application\/x-www-form-urlencoded\s*(;|$)/i.test(type?.trim() ?? '')) {
      if (origin === undefined) return adminError(c, 403, 'origin_mismatch', 'a form post needs an Origin header');
      return next();
    }
    return adminError(c, 415, 'unsupported_media_type', 'mutating requests need Content-Type: application/json');
  };
}

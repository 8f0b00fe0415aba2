import type { Context, MiddlewareHandler } from 'hono';
import { getCookie } from 'hono/cookie';
import type { IncomingMessage } from 'node:http';
import { PeerDelays, type PeerDelayOptions } from '../policy/peer-delay.js';
import type { Clock } from '../shared/clock.js';
import type { Logger } from '../shared/logger.js';
import { adminError } from './guards.js';
import { bearerToken, tokensEqual } from '../shared/bearer.js';
import { SESSION_COOKIE, SESSION_TTL_MS, issueSession, verifySession } from './token.js';

/** Why a request was refused: no credentials at all, or credentials that are wrong or expired. */
export type AuthFailure = 'missing' | 'invalid';

export interface AdminAuthDeps {
  /** The admin token; undefined or empty: no auth (the listener is then loopback only). */
  token: string | undefined;
  clock: Clock;
  logger: Logger;
  /** How a refused guess waits (tests pass one that records and resolves at once). */
  sleep?: (ms: number) => Promise<void>;
  peerDelay?: Partial<PeerDelayOptions>;
  /** Delayed 401s waiting at once, across peers; past it a penalized peer gets 429 without a check. */
  maxDelayed?: number;
}

const realSleep = (ms: number) => new Promise<void>((r) => setTimeout(r, ms).unref());

/** The peer's socket address; through app.request() there is none. */
export function peerOf(c: Context): string {
  return (c.env as { incoming?: IncomingMessage } | undefined)?.incoming?.socket?.remoteAddress ?? 'unknown';
}

/**
 * Token auth for the admin listener: `Authorization: Bearer <token>` or the session cookie the
 * login page sets. Failures are counted by reason (`failures()`, for metrics) and logged with the
 * peer and path, never the credential. Wrong credentials from one peer are slowed down
 * (policy/peer-delay.ts): the first is answered at once, further ones wait 250 ms doubling to 5 s.
 */
export class AdminAuth {
  readonly #token: string | undefined;
  readonly #deps: AdminAuthDeps;
  readonly #delays: PeerDelays;
  readonly #failures: Record<AuthFailure, number> = { missing: 0, invalid: 0 };
  readonly #maxDelayed: number;
  #delayed = 0;

  constructor(deps: AdminAuthDeps) {
    this.#token = deps.token ? deps.token : undefined;
    this.#deps = deps;
    this.#delays = new PeerDelays(deps.peerDelay);
    this.#maxDelayed = deps.maxDelayed ?? 256;
  }

  get enabled(): boolean {
    return this.#token !== undefined;
  }

  /** 401s answered so far, by reason. */
  failures(): Readonly<Record<AuthFailure, number>> {
    return { ...this.#failures };
  }

  /** Whether the request carries the token (Bearer) or a live session cookie. Missing: undefined. */
  #check(c: Context): boolean | undefined {
    const token = this.#token!;
    const authorization = c.req.header('authorization');
    if (authorization !== undefined) {
      const given = bearerToken(authorization);
      return given !== undefined && tokensEqual(given, token);
    }
    const session = getCookie(c, SESSION_COOKIE);
    if (session !== undefined) return verifySession(token, session, this.#deps.clock.now());
    return undefined;
  }

  /**
   * Refuses a request: counts it, logs it, and for wrong credentials waits out the peer's delay
   * first. A browser asking for a page without credentials is sent to the login page instead.
   */
  async #refuse(c: Context, reason: AuthFailure, what: string): Promise<Response> {
    const peer = peerOf(c);
    this.#failures[reason]++;
    this.#deps.logger.warn({ peer, method: c.req.method, path: c.req.path, reason }, `admin auth failed: ${what}`);
    if (reason === 'invalid') {
      const ms = this.#delays.fail(peer, this.#deps.clock.now());
      // The bound on waiting answers is strict: a guess that would wait past it is refused at once
      // (a login reads its body before it checks, so several can get here together).
      if (ms > 0 && this.#delayed >= this.#maxDelayed) {
        return adminError(c, 429, 'too_many_attempts', 'too many failed logins; try again later', { 'retry-after': '5' });
      }
      if (ms > 0) {
        this.#delayed++;
        try {
          await (this.#deps.sleep ?? realSleep)(ms);
        } finally {
          this.#delayed--;
        }
      }
    }
    return adminError(c, 401, 'unauthorized', what, { 'www-authenticate': 'Bearer realm="hookbucket admin"' });
  }

  /**
   * The middleware: open when no token is set; else `/healthz` and the login page pass, and every
   * other route needs the token. Browsers (GET, Accept: text/html) without credentials are
   * redirected to /login rather than shown a JSON 401.
   */
  middleware(open: ReadonlySet<string>): MiddlewareHandler {
    return async (c, next) => {
      if (!this.enabled || open.has(c.req.path)) return next();
      const peer = peerOf(c);
      if (this.#delays.penalized(peer, this.#deps.clock.now()) && this.#delayed >= this.#maxDelayed) {
        return adminError(c, 429, 'too_many_attempts', 'too many failed logins; try again later', { 'retry-after': '5' });
      }
      const ok = this.#check(c);
      if (ok === true) {
        this.#delays.succeed(peer);
        return next();
      }
      if (ok === undefined && c.req.method === 'GET' && /\btext\/html\b/.test(c.req.header('accept') ?? '')) {
        return c.redirect('/login', 303);
      }
      return this.#refuse(
        c,
        ok === undefined ? 'missing' : 'invalid',
        ok === undefined
          ? 'this admin route needs the admin token (Authorization: Bearer <token>, or log in at /login)'
          : 'wrong admin token or expired session',
      );
    };
  }

  /**
   * POST /login: a form post (`token=…`, after mutationGuard checked its Origin) or JSON
   * `{"token": "…"}`. Right: the session cookie, then 303 to / for the form and 204 for JSON.
   */
  async login(c: Context): Promise<Response> {
    if (!this.enabled)
      return adminError(c, 404, 'not_found', 'no admin token is set: the admin listener is open on loopback, nothing to log in to');
    const peer = peerOf(c);
    if (this.#delays.penalized(peer, this.#deps.clock.now()) && this.#delayed >= this.#maxDelayed) {
      return adminError(c, 429, 'too_many_attempts', 'too many failed logins; try again later', { 'retry-after': '5' });
    }
    const form = !/^application\/json/i.test(c.req.header('content-type') ?? '');
    let given: unknown;
    try {
      given = form ? (await c.req.parseBody()).token : ((await c.req.json()) as { token?: unknown } | null)?.token;
    } catch {
      given = undefined;
    }
    if (typeof given !== 'string' || given === '') return this.#refuse(c, 'missing', 'no token given');
    if (!tokensEqual(given, this.#token!)) return this.#refuse(c, 'invalid', 'wrong admin token');
    this.#delays.succeed(peer);
    c.header('set-cookie', this.#cookie(c, issueSession(this.#token!, this.#deps.clock.now()), SESSION_TTL_MS / 1000));
    return form ? c.redirect('/', 303) : c.body(null, 204);
  }

  /** POST /logout: expires the cookie in this browser (the session itself is stateless; changing the token ends them all). */
  logout(c: Context): Response {
    c.header('set-cookie', this.#cookie(c, '', 0));
    return /^application\/json/i.test(c.req.header('content-type') ?? '') ? c.body(null, 204) : c.redirect('/login', 303);
  }

  /** HttpOnly (no script reads it), SameSite=Strict (no cross-site request carries it), Secure when served over TLS. */
  #cookie(c: Context, value: string, maxAgeS: number): string {
    const tls =
      new URL(c.req.url).protocol === 'https:' || c.req.header('x-forwarded-proto')?.split(',')[0]?.trim().toLowerCase() === 'https';
    return `${SESSION_COOKIE}=${value}; Path=/; Max-Age=${maxAgeS}; HttpOnly; SameSite=Strict${tls ? '; Secure' : ''}`;
  }
}

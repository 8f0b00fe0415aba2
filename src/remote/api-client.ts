/**
 * The CLI's HTTP client for a remote server's admin API (`--api`): undici, never following a
 * redirect, the token sent as `Authorization: Bearer` and never printed. The API's error body
 * `{error, code}` becomes an AppError with the same code, so the exit codes are those of a local
 * run; a connection failure is `api_unreachable`.
 */
import { Agent, request, type Dispatcher } from 'undici';
import { AppError, type ErrorCode } from '../shared/errors.js';
import { redactUrl } from '../policy/redact.js';

export interface ApiTarget {
  /** The admin listener's base URL, e.g. http://127.0.0.1:8788 (the API is under /api). */
  url: string;
  /** HOOKBUCKET_ADMIN_TOKEN; empty: none sent. */
  token: string;
}

export type Query = Record<string, string | string[] | undefined>;

const CONNECT_TIMEOUT_MS = 10_000;
/** A response's headers must arrive within this (a slow stats read on the server answers 503 first). */
const HEADERS_TIMEOUT_MS = 60_000;

/** Checks and normalises a --api URL: http(s) only, no path beyond `/`, no query. */
export function parseApiUrl(raw: string): string {
  let u: URL;
  try {
    u = new URL(raw);
  } catch {
    throw new AppError('usage', `--api: not a URL: ${raw} (e.g. http://127.0.0.1:8788)`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new AppError('usage', `--api: ${u.protocol} is not http: or https:`);
  if (u.username || u.password) throw new AppError('usage', '--api: put the token in HOOKBUCKET_ADMIN_TOKEN, not in the URL');
  if (u.search || u.hash) throw new AppError('usage', '--api: the URL takes no query or fragment');
  return `${u.origin}${u.pathname.replace(/\/+$/, '')}`;
}

/**
 * Every answer of the admin listener carries its security headers (frame-ancestors 'none'); the
 * ingest port's 404 (or a stranger's) does not, and must not read as "bucket not found".
 */
function fromAdmin(res: Dispatcher.ResponseData): boolean {
  const csp = res.headers['content-security-policy'];
  return typeof csp === 'string' && csp.includes("frame-ancestors 'none'");
}

export class ApiClient {
  readonly base: string;
  private readonly token: string;
  private readonly dispatcher: Dispatcher;

  constructor(target: ApiTarget, dispatcher?: Dispatcher) {
    this.base = parseApiUrl(target.url);
    this.token = target.token;
    this.dispatcher =
      dispatcher ?? new Agent({ connect: { timeout: CONNECT_TIMEOUT_MS }, headersTimeout: HEADERS_TIMEOUT_MS, bodyTimeout: 0 });
  }

  /** The URL of an API path with its query (repeated keys for arrays). */
  url(path: string, query: Query = {}): string {
    const qs = new URLSearchParams();
    for (const [k, v] of Object.entries(query)) {
      if (v === undefined) continue;
      for (const one of Array.isArray(v) ? v : [v]) qs.append(k, one);
    }
    const s = qs.toString();
    return `${this.base}/api${path}${s ? `?${s}` : ''}`;
  }

  /** Sends a request; a non-2xx answer throws (as AppError) unless its status is in `accept`. */
  async send(
    method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE',
    path: string,
    options: { query?: Query; body?: unknown; accept?: number[]; headers?: Record<string, string>; signal?: AbortSignal } = {},
  ): Promise<Dispatcher.ResponseData> {
    const headers: Record<string, string> = { accept: 'application/json', ...options.headers };
    if (this.token !== '') headers.authorization = `Bearer ${this.token}`;
    // The admin listener takes a mutating request only as JSON (no CORS preflight skipped).
    let body: string | undefined;
    if (method !== 'GET') {
      headers['content-type'] = 'application/json';
      body = JSON.stringify(options.body ?? {});
    }
    const url = this.url(path, options.query);
    let res: Dispatcher.ResponseData;
    try {
      // undici's request() follows no redirect (no redirect interceptor is composed in).
      res = await request(url, {
        method,
        headers,
        body,
        dispatcher: this.dispatcher,
        ...(options.signal ? { signal: options.signal } : {}),
      });
    } catch (e) {
      if (options.signal?.aborted) throw e;
      const code = (e as { code?: unknown }).code;
      throw new AppError(
        'api_unreachable',
        `cannot reach the API at ${redactUrl(this.base)}: ${(e as Error).message}${typeof code === 'string' ? ` (${code})` : ''}`,
        { cause: e },
      );
    }
    if (res.statusCode >= 200 && res.statusCode < 300) return res;
    if (options.accept?.includes(res.statusCode) && fromAdmin(res)) return res;
    throw await this.errorOf(res, method, path);
  }

  /** GET (or another method) and parse the JSON answer. */
  // biome-ignore lint/suspicious/noExplicitAny: the caller names the shape it reads from the server's JSON
  async json<T = any>(
    method: 'GET' | 'POST' | 'PUT' | 'PATCH' | 'DELETE',
    path: string,
    options: Parameters<ApiClient['send']>[2] = {},
  ): Promise<{ status: number; body: T }> {
    const res = await this.send(method, path, options);
    const text = await res.body.text();
    try {
      return { status: res.statusCode, body: JSON.parse(text) as T };
    } catch {
      throw new AppError(
        'api_error',
        `${method} ${path}: the answer is not JSON (is ${redactUrl(this.base)} a hookbucket admin listener?)`,
      );
    }
  }

  private async errorOf(res: Dispatcher.ResponseData, method: string, path: string): Promise<AppError> {
    const status = res.statusCode;
    let parsed: { error?: unknown; code?: unknown; bucket?: unknown } | undefined;
    try {
      parsed = JSON.parse(await res.body.text()) as { error?: unknown; code?: unknown; bucket?: unknown };
    } catch {
      parsed = undefined;
    }
    if (status === 401) {
      const why = this.token === '' ? 'HOOKBUCKET_ADMIN_TOKEN is not set' : 'the token in HOOKBUCKET_ADMIN_TOKEN was refused';
      return new AppError('unauthorized', `the API at ${redactUrl(this.base)} needs its admin token (401): ${why}`);
    }
    if (status >= 300 && status < 400) {
      return new AppError(
        'api_error',
        `${method} ${path}: the server answered a redirect (${status}); redirects are not followed: give --api the admin listener's own URL`,
      );
    }
    if (!fromAdmin(res)) {
      return new AppError(
        'api_error',
        `${method} ${path}: ${redactUrl(this.base)} answered ${status} and is not a hookbucket admin listener (the admin port is --admin-port, default 8788; the ingest port has no API)`,
      );
    }
    if (parsed && typeof parsed.code === 'string' && typeof parsed.error === 'string') {
      // `bucket <name> not found` (bucketNotFound): the name, for the CLI's "did you mean" (src/cli/context.ts).
      const bucket = parsed.code === 'not_found' ? /^bucket (\S+) not found$/.exec(parsed.error)?.[1] : undefined;
      return new AppError(parsed.code as ErrorCode, parsed.error, bucket !== undefined ? { bucket } : {});
    }
    return new AppError(
      'api_error',
      `${method} ${path}: the server answered ${status} without the API's error body (is ${redactUrl(this.base)} a hookbucket admin listener?)`,
    );
  }

  async close(): Promise<void> {
    await this.dispatcher.close();
  }

  /** Ends every connection now, requests in flight too (close waits for them): after Ctrl-C. */
  async destroy(): Promise<void> {
    await this.dispatcher.destroy();
  }
}

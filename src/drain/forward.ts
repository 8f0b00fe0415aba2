/**
 * One delivery attempt over HTTP. `forward()` never throws: it returns the response (status,
 * headers, the first 4 KiB of the body) or a transport error sorted into a class, and the worker
 * classifies it (classify.ts). The request is rebuilt byte for byte from the stored capture:
 *
 * - method and body bytes as stored;
 * - the stored header list in its order, case and repeats, minus host, content-length, the
 *   hop-by-hop set (RFC 9110 §7.6.1) and expect, which undici sets or refuses itself;
 * - the sub-path appended to the destination without its dot-segments, so it never climbs above the
 *   destination's path (src/policy/forward-path.ts; `--forward-raw-path` appends it as stored), and
 *   the raw query as stored: undici gets `{ origin, path }`, never a URL string it would normalise.
 *
 * Redirects are never followed (undici's `request` does not follow them without the redirect
 * interceptor, which is not installed), and there is no retry interceptor: retries live in the
 * database.
 */
import { EventEmitter } from 'node:events';
import { Agent, type Dispatcher } from 'undici';
import type { ErrorClass } from '../policy/classify.js';
import type { ForwardTarget } from '../policy/forward-target.js';
import { keepsForwardHeader, originalHeaderName } from '../policy/resign.js';
import { DESTINATION_REFUSED, type DestinationGuard } from './destination-guard.js';

/** Bytes of the response body kept as evidence; the rest is not read. */
export const RESPONSE_EXCERPT_BYTES = 4096;

export const HOOKBUCKET_HEADERS = ['x-hookbucket-request-id', 'x-hookbucket-delivery-generation', 'x-hookbucket-attempt'] as const;
/**
 * Headers that describe one connection, not the message (RFC 9110 §7.6.1), those undici sets
 * itself, and the x-hookbucket-* headers forwardHeaders sets.
 */
const ALWAYS_DROPPED: ReadonlySet<string> = new Set([
  ...['host', 'content-length', 'connection', 'keep-alive', 'te', 'trailer', 'transfer-encoding', 'upgrade', 'expect'],
  ...HOOKBUCKET_HEADERS,
]);

export interface ForwardMeta {
  requestId: string;
  generation: number;
  attempt: number;
}

/** What a provider-ready bucket adds to an attempt (src/policy/resign.ts decides it). */
export interface ProviderHeaders {
  /** hookbucket's Standard Webhooks headers (src/verify/sign.ts), as a flat list; absent: not re-signed. */
  signature?: readonly string[];
  /** `x-hookbucket-verified`: the scheme the request was verified with; absent or null: no header. */
  verified?: string | null;
}

/**
 * The flat header list to send: the stored list filtered as above (plus the headers `Connection`
 * names, every stored `x-hookbucket-*` header, and any stored header a bucket `--forward-header`
 * replaces), then our three headers, then the bucket's forward headers. The whole `x-hookbucket-`
 * namespace is ours: a sender cannot pass a header in it through to the consumer, so none it
 * forges (an `x-hookbucket-verified`, say) reaches the consumer as if hookbucket had set it.
 *
 * A re-signed attempt (`provider.signature`) forwards the stored `webhook-*` headers (a Standard
 * Webhooks sender's own) as `x-hookbucket-original-<name>`, in place, even when a bucket forward
 * header has the name (src/policy/resign.ts originalHeaderName), so that no `webhook-*` header is
 * sent twice and none is lost; the signature headers follow ours, and a bucket forward header named
 * like one of them is left out. `provider.verified` adds `x-hookbucket-verified` after our three.
 */
export function forwardHeaders(
  rawHeaders: readonly string[],
  meta: ForwardMeta,
  extra: ReadonlyArray<readonly [string, string]> = [],
  provider: ProviderHeaders = {},
): string[] {
  const signed = provider.signature !== undefined;
  // The fixed set covers most requests. Names from `extra` (replaced) and from `Connection`
  // (hop-by-hop, dropped whatever their name) go in sets of their own: a re-signed attempt renames
  // a stored webhook-* header instead of letting a forward header replace it.
  let replaced: Set<string> | undefined;
  let hop: Set<string> | undefined;
  for (const [name] of extra) if (!signed || keepsForwardHeader(name)) (replaced ??= new Set()).add(name.toLowerCase());
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() === 'connection') {
      for (const token of rawHeaders[i + 1]!.split(',')) if (token.trim() !== '') (hop ??= new Set()).add(token.trim().toLowerCase());
    }
  }
  const out: string[] = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    const lower = name.toLowerCase();
    if (ALWAYS_DROPPED.has(lower) || hop?.has(lower) || lower.startsWith('proxy-') || lower.startsWith('x-hookbucket-')) continue;
    const original = signed ? originalHeaderName(name) : null;
    if (original !== null) out.push(original, rawHeaders[i + 1]!);
    else if (!replaced?.has(lower)) out.push(name, rawHeaders[i + 1]!);
  }
  out.push(
    'x-hookbucket-request-id',
    meta.requestId,
    'x-hookbucket-delivery-generation',
    String(meta.generation),
    'x-hookbucket-attempt',
    String(meta.attempt),
  );
  if (provider.verified !== undefined && provider.verified !== null) out.push('x-hookbucket-verified', provider.verified);
  if (signed) out.push(...provider.signature!);
  for (const [name, value] of extra) if (!signed || keepsForwardHeader(name)) out.push(name, value);
  return out;
}

const TLS_CODES = new Set([
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'SELF_SIGNED_CERT_IN_CHAIN',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
  'CERT_REVOKED',
  'CERT_UNTRUSTED',
  'CERT_REJECTED',
  'HOSTNAME_MISMATCH',
  'EPROTO',
]);

/**
 * A transport error's class, from its code (or its cause's: undici wraps socket errors). Pure, so
 * the table is tested without sockets.
 */
export function errorClassOf(code: string | undefined): ErrorClass {
  if (code === undefined) return 'network';
  // undici validates method, path and headers before connecting: nothing was sent, and the same
  // request would be refused again.
  if (code === 'UND_ERR_INVALID_ARG') return 'unsendable';
  // The destinations setting refused the address (destination-guard.ts): nothing was sent.
  if (code === DESTINATION_REFUSED) return 'destination_refused';
  if (code === 'ECONNREFUSED') return 'refused';
  if (code === 'ECONNRESET' || code === 'EPIPE' || code === 'UND_ERR_SOCKET' || code === 'ECONNABORTED') return 'reset';
  if (code === 'ENOTFOUND' || code === 'EAI_AGAIN' || code === 'EAI_FAIL' || code === 'EAI_NONAME' || code === 'EAI_NODATA') return 'dns';
  if (code === 'ETIMEDOUT' || code === 'UND_ERR_CONNECT_TIMEOUT' || code === 'UND_ERR_HEADERS_TIMEOUT' || code === 'UND_ERR_BODY_TIMEOUT')
    return 'timeout';
  if (TLS_CODES.has(code) || code.startsWith('ERR_TLS_') || code.startsWith('ERR_SSL_') || code.startsWith('CERT_')) return 'tls';
  return 'network';
}

function codeOf(e: unknown): string | undefined {
  let cur: unknown = e;
  // The most specific code wins: undici's SocketError wraps ECONNRESET, fetch-style errors wrap more.
  const codes: string[] = [];
  for (let depth = 0; cur && depth < 4; depth++) {
    const c = (cur as { code?: unknown }).code;
    if (typeof c === 'string') codes.push(c);
    cur = (cur as { cause?: unknown }).cause;
  }
  return codes.find((c) => errorClassOf(c) !== 'network') ?? codes[0];
}

/**
 * Aborts every attempt in flight at once (shutdown). An attempt registers a plain function here
 * instead of an 'abort' listener on an AbortSignal: EventTarget listeners and one AbortController
 * per attempt cost about 10 µs of CPU per delivery (bench:drain profile), this costs a Set entry.
 */
export class Aborter {
  readonly #attempts = new Set<() => void>();
  #aborted = false;

  get aborted(): boolean {
    return this.#aborted;
  }

  abort(): void {
    this.#aborted = true;
    for (const fn of [...this.#attempts]) {
      try {
        fn();
      } catch {
        // one attempt's abort failing must not keep the others running
      }
    }
  }

  /** Registers an attempt's abort; returns its unregistration. */
  add(fn: () => void): () => void {
    this.#attempts.add(fn);
    return () => this.#attempts.delete(fn);
  }
}

export interface ForwardRequest {
  target: ForwardTarget;
  method: string;
  headers: string[];
  body: Buffer;
  timeoutMs: number;
  /** Aborts the attempt (shutdown); the result is then `{ kind: 'error', errorClass: 'network', aborted: true }`. */
  aborter?: Aborter;
}

export type ForwardResult =
  | {
      kind: 'response';
      status: number;
      headers: string[];
      body: Buffer;
      truncated: boolean;
      /** Set when the connection failed after the status line (the status still decides). */
      bodyError?: string;
      durationMs: number;
    }
  | { kind: 'error'; errorClass: ErrorClass; message: string; code: string | undefined; aborted: boolean; durationMs: number };

function flattenHeaders(h: Record<string, string | string[] | undefined>): string[] {
  const out: string[] = [];
  for (const [name, value] of Object.entries(h)) {
    if (value === undefined) continue;
    for (const v of Array.isArray(value) ? value : [value]) out.push(name, v);
  }
  return out;
}

/**
 * A pooled keep-alive dispatcher for deliveries. No retry or redirect interceptor: a 3xx comes back
 * as a 3xx, and a failed attempt is retried by the schedule, from the database.
 */
export function createDeliveryAgent(options: { connections?: number; destinations?: DestinationGuard } = {}): Agent {
  // HTTP/1.1 only (undici's default, allowH2 off): forward() hands undici an EventEmitter as the
  // abort signal, which its HTTP/1 client accepts and node:http2 would not.
  const connect = { timeout: 10_000 }; // 10s
  return new Agent({
    keepAliveTimeout: 4_000, // 4s: under Node's 5 s server default, so we close first
    keepAliveMaxTimeout: 60_000,
    connections: options.connections ?? 128,
    // The destinations setting is judged on every new connection (destination-guard.ts).
    connect: options.destinations ? options.destinations.connector(connect) : connect,
  });
}

/** What undici reads of a signal: `aborted`, `reason` (the error it fails with) and the 'abort' event. */
class AttemptSignal extends EventEmitter {
  aborted = false;
  reason: Error | undefined;
}

interface Excerpt {
  body: Buffer;
  truncated: boolean;
  error?: unknown;
}

/**
 * The first RESPONSE_EXCERPT_BYTES of a response body, read with stream events (an async iterator
 * per response costs more). A longer body is cut and its stream destroyed: a 50 MB answer costs us
 * 4 KiB and a closed connection, not 50 MB.
 */
function readExcerpt(body: Dispatcher.ResponseData['body']): Promise<Excerpt> {
  return new Promise((resolve) => {
    const chunks: Buffer[] = [];
    let kept = 0;
    const finish = (e: Excerpt) => {
      body.off('data', onData);
      body.off('end', onEnd);
      body.off('error', onError);
      body.off('close', onClose);
      if (e.truncated || e.error !== undefined) {
        body.on('error', () => undefined); // destroy() may still emit; nobody else listens
        body.destroy();
      }
      resolve(e);
    };
    const onData = (chunk: Buffer) => {
      const room = RESPONSE_EXCERPT_BYTES - kept;
      if (chunk.length > room) {
        chunks.push(chunk.subarray(0, room));
        kept += room;
        finish({ body: Buffer.concat(chunks), truncated: true });
        return;
      }
      chunks.push(chunk);
      kept += chunk.length;
    };
    const onEnd = () => finish({ body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks), truncated: false });
    const onError = (e: unknown) => finish({ body: Buffer.concat(chunks), truncated: false, error: e });
    // undici ends a body with 'end' or 'error'; a bare 'close' would otherwise leave the attempt
    // hanging until its lease ran out.
    const onClose = () => onError(new Error('response body closed before its end'));
    body.on('data', onData);
    body.once('end', onEnd);
    body.once('error', onError);
    body.once('close', onClose);
  });
}

export async function forward(
  dispatcher: Dispatcher,
  req: ForwardRequest,
  now: () => number = performance.now.bind(performance),
): Promise<ForwardResult> {
  const started = now();
  // One emitter per attempt, fired by the timeout or by the aborter (shutdown). undici takes an
  // EventEmitter as the signal; an AbortController would cost more than the rest of this function.
  const signal = new AttemptSignal();
  let abortedBy: 'timeout' | 'caller' | undefined;
  const abort = (by: 'timeout' | 'caller') => {
    if (abortedBy !== undefined) return;
    abortedBy = by;
    signal.aborted = true;
    signal.reason = new Error(by === 'timeout' ? 'attempt timed out' : 'attempt aborted');
    signal.emit('abort');
  };
  const timer = setTimeout(abort, req.timeoutMs, 'timeout');
  const unregister = req.aborter?.add(() => abort('caller'));
  try {
    if (req.aborter?.aborted) abort('caller');
    if (abortedBy !== undefined) throw signal.reason;
    const res = await dispatcher.request({
      origin: req.target.origin,
      path: req.target.path,
      method: req.method as Dispatcher.HttpMethod,
      headers: req.headers,
      // GET/HEAD with no stored body go without one (and without content-length: 0).
      body: req.body.length === 0 && (req.method === 'GET' || req.method === 'HEAD') ? null : req.body,
      headersTimeout: req.timeoutMs,
      bodyTimeout: req.timeoutMs,
      signal,
    });
    const excerpt = await readExcerpt(res.body);
    const e = excerpt.error;
    return {
      kind: 'response',
      status: res.statusCode,
      headers: flattenHeaders(res.headers),
      body: excerpt.body,
      truncated: excerpt.truncated,
      ...(e !== undefined ? { bodyError: `${codeOf(e) ?? 'error'}: ${(e as Error).message}` } : {}),
      durationMs: Math.round(now() - started),
    };
  } catch (e) {
    const aborted = abortedBy === 'caller';
    const code = codeOf(e);
    const errorClass = abortedBy === 'timeout' ? 'timeout' : errorClassOf(code);
    return {
      kind: 'error',
      errorClass,
      message: (e as Error).message ?? String(e),
      code,
      aborted,
      durationMs: Math.round(now() - started),
    };
  } finally {
    clearTimeout(timer);
    unregister?.();
  }
}

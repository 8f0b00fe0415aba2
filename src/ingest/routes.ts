import type { IncomingMessage } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Clock } from '../shared/clock.js';
import { AppError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import type { Logger } from '../shared/logger.js';
import { storageErrorCode } from '../store/storage-error.js';
import type { Bucket, IngestSink, Store } from '../store/store.js';
import { parseIngestTarget } from './bucket-name.js';
import { answeredByServer, discardBody, readBody } from './capture.js';
import {
  headerBytes,
  InflightBudget,
  MAX_HEADER_BYTES,
  MAX_HEADER_COUNT,
  MAX_REQUEST_LINE,
  REFUSED_METHODS,
  repeatedHost,
  unsupportedTransferEncoding,
} from './limits.js';

export type Env = { Bindings: HttpBindings };

export interface IngestDeps {
  store: Pick<Store, 'resolveBucket'>;
  sink: IngestSink;
  clock: Clock;
  logger: Logger;
  /** `spoolDir`: where bodies without a Content-Length go once past 1 MiB; without it they stay in memory. */
  config: { trustProxy: boolean; maxInflightBytes: number; spoolDir?: string };
}

/** Seconds a client should wait before retrying after a 503, by cause. */
const RETRY_AFTER_S: Record<string, number> = { store_busy: 1, overloaded: 1, storage_full: 30, storage_error: 5 };

export function errorBody(c: Context, status: number, code: string, message: string, headers?: Record<string, string>) {
  return c.json({ error: message, code }, status as ContentfulStatusCode, headers);
}

/** Whether a raw request target is an ingest URL; decided on the raw target, never a normalised one. */
export function isIngestTarget(rawTarget: string | undefined): boolean {
  if (!rawTarget) return false;
  if (rawTarget.startsWith('/b/')) return true;
  return /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*\/b\//i.test(rawTarget);
}

/**
 * `ANY /b/<bucket>[/<sub/path>]`: capture the whole request from the raw Node request (raw header
 * list, exact body bytes) and answer only once the row is committed. Returned as a handler that
 * createApp() calls for every raw `/b/` target before Hono routes on the normalised path, so
 * `/b/hooks/../x` is still an ingest request for bucket `hooks`.
 */
export function createIngestHandler(deps: IngestDeps): (c: Context<Env>) => Promise<Response> {
  const budget = new InflightBudget(deps.config.maxInflightBytes);

  return async (c) => {
    const incoming = c.env.incoming;
    const outgoing = c.env.outgoing;
    const refuse = (bucket: string, status: number, code: string, message: string, headers?: Record<string, string>) => {
      deps.sink.countRejection(bucket, code);
      if (!incoming.complete) outgoing.once('finish', () => discardBody(incoming));
      return errorBody(c, status, code, message, headers);
    };

    const method = incoming.method ?? 'GET';
    const rawTarget = incoming.url ?? '/';
    if (method.length + rawTarget.length + 10 > MAX_REQUEST_LINE) {
      return refuse('', 414, 'uri_too_long', `request line over ${MAX_REQUEST_LINE} bytes`);
    }
    const target = parseIngestTarget(rawTarget);
    if (!target) return refuse('', 404, 'unknown_bucket', 'no such bucket');
    let bucket: Bucket | undefined;
    try {
      bucket = await deps.store.resolveBucket(target.bucket);
    } catch (e) {
      const code = storageErrorCode(e);
      if (code === undefined) throw e;
      return refuse('', 503, code, 'storage cannot be read right now', retryAfter(code));
    }
    // Refusals are attributed only to buckets that exist, so hostile names add no rows.
    if (!bucket) return refuse('', 404, 'unknown_bucket', 'no such bucket');
    if (REFUSED_METHODS.has(method)) {
      return refuse(bucket.name, 405, 'method_not_allowed', `${method} is not accepted`);
    }
    const raw = incoming.rawHeaders;
    if (raw.length / 2 > MAX_HEADER_COUNT) {
      return refuse(bucket.name, 431, 'too_many_headers', `more than ${MAX_HEADER_COUNT} headers`);
    }
    if (headerBytes(raw) > MAX_HEADER_BYTES) {
      return refuse(bucket.name, 431, 'headers_too_large', `headers over ${MAX_HEADER_BYTES} bytes`);
    }
    if (repeatedHost(raw)) return refuse(bucket.name, 400, 'bad_request', 'more than one Host header');
    const te = unsupportedTransferEncoding(raw);
    if (te !== undefined) {
      return refuse(
        bucket.name,
        501,
        'unsupported_transfer_encoding',
        `Transfer-Encoding ${JSON.stringify(te)} is not supported; only chunked`,
      );
    }
    const health = deps.sink.accepting();
    if (!health.ok) {
      return refuse(bucket.name, 503, health.code, 'storage cannot take writes right now', retryAfter(health.code));
    }
    const declared = contentLength(incoming);
    if (declared !== undefined && declared > bucket.maxBody) {
      return refuse(bucket.name, 413, 'body_too_large', `body over the bucket limit of ${bucket.maxBody} bytes`);
    }
    // Bytes are reserved as they arrive (readBody), not as declared: a client that claims a large
    // Content-Length and then sends nothing holds no share of the budget.
    if (declared !== undefined && budget.used + declared > budget.limit) {
      return refuse(bucket.name, 503, 'overloaded', 'too many body bytes in flight', retryAfter('overloaded'));
    }
    let reading: ReturnType<typeof readBody> | undefined;
    try {
      // We answer 100 Continue ourselves, only after the checks above (server.ts routes checkContinue here),
      // and never to an HTTP/1.0 client, which cannot read an interim response (RFC 9110 §10.1.1: the
      // expectation in an HTTP/1.0 request is ignored).
      if (expectsContinue(incoming)) outgoing.writeContinue();
      const spoolDir = deps.config.spoolDir;
      reading = readBody(incoming, bucket.maxBody, budget, spoolDir === undefined ? undefined : { dir: spoolDir });
      const result = await reading.done;
      if (result.kind === 'too_large') {
        return refuse(bucket.name, 413, 'body_too_large', `body over the bucket limit of ${bucket.maxBody} bytes`);
      }
      if (result.kind === 'overloaded') {
        return refuse(bucket.name, 503, 'overloaded', 'too many body bytes in flight', retryAfter('overloaded'));
      }
      if (result.kind === 'storage') {
        deps.logger.warn({ bucket: bucket.name, code: result.code }, 'spooling a request body failed');
        return refuse(bucket.name, 503, result.code, 'storage cannot take writes right now', retryAfter(result.code));
      }
      if (result.kind === 'aborted') {
        // Parse errors and timeouts were answered and counted by the server's clientError handler;
        // a plain reset had nobody to answer, so it is counted here.
        if (!answeredByServer(incoming.socket)) deps.sink.countRejection(bucket.name, 'client_aborted');
        return errorBody(c, 400, 'client_aborted', 'request body incomplete');
      }
      // Chunked trailers arrive after the body, so they are judged here, by the header limits.
      const trailers = incoming.rawTrailers;
      if (trailers.length / 2 > MAX_HEADER_COUNT) {
        return refuse(bucket.name, 431, 'too_many_headers', `more than ${MAX_HEADER_COUNT} trailer fields`);
      }
      if (headerBytes(trailers) > MAX_HEADER_BYTES) {
        return refuse(bucket.name, 431, 'headers_too_large', `trailers over ${MAX_HEADER_BYTES} bytes`);
      }
      const id = newId();
      await deps.sink.submit(
        {
          id,
          bucket: bucket.name,
          receivedAt: deps.clock.now(),
          method,
          path: target.path,
          query: target.query,
          rawHeaders: raw,
          body: result.body,
          peer: peerOf(incoming, deps.config.trustProxy),
          rawTrailers: trailers,
        },
        { createDelivery: bucket.destination !== null },
      );
      return ack(id, bucket);
    } catch (e) {
      if (e instanceof AppError && e.code === 'unknown_bucket') return refuse('', 404, 'unknown_bucket', 'no such bucket');
      if (e instanceof AppError) {
        return refuse(bucket.name, 503, e.code, e.message, retryAfter(e.code));
      }
      throw e;
    } finally {
      if (reading) budget.release(reading.reserved());
    }
  };
}

/**
 * The answer for a committed request. Built with plain Response headers that cannot throw (the ack
 * content type is validated when the bucket is configured); 204 and 205 carry no body (RFC 9110).
 */
function ack(id: string, bucket: Bucket): Response {
  const headers = new Headers({ 'x-hookbucket-request-id': id });
  if (bucket.ackStatus === 204 || bucket.ackStatus === 205) return new Response(null, { status: bucket.ackStatus, headers });
  let body = JSON.stringify({ id });
  let type = 'application/json';
  if (bucket.ackBody !== null) {
    body = bucket.ackBody;
    type = 'text/plain; charset=utf-8';
  }
  try {
    headers.set('content-type', bucket.ackContentType ?? type);
  } catch {
    headers.set('content-type', type);
  }
  return new Response(body, { status: bucket.ackStatus, headers });
}

function retryAfter(code: string): Record<string, string> {
  return { 'retry-after': String(RETRY_AFTER_S[code] ?? 5) };
}

function expectsContinue(incoming: IncomingMessage): boolean {
  const http11 = incoming.httpVersionMajor > 1 || (incoming.httpVersionMajor === 1 && incoming.httpVersionMinor >= 1);
  return http11 && /100-continue/i.test(String(incoming.headers.expect ?? ''));
}

function contentLength(incoming: IncomingMessage): number | undefined {
  const v = incoming.headers['content-length'];
  if (v === undefined) return undefined;
  const n = Number(v);
  return Number.isSafeInteger(n) && n >= 0 ? n : undefined;
}

/** The peer: the socket's address, or with --trust-proxy the last X-Forwarded-For hop (the one our proxy added). */
export function peerOf(incoming: IncomingMessage, trustProxy: boolean): string | null {
  if (trustProxy) {
    const xff = incoming.headers['x-forwarded-for'];
    const last = (Array.isArray(xff) ? xff.join(',') : (xff ?? ''))
      .split(',')
      .map((s) => s.trim())
      .filter(Boolean)
      .pop();
    if (last) return last;
  }
  return incoming.socket?.remoteAddress ?? null;
}

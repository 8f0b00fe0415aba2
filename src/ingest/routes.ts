import type { IncomingMessage } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import { Hono, type Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import type { Clock } from '../shared/clock.js';
import { AppError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import type { Logger } from '../shared/logger.js';
import type { IngestSink, Store, StorageHealth } from '../store/store.js';
import { parseIngestTarget } from './bucket-name.js';
import { discardBody, readBody } from './capture.js';
import {
  headerBytes,
  InflightBudget,
  MAX_HEADER_BYTES,
  MAX_HEADER_COUNT,
  MAX_REQUEST_LINE,
  unsupportedTransferEncoding,
} from './limits.js';

export type Env = { Bindings: HttpBindings };

export interface IngestDeps {
  store: Pick<Store, 'resolveBucket'>;
  sink: IngestSink & { accepting(): StorageHealth };
  clock: Clock;
  logger: Logger;
  config: { trustProxy: boolean; maxInflightBytes: number };
}

/** Seconds a client should wait before retrying after a 503, by cause. */
const RETRY_AFTER_S: Record<string, number> = { store_busy: 1, overloaded: 1, storage_full: 30, storage_error: 5 };

export function errorBody(c: Context, status: number, code: string, message: string, headers?: Record<string, string>) {
  return c.json({ error: message, code }, status as ContentfulStatusCode, headers);
}

/**
 * `ANY /b/<bucket>[/<sub/path>]`: capture the whole request from the raw Node request (raw header
 * list, exact body bytes) and answer only once the row is committed.
 */
export function createIngestRoutes(deps: IngestDeps): Hono<Env> {
  const app = new Hono<Env>();
  const budget = new InflightBudget(deps.config.maxInflightBytes);

  app.all('/b/*', async (c) => {
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
    if (method === 'TRACE' || method === 'CONNECT') {
      return refuse(target.bucket, 405, 'method_not_allowed', `${method} is not accepted`);
    }
    const raw = incoming.rawHeaders;
    if (raw.length / 2 > MAX_HEADER_COUNT) {
      return refuse(target.bucket, 431, 'too_many_headers', `more than ${MAX_HEADER_COUNT} headers`);
    }
    if (headerBytes(raw) > MAX_HEADER_BYTES) {
      return refuse(target.bucket, 431, 'headers_too_large', `headers over ${MAX_HEADER_BYTES} bytes`);
    }
    const te = unsupportedTransferEncoding(raw);
    if (te !== undefined) {
      return refuse(target.bucket, 501, 'unsupported_transfer_encoding', `Transfer-Encoding ${JSON.stringify(te)} is not supported; only chunked`);
    }
    const bucket = await deps.store.resolveBucket(target.bucket);
    if (!bucket) return refuse('', 404, 'unknown_bucket', 'no such bucket');

    const health = deps.sink.accepting();
    if (!health.ok) {
      return refuse(bucket.name, 503, health.code, 'storage cannot take writes right now', retryAfter(health.code));
    }
    const declared = contentLength(incoming);
    if (declared !== undefined && declared > bucket.maxBody) {
      return refuse(bucket.name, 413, 'body_too_large', `body over the bucket limit of ${bucket.maxBody} bytes`);
    }
    const reserve = declared ?? 0;
    if (!budget.tryReserve(reserve)) {
      return refuse(bucket.name, 503, 'overloaded', 'too many body bytes in flight', retryAfter('overloaded'));
    }
    let reading: ReturnType<typeof readBody> | undefined;
    try {
      // We answer 100 Continue ourselves, only after the checks above (server.ts routes checkContinue here).
      if (/100-continue/i.test(String(incoming.headers.expect ?? ''))) outgoing.writeContinue();
      reading = readBody(incoming, bucket.maxBody, budget, reserve);
      const result = await reading.done;
      if (result.kind === 'too_large') {
        return refuse(bucket.name, 413, 'body_too_large', `body over the bucket limit of ${bucket.maxBody} bytes`);
      }
      if (result.kind === 'overloaded') {
        return refuse(bucket.name, 503, 'overloaded', 'too many body bytes in flight', retryAfter('overloaded'));
      }
      if (result.kind === 'aborted') {
        deps.sink.countRejection(bucket.name, 'client_aborted');
        return errorBody(c, 400, 'client_aborted', 'request body incomplete');
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
        },
        { createDelivery: bucket.destination !== null },
      );
      const headers: Record<string, string> = { 'x-hookbucket-request-id': id };
      if (bucket.ackBody !== null) {
        headers['content-type'] = bucket.ackContentType ?? 'text/plain; charset=utf-8';
        return c.body(bucket.ackBody, bucket.ackStatus as ContentfulStatusCode, headers);
      }
      if (bucket.ackContentType !== null) headers['content-type'] = bucket.ackContentType;
      return c.body(JSON.stringify({ id }), bucket.ackStatus as ContentfulStatusCode, {
        'content-type': 'application/json',
        ...headers,
      });
    } catch (e) {
      if (e instanceof AppError) {
        return refuse(bucket.name, 503, e.code, e.message, retryAfter(e.code));
      }
      throw e;
    } finally {
      budget.release(reading ? reading.reserved() : reserve);
    }
  });
  return app;
}

function retryAfter(code: string): Record<string, string> {
  return { 'retry-after': String(RETRY_AFTER_S[code] ?? 5) };
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
    const last = (Array.isArray(xff) ? xff.join(',') : xff ?? '').split(',').map((s) => s.trim()).filter(Boolean).pop();
    if (last) return last;
  }
  return incoming.socket?.remoteAddress ?? null;
}


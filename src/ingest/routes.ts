import type { IncomingMessage } from 'node:http';
import type { HttpBindings } from '@hono/node-server';
import type { Context } from 'hono';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { extractDedupKey } from '../policy/dedup.js';
import { detectHandshake, HANDSHAKE_MAX_BODY, type Handshake } from '../policy/handshake.js';
import {
  allowHeader,
  enabledHandshakes,
  type FailedVerdict,
  methodGate,
  rejectAnswer,
  retryAfterSeconds,
} from '../policy/provider-gate.js';
import { schemeText, type VerifyVerdict } from '../policy/verify.js';
import type { Clock } from '../shared/clock.js';
import { AppError } from '../shared/errors.js';
import { newId } from '../shared/ids.js';
import type { Logger } from '../shared/logger.js';
import { storageErrorCode } from '../store/storage-error.js';
import type { Bucket, CapturedRequest, Disposition, IngestSink, Store } from '../store/store.js';
import { startVerify, type VerifyStream } from '../verify/verify-stream.js';
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
import { ProviderGate, sameSecret } from './provider-gate.js';

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
  const gate = new ProviderGate(deps.logger);

  /**
   * Stores an answered handshake in the background: the answer never waits for the write lock or
   * the commit (Graph allows 10 s, Slack 3 s). A failed write is logged and counted by its code,
   * as a refused request is; it never becomes an unhandled rejection.
   */
  const storeHandshake = (captured: CapturedRequest) => {
    let writing: Promise<void>;
    try {
      writing = deps.sink.submit(captured, { createDelivery: false });
    } catch (e) {
      writing = Promise.reject(e);
    }
    writing.catch((e: unknown) => {
      const code = e instanceof AppError ? e.code : (storageErrorCode(e) ?? 'storage_error');
      deps.logger.warn({ bucket: captured.bucket, id: captured.id, code, err: e }, 'an answered handshake could not be stored');
      deps.sink.countRejection(captured.bucket, code);
    });
  };

  /**
   * The answer to a recognised handshake, or null when it is not answered because the signature it
   * needs did not verify: then it is judged like any unverified request (quarantined or rejected).
   */
  const answerHandshake = (h: Handshake, bucket: Bucket, captured: CapturedRequest, verdict: VerifyVerdict | null): Response | null => {
    const name = bucket.name;
    const plain = (status: number, code: string, message: string, headers?: Record<string, string>) => {
      deps.sink.countRejection(name, code);
      return Response.json({ error: message, code }, { status, headers });
    };
    const rate = gate.takeHandshake(name, captured.receivedAt);
    if (!rate.ok) {
      return plain(429, 'handshake_rate_limited', 'too many handshakes for this bucket', {
        'retry-after': String(retryAfterSeconds(captured.receivedAt, rate.availableAtMs)),
      });
    }
    if (h.kind === 'bad_token') return plain(400, h.reason, `the ${h.name} handshake token is not acceptable`);
    const verify = bucket.provider.verify;
    if (h.needs === 'signature') {
      if (verify === null) return plain(403, 'handshake_unverifiable', `the ${h.name} handshake needs a verify secret on the bucket`);
      if (verdict === null || verdict.result !== 'verified') return null;
    }
    let answer: { contentType: string; body: string; nosniff: boolean };
    if (h.kind === 'hmac') {
      const signed =
        verify === null
          ? null
          : gate.hmacHandshake(h, name, verify, {
              rawHeaders: captured.rawHeaders,
              body: captured.body,
              atMs: captured.receivedAt,
            });
      if (signed === null) return plain(403, 'handshake_unverifiable', `the ${h.name} handshake needs a verify secret on the bucket`);
      answer = { ...signed, nosniff: true };
    } else {
      if (h.needs === 'verify_token') {
        const expected = bucket.provider.verifyToken;
        if (expected === null || !sameSecret(h.verifyToken, expected)) {
          return plain(403, 'verify_token_mismatch', 'the verify token does not match');
        }
      }
      answer = { contentType: 'text/plain; charset=utf-8', body: h.token, nosniff: h.nosniff };
    }
    captured.disposition = 'handshake';
    if (verdict !== null) captured.verdict = verdict;
    storeHandshake(captured);
    const headers = new Headers({ 'content-type': answer.contentType, 'cache-control': 'no-store' });
    if (answer.nosniff) headers.set('x-content-type-options', 'nosniff');
    return new Response(answer.body, { status: 200, headers });
  };

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
    const provider = bucket.provider;
    const verify = provider.verify;
    const scheme = verify === null ? null : schemeText(verify.scheme);
    const handshakes = enabledHandshakes(scheme, provider.handshakes);
    const methods = methodGate(method, provider.methods, handshakes);
    const notAllowed = () =>
      refuse(bucket.name, 405, 'method_not_allowed', `${method} is not accepted by this bucket`, {
        allow: allowHeader(provider.methods ?? [], handshakes),
      });
    if (methods === 'refused') return notAllowed();
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
      // Verification starts from the headers; the body's chunks go into its HMACs as they arrive.
      const verifying = verify === null ? null : startVerify(verify.scheme, gate.keys(bucket.name, verify), raw);
      const stream: VerifyStream | null = verifying !== null && 'stream' in verifying ? verifying.stream : null;
      reading = readBody(
        incoming,
        bucket.maxBody,
        budget,
        spoolDir === undefined ? undefined : { dir: spoolDir },
        stream === null ? undefined : (chunk) => stream.update(chunk),
      );
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
      const body = result.body;
      const receivedAt = deps.clock.now();
      let verdict: VerifyVerdict | null = null;
      if (verify !== null && verifying !== null) {
        verdict = stream !== null ? stream.finish(receivedAt, verify.toleranceMs) : (verifying as { verdict: VerifyVerdict }).verdict;
      }
      const captured: CapturedRequest = {
        id: newId(),
        bucket: bucket.name,
        receivedAt,
        method,
        path: target.path,
        query: target.query,
        rawHeaders: raw,
        body,
        peer: peerOf(incoming, deps.config.trustProxy),
        rawTrailers: trailers,
      };

      const handshake =
        handshakes.length === 0
          ? null
          : detectHandshake(handshakes, { method, query: target.query ?? '', body: body.length <= HANDSHAKE_MAX_BODY ? body : null });
      if (handshake === null && methods === 'handshake_only') return notAllowed();
      if (handshake !== null) {
        const answered = answerHandshake(handshake, bucket, captured, verdict);
        if (answered !== null) return answered;
        // Not answered: a handshake that must be signed and is not; it is judged like any request below.
      }

      // Graph has no HMAC: its notifications carry the clientState set at subscription.
      if (provider.graphClientState !== null && (verdict === null || verdict.result === 'verified')) {
        const graph = gate.graphVerdict(body, provider.graphClientState);
        if (verdict === null || graph.result !== 'verified') verdict = graph;
      }
      let disposition: Disposition = 'accepted';
      if (verdict !== null && verdict.result !== 'verified') {
        if ((verify?.onInvalid ?? 'quarantine') === 'reject') {
          const answer = rejectAnswer(verdict as FailedVerdict);
          return refuse(bucket.name, 401, answer.code, answer.message);
        }
        disposition = 'quarantined';
      }
      if (verdict !== null) captured.verdict = verdict;
      if (disposition !== 'accepted') captured.disposition = disposition;
      // Only what verified registers a key, so a forged copy can never block the real event; the
      // store decides, inside the ingest commit, whether the key was seen within the window.
      if (provider.dedup !== null && disposition === 'accepted') {
        const key = extractDedupKey(provider.dedup.key, scheme, raw, body);
        if (key !== null) captured.dedup = { key, windowMs: provider.dedup.windowMs };
      }
      const id = captured.id;
      await deps.sink.submit(captured, { createDelivery: bucket.destination !== null && disposition === 'accepted' });
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

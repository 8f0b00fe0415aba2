import { createServer, type Server } from 'node:http';
import type { Socket } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import type { Hono } from 'hono';
import type { Env } from './ingest/routes.js';
import { markAnsweredByServer } from './ingest/capture.js';
import { MAX_HEADER_COUNT, MAX_REQUEST_LINE, NODE_MAX_HEADER_SIZE } from './ingest/limits.js';
import type { Logger } from './shared/logger.js';

export interface HttpServerOptions {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  logger: Logger;
  /** Count a refusal that never reached the app (parser errors, timeouts, CONNECT). */
  countRejection: (bucket: string, reason: string) => void;
}

/** Parser errors Node raises itself, mapped to our JSON answers. */
const clientErrors: Record<string, [status: number, code: string, message: string]> = {
  HPE_HEADER_OVERFLOW: [431, 'headers_too_large', 'request line and headers too large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'request_timeout', 'request not received in time'],
  ERR_HTTP_HEADERS_TIMEOUT: [408, 'request_timeout', 'headers not received in time'],
  HPE_INVALID_TRANSFER_ENCODING: [501, 'unsupported_transfer_encoding', 'unsupported Transfer-Encoding'],
};

function rawResponse(status: number, code: string, message: string): string {
  const body = JSON.stringify({ error: message, code });
  const reason = { 400: 'Bad Request', 405: 'Method Not Allowed', 408: 'Request Timeout', 414: 'URI Too Long', 431: 'Request Header Fields Too Large', 501: 'Not Implemented' }[status] ?? 'Error';
  return `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

/**
 * The Node HTTP server around the Hono app, with explicit limits: Node's parser limits sit above
 * ours (see ingest/limits.ts) and slowloris timeouts are checked every second instead of Node's
 * default 30 s `connectionsCheckingInterval`.
 */
export function createHttpServer(app: Hono<Env>, opts: HttpServerOptions): Server {
  const listener = getRequestListener(app.fetch, {
    // Ingest reads the raw request itself and discards refused bodies on its own terms.
    autoCleanupIncoming: false,
    // @hono/node-server could not build a Request (missing or bad Host, backslash in the path).
    errorHandler: () => {
      opts.countRejection('', 'bad_request');
      return new Response(JSON.stringify({ error: 'malformed request', code: 'bad_request' }), {
        status: 400,
        headers: { 'content-type': 'application/json' },
      });
    },
  });
  const server = createServer(
    {
      maxHeaderSize: NODE_MAX_HEADER_SIZE,
      headersTimeout: opts.headersTimeoutMs,
      requestTimeout: opts.requestTimeoutMs,
      connectionsCheckingInterval: 1000,
      keepAliveTimeout: 5000,
      // Node's own missing-Host 400 has an empty body; the adapter's check answers with our JSON.
      requireHostHeader: false,
    },
    listener,
  );
  // One more than we accept, so 2,001 headers are seen (and refused) rather than silently cut.
  server.maxHeadersCount = MAX_HEADER_COUNT + 1;
  // Expect: 100-continue goes to the app, which sends 100 only after its checks pass.
  server.on('checkContinue', (req, res) => void listener(req, res));
  // Without a listener Node drops CONNECT without an answer.
  server.on('connect', (_req, socket: Socket) => {
    opts.countRejection('', 'method_not_allowed');
    socket.end(rawResponse(405, 'method_not_allowed', 'CONNECT is not accepted'));
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    const inFlight = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    // The client went away (reset, or closed mid-message): nobody to answer. If the request had
    // reached the app, the app counts it as client_aborted.
    if (err.code === 'ECONNRESET' || err.code === 'HPE_INVALID_EOF_STATE' || !socket.writable || inFlight?.headersSent) {
      socket.destroy();
      return;
    }
    let [status, code, message] = clientErrors[err.code ?? ''] ?? [400, 'bad_request', 'malformed request'];
    // llhttp raises the same error for Content-Length with Transfer-Encoding (a smuggling shape: 400)
    // and for a Transfer-Encoding whose last coding is not chunked (501).
    const packet = (err as { rawPacket?: Buffer }).rawPacket?.toString('latin1') ?? '';
    if (err.code === 'HPE_INVALID_TRANSFER_ENCODING' && /\r?\ncontent-length\s*:/i.test(packet)) {
      [status, code, message] = [400, 'bad_request', 'Content-Length together with Transfer-Encoding'];
    }
    // A request line longer than Node's parser limit overflows before our 414 check can run.
    if (err.code === 'HPE_HEADER_OVERFLOW') {
      const eol = packet.indexOf('\n');
      if (eol === -1 || eol > MAX_REQUEST_LINE) [status, code, message] = [414, 'uri_too_long', `request line over ${MAX_REQUEST_LINE} bytes`];
    }
    opts.countRejection('', code);
    markAnsweredByServer(socket);
    socket.end(rawResponse(status, code, message));
  });
  // Node answers an unknown Expect with an empty 417 unless someone listens.
  server.on('checkExpectation', (_req, res) => {
    opts.countRejection('', 'expectation_failed');
    const body = JSON.stringify({ error: 'only Expect: 100-continue is supported', code: 'expectation_failed' });
    res.writeHead(417, { 'content-type': 'application/json', 'content-length': Buffer.byteLength(body), connection: 'close' });
    res.end(body);
  });
  return server;
}

import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import { getRequestListener } from '@hono/node-server';
import type { Hono } from 'hono';
import type { Env } from './ingest/routes.js';
import { answeredByServer, markAnsweredByServer } from './ingest/capture.js';
import { MAX_HEADER_COUNT, MAX_REQUEST_LINE, NODE_MAX_HEADER_SIZE, isRequestLine, lineHeadAfter } from './ingest/limits.js';
import type { Logger } from './shared/logger.js';

export interface HttpServerOptions {
  headersTimeoutMs: number;
  requestTimeoutMs: number;
  logger: Logger;
  /** Count a refusal that never reached the app (parser errors, timeouts, CONNECT). */
  countRejection: (bucket: string, reason: string) => void;
}

/**
 * After answering a parse error, how long the connection lingers (its further bytes read and
 * dropped) before it is destroyed: closing at once with unread bytes makes the kernel send a reset,
 * and a client still sending its request would lose our answer to it (RFC 9112 §9.6).
 */
const LINGER_MS = 1000; // 1 s

/** Parser errors Node raises itself, mapped to our JSON answers. */
const clientErrors: Record<string, [status: number, code: string, message: string]> = {
  HPE_HEADER_OVERFLOW: [431, 'headers_too_large', 'request line and headers too large'],
  ERR_HTTP_REQUEST_TIMEOUT: [408, 'request_timeout', 'request not received in time'],
  ERR_HTTP_HEADERS_TIMEOUT: [408, 'request_timeout', 'headers not received in time'],
  HPE_INVALID_TRANSFER_ENCODING: [501, 'unsupported_transfer_encoding', 'unsupported Transfer-Encoding'],
};

function rawResponse(status: number, code: string, message: string): string {
  const body = JSON.stringify({ error: message, code });
  const reason =
    {
      400: 'Bad Request',
      405: 'Method Not Allowed',
      408: 'Request Timeout',
      414: 'URI Too Long',
      431: 'Request Header Fields Too Large',
      501: 'Not Implemented',
    }[status] ?? 'Error';
  return `HTTP/1.1 ${status} ${reason}\r\ncontent-type: application/json\r\ncontent-length: ${Buffer.byteLength(body)}\r\nconnection: close\r\n\r\n${body}`;
}

/**
 * Requests in flight per connection. With pipelining, a parse error (garbage, a broken chunk, a
 * client that half-closes mid-request) can come after requests that were read whole and are still
 * being stored. Their answers go first, in order (RFC 9112 §9.3.2), and only then the error's:
 * answering the error at once put a 400 on the wire ahead of their 200s and closed the connection,
 * so stored requests were never acknowledged and the sender read the 400 as the first one's answer.
 */
class InFlight {
  readonly #requests = new WeakMap<Socket, Set<IncomingMessage>>();
  readonly #waiters = new WeakMap<Socket, () => void>();

  track(req: IncomingMessage, res: ServerResponse): void {
    const socket = req.socket;
    let set = this.#requests.get(socket);
    if (!set) this.#requests.set(socket, (set = new Set()));
    set.add(req);
    // 'close' comes when the answer is written, or when the connection goes first.
    res.once('close', () => {
      set.delete(req);
      const waiter = this.#waiters.get(socket);
      if (waiter && this.whole(socket) === 0) {
        this.#waiters.delete(socket);
        waiter();
      }
    });
  }

  /** Requests on the connection read whole and not answered yet. */
  whole(socket: Socket): number {
    let n = 0;
    for (const r of this.#requests.get(socket) ?? []) if (r.complete) n++;
    return n;
  }

  /** Runs fn once the connection's whole requests are answered (at once when there are none). */
  afterWhole(socket: Socket, fn: () => void): void {
    if (this.whole(socket) === 0) fn();
    else this.#waiters.set(socket, fn);
  }
}

/**
 * Whether Node's parser treats the request as a protocol switch: an `Upgrade` header and an
 * `upgrade` token in `Connection` (llhttp's own test). With no 'upgrade' listener Node hands it over
 * as a plain request, but its parser stops at the end of that message and drops whatever else that
 * socket read held: a request pipelined behind it was never answered, and bytes of a later read
 * were parsed from wherever they happened to start.
 */
export function isUpgradeRequest(rawHeaders: readonly string[]): boolean {
  let upgrade = false;
  let connectionUpgrade = false;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (name === 'upgrade') upgrade = true;
    else if (name === 'connection' && rawHeaders[i + 1]!.split(',').some((t) => t.trim().toLowerCase() === 'upgrade'))
      connectionUpgrade = true;
  }
  return upgrade && connectionUpgrade;
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
  const inFlight = new InFlight();
  // Connections that sent an Upgrade request: it is answered with `Connection: close` and the
  // connection ends after that answer, so what Node parses behind it (see isUpgradeRequest) is
  // neither stored nor answered; a client resends unanswered pipelined requests (RFC 9112 §9.3.2).
  const closing = new WeakSet<Socket>();
  const handle = (req: IncomingMessage, res: ServerResponse) => {
    if (closing.has(req.socket)) {
      req.resume();
      return;
    }
    if (isUpgradeRequest(req.rawHeaders)) {
      const socket = req.socket;
      closing.add(socket);
      res.setHeader('connection', 'close');
      // Node destroys a `Connection: close` socket as soon as the answer is flushed; bytes the client
      // pipelined behind it that arrive later would then draw a reset, which can discard our answer
      // before the client reads it. Half-close instead, and read and drop what comes for a while.
      socket.destroySoon = () => {
        socket.end();
        const linger = setTimeout(() => socket.destroy(), LINGER_MS);
        linger.unref();
        socket.once('close', () => clearTimeout(linger));
      };
    }
    inFlight.track(req, res);
    void listener(req, res);
  };
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
    handle,
  );
  // One more than we accept, so 2,001 headers are seen (and refused) rather than silently cut.
  server.maxHeadersCount = MAX_HEADER_COUNT + 1;
  // The first bytes of the line each connection is in the middle of, across reads: when Node's
  // header limit trips, they tell a request line (414) from a header or trailer line (431), which
  // the read that tripped it alone cannot (its line may have begun one or more reads earlier).
  // A 'data' listener makes Node feed its parser from JavaScript instead of straight from the
  // socket handle; the cost is one lastIndexOf per read.
  const lineHeads = new WeakMap<Socket, string>();
  server.on('connection', (socket: Socket) => {
    lineHeads.set(socket, '');
    socket.on('data', (chunk: Buffer) => lineHeads.set(socket, lineHeadAfter(lineHeads.get(socket) ?? '', chunk, chunk.length)));
  });
  // Expect: 100-continue goes to the app, which sends 100 only after its checks pass.
  server.on('checkContinue', handle);
  // Without a listener Node drops CONNECT without an answer.
  server.on('connect', (_req, socket: Socket) => {
    opts.countRejection('', 'method_not_allowed');
    socket.end(rawResponse(405, 'method_not_allowed', 'CONNECT is not accepted'));
  });
  server.on('clientError', (err: NodeJS.ErrnoException, socket: Socket) => {
    // Node's parser raises its error again for every chunk that arrives after the first; that
    // request was answered (or its answer is queued) already, and the linger below closes it.
    if (answeredByServer(socket) && err.code !== 'ECONNRESET') return;
    // The client went away: nobody to answer. If the request had reached the app, the app counts
    // it as client_aborted.
    if (err.code === 'ECONNRESET' || !socket.writable) {
      socket.destroy();
      return;
    }
    // The client closed its side mid-request: no answer is owed for that one (the app counts it as
    // client_aborted), but requests it sent whole before it (pipelined) still get theirs.
    if (err.code === 'HPE_INVALID_EOF_STATE') {
      inFlight.afterWhole(socket, () => socket.destroySoon());
      return;
    }
    const current = (socket as Socket & { _httpMessage?: { headersSent?: boolean } })._httpMessage;
    if (current?.headersSent && inFlight.whole(socket) === 0) {
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
    // A request line longer than Node's parser limit overflows before our 414 check can run; so do
    // headers (and trailers) far over ours. Which line it tripped in: the one in progress where the
    // parser stopped, its start found across earlier reads (Node's 'data' listener runs before ours,
    // so this read is not in lineHeads yet).
    if (err.code === 'HPE_HEADER_OVERFLOW') {
      const raw = (err as { rawPacket?: Buffer }).rawPacket ?? Buffer.alloc(0);
      const parsed = (err as { bytesParsed?: number }).bytesParsed;
      const at = typeof parsed === 'number' && parsed >= 0 && parsed <= raw.length ? parsed : raw.length;
      if (isRequestLine(lineHeadAfter(lineHeads.get(socket) ?? '', raw, at))) {
        [status, code, message] = [414, 'uri_too_long', `request line over ${MAX_REQUEST_LINE} bytes`];
      } else [status, code, message] = [431, 'headers_too_large', 'headers or trailers too large'];
    }
    opts.countRejection('', code);
    markAnsweredByServer(socket);
    inFlight.afterWhole(socket, () => {
      if (!socket.writable) return void socket.destroy();
      socket.end(rawResponse(status, code, message));
      const linger = setTimeout(() => socket.destroy(), LINGER_MS);
      linger.unref();
      socket.once('close', () => clearTimeout(linger));
    });
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

/**
 * The admin listener's Node server: a plain one. The ingest server's raw-request handling (parser
 * error answers, pipelining order, upgrade draining) exists to store what webhook senders send;
 * the admin side answers people and scrapers, so Node's own parser rules (Host required, its 400s)
 * are enough, with the same slowloris timeouts as ingest.
 */
export function createAdminHttpServer(app: Hono<Env>, opts: { headersTimeoutMs: number; requestTimeoutMs: number }): Server {
  const listener = getRequestListener(app.fetch, {
    errorHandler: () =>
      new Response(JSON.stringify({ error: 'malformed request', code: 'bad_request' }), {
        status: 400,
        headers: { 'content-type': 'application/json', 'x-content-type-options': 'nosniff' },
      }),
  });
  return createServer(
    {
      headersTimeout: opts.headersTimeoutMs,
      requestTimeout: opts.requestTimeoutMs,
      connectionsCheckingInterval: 1000,
      keepAliveTimeout: 5000,
    },
    listener,
  );
}

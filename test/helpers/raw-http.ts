import { connect } from 'node:net';

export interface RawResponse {
  status: number;
  headers: Record<string, string>;
  body: Buffer;
  /** Everything the server sent, for tests that look at several responses on one connection. */
  raw: Buffer;
  /** The server closed the connection. */
  closed: boolean;
}

/**
 * Sends exact bytes over a socket and collects what comes back until the server closes the
 * connection or one full response (Content-Length framed) has arrived. No HTTP client in between,
 * so header order, case, repeats and malformed shapes reach the server exactly as written.
 */
export function rawRequest(
  url: string,
  payload: Buffer | string | Array<Buffer | string>,
  opts: { waitForClose?: boolean; timeoutMs?: number; chunkDelayMs?: number } = {},
): Promise<RawResponse> {
  const u = new URL(url);
  const parts = Array.isArray(payload) ? payload : [payload];
  return new Promise((resolve, reject) => {
    const socket = connect(Number(u.port), u.hostname);
    const chunks: Buffer[] = [];
    let done = false;
    const timer = setTimeout(() => finish(true, new Error('raw request timed out')), opts.timeoutMs ?? 10_000);
    const finish = (closed: boolean, err?: Error) => {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      const raw = Buffer.concat(chunks);
      if (err && raw.length === 0) return reject(err);
      resolve({ ...parse(raw), raw, closed });
    };
    socket.on('data', (d) => {
      chunks.push(d);
      if (!opts.waitForClose && complete(Buffer.concat(chunks))) finish(false);
    });
    socket.on('error', () => finish(true));
    socket.on('close', () => finish(true));
    socket.on('connect', async () => {
      for (const p of parts) {
        if (socket.destroyed) return;
        socket.write(p);
        if (opts.chunkDelayMs) await new Promise((r) => setTimeout(r, opts.chunkDelayMs));
      }
    });
  });
}

function complete(raw: Buffer): boolean {
  let start = 0;
  // Skip interim 1xx responses.
  for (;;) {
    const end = raw.indexOf('\r\n\r\n', start);
    if (end === -1) return false;
    const head = raw.subarray(start, end).toString('latin1');
    if (/^HTTP\/1\.1 1\d\d/.test(head)) {
      start = end + 4;
      continue;
    }
    const m = /\r\ncontent-length:\s*(\d+)/i.exec(head);
    return m ? raw.length >= end + 4 + Number(m[1]) : false;
  }
}

function parse(raw: Buffer): Omit<RawResponse, 'raw' | 'closed'> {
  let start = 0;
  for (;;) {
    const end = raw.indexOf('\r\n\r\n', start);
    if (end === -1) return { status: 0, headers: {}, body: Buffer.alloc(0) };
    const head = raw.subarray(start, end).toString('latin1');
    const [statusLine, ...lines] = head.split('\r\n');
    const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(statusLine ?? '')?.[1] ?? 0);
    if (status >= 100 && status < 200) {
      start = end + 4;
      continue;
    }
    const headers: Record<string, string> = {};
    for (const l of lines) {
      const i = l.indexOf(':');
      headers[l.slice(0, i).toLowerCase()] = l.slice(i + 1).trim();
    }
    const len = headers['content-length'] !== undefined ? Number(headers['content-length']) : raw.length - end - 4;
    return { status, headers, body: raw.subarray(end + 4, end + 4 + len) };
  }
}

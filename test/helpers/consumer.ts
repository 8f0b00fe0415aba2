import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

export interface Received {
  method: string;
  /** The raw request target as it arrived (path and query, not normalised). */
  url: string;
  rawHeaders: string[];
  body: Buffer;
  at: number;
}

/** What the consumer answers to one request: a status (and headers, body), or a hook that writes the response itself. */
export type Script =
  | { status: number; headers?: Record<string, string>; body?: string | Buffer }
  | ((req: IncomingMessage, res: ServerResponse, body: Buffer) => void);

export interface Consumer {
  readonly url: string;
  readonly received: Received[];
  /** Answers for the next requests, in order; after they run out, `fallback` answers. */
  script(...answers: Script[]): void;
  fallback: Script;
  /** Resolves when `n` requests have arrived in all. */
  waitFor(n: number, timeoutMs?: number): Promise<void>;
  close(): Promise<void>;
}

/**
 * A real HTTP consumer on 127.0.0.1 port 0 that records every request exactly as it arrived
 * (raw target, raw header list, body bytes) and answers from a script.
 */
export async function startConsumer(fallback: Script = { status: 200, body: 'ok' }): Promise<Consumer> {
  const received: Received[] = [];
  const queue: Script[] = [];
  const waiters: Array<{ n: number; resolve: () => void }> = [];
  const c = {
    received,
    fallback,
    script: (...answers: Script[]) => void queue.push(...answers),
  } as Consumer & { fallback: Script };
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (d: Buffer) => chunks.push(d));
    req.on('end', () => {
      const body = Buffer.concat(chunks);
      received.push({ method: req.method!, url: req.url!, rawHeaders: req.rawHeaders, body, at: Date.now() });
      for (const w of waiters.filter((w) => received.length >= w.n)) w.resolve();
      const answer = queue.shift() ?? c.fallback;
      if (typeof answer === 'function') return answer(req, res, body);
      res.writeHead(answer.status, answer.headers ?? {});
      res.end(answer.body ?? '');
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as AddressInfo).port;
  return Object.assign(c, {
    url: `http://127.0.0.1:${port}`,
    waitFor(n: number, timeoutMs = 10_000) {
      if (received.length >= n) return Promise.resolve();
      return new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`consumer got ${received.length} of ${n} requests`)), timeoutMs);
        waiters.push({
          n,
          resolve: () => {
            clearTimeout(timer);
            resolve();
          },
        });
      });
    },
    close() {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  });
}

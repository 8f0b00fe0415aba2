/**
 * The consumer for bench/drain.ts: a plain node:http server on 127.0.0.1 that reads each request's
 * body, timestamps its arrival and answers 200. It runs as its own process (forked with an IPC
 * channel), so on a small machine it does not share an event loop with the worker or the baseline
 * it measures.
 *
 * Timestamps are epoch milliseconds with sub-millisecond precision (performance.timeOrigin +
 * performance.now()), so the bench can compare them with its own clock readings in test 3.
 *
 * IPC, bench → consumer (every message carries an `id`, echoed in the reply):
 * - `{ type: 'reset', notify: number[] }`: forget what arrived; send `{ type: 'reached', n, at }`
 *   when the n-th request of the new phase has arrived, for each n in `notify`;
 * - `{ type: 'dump' }`: reply with every arrival of the phase so far.
 * Ready: `{ type: 'ready', port }`. Stops when the IPC channel closes, or on SIGTERM/SIGINT.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';

export type ToConsumer = { id: number; type: 'reset'; notify: number[] } | { id: number; type: 'dump' };

export interface ConsumerDump {
  /** Arrival times (body fully read), epoch ms, in arrival order. */
  at: number[];
  /** The request's `x-bench-seq` header per arrival; -1 when absent. */
  seq: number[];
  /** Distinct `x-hookbucket-request-id` values: fewer than arrivals means a request came twice. */
  distinctIds: number;
}

export type FromConsumer =
  | { type: 'ready'; port: number }
  | { type: 'reached'; n: number; at: number }
  | { id: number; type: 'ok' }
  | ({ id: number; type: 'dump' } & ConsumerDump);

const epochMs = () => performance.timeOrigin + performance.now();

function main(): void {
  const send = (m: FromConsumer) => process.send?.(m);
  let at: number[] = [];
  let seq: number[] = [];
  let ids = new Set<string>();
  let notify = new Set<number>();

  const server = createServer((req, res) => {
    req.on('data', () => {}); // read and drop the body; only its arrival matters
    req.on('end', () => {
      const t = epochMs();
      at.push(t);
      const s = req.headers['x-bench-seq'];
      seq.push(typeof s === 'string' ? Number(s) : -1);
      const id = req.headers['x-hookbucket-request-id'];
      if (typeof id === 'string') ids.add(id);
      if (notify.has(at.length)) send({ type: 'reached', n: at.length, at: t });
      res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '2' });
      res.end('ok');
    });
  });

  process.on('message', (m: ToConsumer) => {
    if (m.type === 'reset') {
      at = [];
      seq = [];
      ids = new Set();
      notify = new Set(m.notify);
      send({ id: m.id, type: 'ok' });
    } else if (m.type === 'dump') {
      send({ id: m.id, type: 'dump', at, seq, distinctIds: ids.size });
    }
  });

  const stop = () => {
    server.closeAllConnections();
    server.close(() => process.exit(0));
  };
  process.once('disconnect', stop);
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);

  server.listen(0, '127.0.0.1', () => send({ type: 'ready', port: (server.address() as AddressInfo).port }));
}

if (process.send === undefined) {
  process.stderr.write('drain-consumer: start it from bench/drain.ts (it needs an IPC channel)\n');
  process.exitCode = 2;
} else {
  main();
}

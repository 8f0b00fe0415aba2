/**
 * The baseline for bench/ingest.ts: the same framework and adapter as the receiver (Hono on
 * @hono/node-server), doing everything a request needs except storing it. It reads the whole body,
 * because the receiver must, and answers 200 with a small JSON body like the receiver's ack.
 *
 * Run as its own process so it never shares an event loop with the load generator:
 *   node dist/bench/noop-server.js --port <p>
 * Listens on 127.0.0.1 only; stops on SIGTERM or SIGINT.
 */
import { pathToFileURL } from 'node:url';
import { parseArgs } from 'node:util';
import { serve } from '@hono/node-server';
import { Hono } from 'hono';

/** The Hono app of the baseline: `/healthz` for readiness, and every other route acks after reading the body. */
export function createNoopApp(): Hono {
  const app = new Hono();
  app.get('/healthz', (c) => c.json({ status: 'ok' }));
  app.all('*', async (c) => {
    const body = await c.req.arrayBuffer();
    return c.json({ ok: true, bytes: body.byteLength });
  });
  return app;
}

/** Parses `--port`, listens on 127.0.0.1 and stops on SIGTERM/SIGINT. */
function main(): void {
  const { values } = parseArgs({ options: { port: { type: 'string' } } });
  const port = Number(values.port);
  if (!Number.isInteger(port) || port < 1 || port > 65535) {
    process.stderr.write('usage: noop-server --port <1-65535>\n');
    process.exit(2);
  }

  const server = serve({ fetch: createNoopApp().fetch, port, hostname: '127.0.0.1' });
  server.once('error', (err) => {
    process.stderr.write(`noop server: ${err.message}\n`);
    process.exit(1);
  });

  for (const signal of ['SIGTERM', 'SIGINT'] as const) {
    process.once(signal, () => {
      server.close(() => process.exit(0));
      // The load generator has closed its sockets by now; drop any keep-alive leftovers at once
      // rather than waiting out Node's 5 s keepAliveTimeout.
      if ('closeAllConnections' in server) server.closeAllConnections();
    });
  }
}

// Run only when executed, so createNoopApp can be imported without starting a server.
if (process.argv[1] !== undefined && import.meta.url === pathToFileURL(process.argv[1]).href) main();

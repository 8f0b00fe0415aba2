import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { createServer as createNetServer, connect, type AddressInfo, type Server as NetServer } from 'node:net';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { Hono } from 'hono';
import { AdminAuth } from '../../src/admin/auth.js';
import { AdminLimits, takeStreamSlot, type StreamSlot } from '../../src/admin/limits.js';
import { createAdminApp } from '../../src/app.js';
import { loadConfig } from '../../src/config/config.js';
import { startServer } from '../../src/main.js';
import { hostAllowList } from '../../src/policy/admin-host.js';
import { createAdminHttpServer } from '../../src/server.js';
import { systemClock } from '../../src/shared/clock.js';
import { createLogger, silentLogger } from '../../src/shared/logger.js';
import { runCli, runInProcess } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/temp-dir.js';
import { until } from '../helpers/until.js';

const TOKEN = 'serve-test-token-0123456789abcdefghij';

/** A GET with an explicit Host header (fetch sets its own). */
function get(
  url: string,
  headers: Record<string, string> = {},
): Promise<{ status: number; headers: Record<string, string | string[] | undefined>; body: string }> {
  return new Promise((resolve, reject) => {
    const req = httpRequest(url, { headers, agent: false }, (res) => {
      let body = '';
      res.setEncoding('utf8');
      res.on('data', (d: string) => (body += d));
      res.on('end', () => resolve({ status: res.statusCode!, headers: res.headers, body }));
    });
    req.on('error', reject);
    req.end();
  });
}

/** A port something else holds, for the port_in_use cases. */
async function holdPort(): Promise<{ port: number; server: NetServer }> {
  const server = createNetServer();
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { port: (server.address() as AddressInfo).port, server };
}

function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', () => resolve(true));
  });
}

describe('serve with the admin listener (real sockets)', () => {
  let s: TestServer;
  before(async () => {
    s = await startTestServer();
  });
  after(async () => {
    await s.stop();
  });

  it('binds the admin listener on its own port (port 0 → a free one) and exposes it', () => {
    assert.ok(s.admin, 'admin is on by default');
    assert.ok(s.admin.port > 0 && s.admin.port !== s.port);
    assert.equal(s.admin.url, `http://127.0.0.1:${s.admin.port}`);
  });

  it('keeps admin routes off the ingest port: /api, /metrics, / and /login answer 404 there', async () => {
    for (const path of ['/', '/api', '/api/buckets', '/api/openapi.json', '/metrics', '/login', '/logout']) {
      const r = await get(`${s.url}${path}`);
      assert.equal(r.status, 404, path);
      assert.equal(JSON.parse(r.body).code, 'not_found', path);
    }
    const post = await fetch(`${s.url}/login`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(post.status, 404);
    assert.equal((await get(`${s.url}/healthz`)).status, 200, 'ingest keeps /healthz');
  });

  it('answers on the admin port: /healthz, the index, security headers, and 421 for a foreign Host', async () => {
    const base = s.admin!.url;
    assert.equal((await get(`${base}/healthz`)).status, 200);
    const index = await get(`${base}/`);
    assert.equal(index.status, 200);
    assert.match(index.body, /^<!doctype html>.*<h1>Buckets<\/h1>/s); // the inspector's overview
    assert.equal(index.headers['x-content-type-options'], 'nosniff');
    assert.match(String(index.headers['content-security-policy']), /frame-ancestors 'none'/);
    assert.equal((await get(`${base}/healthz`, { host: 'evil.example' })).status, 421);
    assert.equal((await get(`${base}/healthz`, { host: `localhost:${s.admin!.port}` })).status, 200);
    assert.equal((await get(`${base}/healthz`, { host: `localhost:${s.port}` })).status, 421, 'the ingest port is not the admin port');
    assert.equal((await get(`${base}/b/anything`)).status, 404, 'no ingest on the admin port');
  });

  it('mounts the JSON API and /metrics: a bucket made through the API takes a webhook on the ingest port, which both report', async () => {
    const base = s.admin!.url;
    const made = await fetch(`${base}/api/buckets`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', origin: base },
      body: JSON.stringify({ name: 'mounted' }),
    });
    assert.equal(made.status, 201, await made.clone().text());
    const stored = await fetch(`${s.url}/b/mounted/hook`, { method: 'POST', body: 'hello' });
    assert.equal(stored.status, 200);
    const { id } = (await stored.json()) as { id: string };
    const page = JSON.parse((await get(`${base}/api/buckets/mounted/requests`)).body) as { requests: Array<{ id: string }> };
    assert.deepEqual(
      page.requests.map((r) => r.id),
      [id],
    );
    const body = await fetch(`${base}/api/requests/${id}/body`);
    assert.equal(Buffer.from(await body.arrayBuffer()).toString(), 'hello');
    const metrics = await get(`${base}/metrics`);
    assert.equal(metrics.status, 200);
    assert.match(metrics.body, /^hookbucket_requests_received_total\{bucket="mounted"\} 1$/m);
    // No destination: nothing to deliver, but the bucket's gauges are there (read through the admin reader).
    assert.match(metrics.body, /^hookbucket_deliveries\{bucket="mounted",state="pending"\} 0$/m);
    assert.match(metrics.body, /^hookbucket_database_bytes \d+$/m);
  });
});

describe('serve with an admin token (real sockets)', () => {
  const t = tempDir();
  let running: Awaited<ReturnType<typeof startServer>>;
  const logs: string[] = [];
  before(async () => {
    const config = loadConfig(
      { HOOKBUCKET_ADMIN_TOKEN: TOKEN },
      {},
      { db: t.db, port: 0, host: '127.0.0.1', adminPort: 0, minFreeDisk: '0', worker: false, logLevel: 'info' },
    );
    const logger = createLogger(
      'info',
      new Writable({
        write: (chunk, _e, done) => {
          logs.push(String(chunk));
          done();
        },
      }),
    );
    running = await startServer(config, { clock: systemClock, logger });
  });
  after(async () => {
    await running.close(2000);
    t.remove();
  });

  it('logs the bound admin URL with the ingest one, and never the token', () => {
    const line = logs.map((l) => JSON.parse(l) as Record<string, unknown>).find((l) => l.msg === 'hookbucket listening');
    assert.equal(line?.admin, `http://127.0.0.1:${running.admin!.port}`);
    assert.ok(!logs.join('').includes(TOKEN));
  });

  it('needs the token: 401 without, 200 with Bearer, and the login cookie works over the wire', async () => {
    const base = running.admin!.url;
    const none = await get(`${base}/`);
    assert.equal(none.status, 401);
    assert.equal(JSON.parse(none.body).code, 'unauthorized');
    assert.equal((await get(`${base}/`, { authorization: `Bearer ${TOKEN}` })).status, 200);
    assert.equal((await get(`${base}/healthz`)).status, 200);
    const login = await fetch(`${base}/login`, {
      method: 'POST',
      redirect: 'manual',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: base },
      body: `token=${TOKEN}`,
    });
    assert.equal(login.status, 303);
    const cookie = login.headers.get('set-cookie')!.split(';')[0]!;
    assert.equal((await get(`${base}/`, { cookie })).status, 200);
    assert.deepEqual(running.admin!.auth.failures(), { missing: 1, invalid: 0 });
    for (const path of ['/api/buckets', '/api/openapi.json', '/metrics']) {
      assert.equal((await get(`${base}${path}`)).status, 401, path);
      assert.equal((await get(`${base}${path}`, { authorization: `Bearer ${TOKEN}` })).status, 200, path);
    }
    assert.equal((await get(`${base}/metrics`, { authorization: 'Bearer wrong-token-wrong-token-wrong-token' })).status, 401);
    const metrics = await get(`${base}/metrics`, { authorization: `Bearer ${TOKEN}` });
    assert.match(metrics.body, /^hookbucket_admin_auth_failures_total\{reason="missing"\} 4$/m);
    assert.match(metrics.body, /^hookbucket_admin_auth_failures_total\{reason="invalid"\} 1$/m);
  });
});

describe('serve refuses an unsafe or impossible admin setup (the CLI binary)', () => {
  const t = tempDir();
  after(() => t.remove());

  it('exits 2 for a non-loopback --admin-host without HOOKBUCKET_ADMIN_TOKEN, saying why, before opening anything', async () => {
    const r = await runCli(['--db', t.db, 'serve', '--port', '0', '--admin-host', '0.0.0.0'], { HOOKBUCKET_ADMIN_TOKEN: '' });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /^error \[usage\]: refusing to start the admin listener on 0\.0\.0\.0 without HOOKBUCKET_ADMIN_TOKEN/);
    const env = await runCli(['--db', t.db, 'serve', '--port', '0'], { HOOKBUCKET_ADMIN_HOST: '10.1.2.3', HOOKBUCKET_ADMIN_TOKEN: '' });
    assert.equal(env.code, 2, env.stderr);
    assert.match(env.stderr, /on 10\.1\.2\.3 without HOOKBUCKET_ADMIN_TOKEN/);
  });

  it('exits 2 for a token shorter than 32 characters, without echoing it', async () => {
    const short = 'short-token-0123456789';
    const r = await runCli(['--db', t.db, 'serve', '--port', '0', '--admin-port', '0'], { HOOKBUCKET_ADMIN_TOKEN: short });
    assert.equal(r.code, 2, r.stderr);
    assert.match(r.stderr, /^error \[invalid_option\]: HOOKBUCKET_ADMIN_TOKEN is 22 characters; use at least 32/);
    assert.ok(!r.stderr.includes(short));
  });

  it('exits 1 with port_in_use when the admin port is taken, and when the ingest port is', async () => {
    const held = await holdPort();
    try {
      const admin = await runCli(
        [
          '--db',
          t.db,
          'serve',
          '--host',
          '127.0.0.1',
          '--port',
          '0',
          '--admin-port',
          String(held.port),
          '--no-worker',
          '--min-free-disk',
          '0',
        ],
        { HOOKBUCKET_ADMIN_TOKEN: '' },
      );
      assert.equal(admin.code, 1, admin.stderr);
      assert.match(
        admin.stderr,
        new RegExp(
          `^error \\[port_in_use\\]: admin port 127\\.0\\.0\\.1:${held.port} is already in use; each receiver on a host needs its own --admin-port`,
        ),
      );
      const ingest = await runCli(
        [
          '--db',
          t.db,
          'serve',
          '--host',
          '127.0.0.1',
          '--port',
          String(held.port),
          '--admin-port',
          '0',
          '--no-worker',
          '--min-free-disk',
          '0',
        ],
        { HOOKBUCKET_ADMIN_TOKEN: '' },
      );
      assert.equal(ingest.code, 1, ingest.stderr);
      assert.match(
        ingest.stderr,
        new RegExp(`^error \\[port_in_use\\]: port ${held.port} is in use; pass --port or stop the other server\n`),
      );
    } finally {
      await new Promise<void>((r) => held.server.close(() => r()));
    }
  });

  it('serve --help shows the admin options and examples', async () => {
    const r = await runInProcess(['serve', '--help']);
    assert.equal(r.code, 0);
    for (const s of [
      '--admin-port <port>',
      '--admin-host <host>',
      '--admin-host-name <name>',
      '--no-admin',
      'HOOKBUCKET_ADMIN_TOKEN',
      'serve --admin-port 0',
      'docs/admin.md',
    ])
      assert.ok(r.stdout.includes(s), s);
  });
});

describe('the admin listener in startServer: --no-admin, and stop', () => {
  it('--no-admin starts no admin listener, even with a non-loopback admin host', async () => {
    const s = await startTestServer({ admin: false, adminHost: '0.0.0.0' });
    try {
      assert.equal(s.admin, undefined);
    } finally {
      await s.stop();
    }
  });

  it('closes the admin listener on stop', async () => {
    const s = await startTestServer();
    const port = s.admin!.port;
    assert.equal(await refused(port), false);
    await s.stop();
    assert.equal(await refused(port), true);
  });

  it('fails to start without leaving the ingest port bound when the admin port is taken', async () => {
    const held = await holdPort();
    const t = tempDir();
    try {
      const config = loadConfig(
        {},
        {},
        { db: t.db, port: 0, host: '127.0.0.1', adminPort: held.port, minFreeDisk: '0', worker: false, logLevel: 'silent' },
      );
      await assert.rejects(
        startServer(config, { clock: systemClock, logger: silentLogger }),
        (e: { code: string }) => e.code === 'port_in_use',
      );
    } finally {
      await new Promise<void>((r) => held.server.close(() => r()));
      t.remove();
    }
  });
});

describe('admin caps over a real socket', () => {
  const limits = new AdminLimits({ maxRequests: 2, maxStreams: 1 });
  const bodies: Array<ReadableStreamDefaultController<Uint8Array>> = [];
  const slots: StreamSlot[] = [];
  let base = '';
  let port: number | undefined;
  let server: ReturnType<typeof createAdminHttpServer>;
  before(async () => {
    const api = new Hono();
    // A streamed answer (an export): its request slot is held until the body is written.
    api.get(
      '/export',
      () =>
        new Response(new ReadableStream<Uint8Array>({ start: (c) => void bodies.push(c) }), {
          headers: { 'content-type': 'application/x-ndjson' },
        }),
    );
    api.get('/events', (c) => {
      const slot = takeStreamSlot(c);
      if (!slot) return c.json({ error: 'too many event streams', code: 'admin_busy' }, 503);
      slots.push(slot);
      const body = new ReadableStream<Uint8Array>({
        start: (ctl) => {
          ctl.enqueue(new TextEncoder().encode(': open\n\n'));
          slot.signal.addEventListener('abort', () => ctl.close());
        },
      });
      return new Response(body, { headers: { 'content-type': 'text/event-stream' } });
    });
    const app = createAdminApp({
      logger: silentLogger,
      auth: new AdminAuth({ token: undefined, clock: systemClock, logger: silentLogger }),
      limits,
      hosts: () => hostAllowList({ bindHost: '127.0.0.1', port, extraNames: [] }),
      health: () => ({ ok: true }),
      api,
    });
    server = createAdminHttpServer(app, { headersTimeoutMs: 10_000, requestTimeoutMs: 60_000 });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    port = (server.address() as AddressInfo).port;
    base = `http://127.0.0.1:${port}`;
  });
  after(async () => {
    server.closeAllConnections();
    await new Promise<void>((r) => server.close(() => r()));
  });

  it('holds a request slot until a streamed body is written, and frees it then', async () => {
    const a = await fetch(`${base}/api/export`);
    const b = await fetch(`${base}/api/export`);
    assert.equal(a.status, 200);
    assert.equal(b.status, 200);
    assert.equal(limits.requests, 2, 'headers are out, bodies are not: both slots held');
    const busy = await fetch(`${base}/healthz`);
    assert.equal(busy.status, 200, 'health is not capped');
    const third = await fetch(`${base}/api/export`);
    assert.equal(third.status, 503);
    assert.equal(((await third.json()) as { code: string }).code, 'admin_busy');
    for (const c of bodies.splice(0)) c.close();
    await a.text();
    await b.text();
    await until(() => limits.requests === 0, 'the slots to come back');
  });

  it('frees a stream slot when its client goes away, and ends streams on closeStreams()', async () => {
    const ac = new AbortController();
    const first = await fetch(`${base}/api/events`, { signal: ac.signal });
    assert.equal(first.status, 200);
    assert.equal(limits.streams, 1);
    assert.equal(limits.requests, 0);
    assert.equal((await fetch(`${base}/api/events`)).status, 503, 'one stream at most');
    ac.abort();
    await until(() => limits.streams === 0, 'the slot of the stream whose client left to come back');
    const second = await fetch(`${base}/api/events`);
    assert.equal(second.status, 200);
    limits.closeStreams();
    assert.match(await second.text(), /^: open/, 'the stream ended when the server stopped');
    await until(() => limits.streams === 0, 'the stopped stream to give its slot back');
  });
});

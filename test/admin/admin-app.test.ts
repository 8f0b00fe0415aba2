import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { describe, it } from 'node:test';
import { Hono } from 'hono';
import { AdminAuth } from '../../src/admin/auth.js';
import { cspNonce } from '../../src/admin/guards.js';
import { AdminLimits, takeStreamSlot, type StreamSlot } from '../../src/admin/limits.js';
import { issueSession, SESSION_TTL_MS } from '../../src/admin/token.js';
import { createAdminApp, ADMIN_BODY_LIMIT } from '../../src/app.js';
import { hostAllowList } from '../../src/policy/admin-host.js';
import { ManualClock } from '../../src/shared/clock.js';
import { createLogger } from '../../src/shared/logger.js';

const TOKEN = 'test-token-0123456789-abcdefghijklmnop';
const ORIGIN = 'http://127.0.0.1:8788';
const HOST = '127.0.0.1:8788';

/** Resolves once `n` calls of the returned `enter` have happened. */
function countdown(n: number): { enter: () => void; reached: Promise<void> } {
  let left = n;
  let done!: () => void;
  const reached = new Promise<void>((r) => (done = r));
  return {
    enter: () => {
      if (--left === 0) done();
    },
    reached,
  };
}

interface Built {
  app: Hono<any>;
  auth: AdminAuth;
  limits: AdminLimits;
  clock: ManualClock;
  logs: string[];
  sleeps: number[];
  slots: StreamSlot[];
  hold: { enter: () => void; reached: Promise<void>; release: () => void };
  req: (path: string, init?: RequestInit & { peer?: string }) => Promise<Response>;
}

function build(
  o: {
    token?: string;
    maxRequests?: number;
    maxStreams?: number;
    sleep?: (ms: number) => Promise<void>;
    maxDelayed?: number;
    holdN?: number;
    api?: boolean;
    metrics?: boolean;
  } = {},
): Built {
  const clock = new ManualClock();
  const logs: string[] = [];
  const logger = createLogger(
    'info',
    new Writable({
      write: (chunk, _e, done) => {
        logs.push(String(chunk));
        done();
      },
    }),
  );
  const sleeps: number[] = [];
  const auth = new AdminAuth({
    token: o.token,
    clock,
    logger,
    sleep: o.sleep ?? (async (ms) => void sleeps.push(ms)),
    ...(o.maxDelayed !== undefined ? { maxDelayed: o.maxDelayed } : {}),
  });
  const limits = new AdminLimits({ maxRequests: o.maxRequests ?? 32, maxStreams: o.maxStreams ?? 16 });
  const slots: StreamSlot[] = [];
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  const cd = countdown(o.holdN ?? 1);
  const api = new Hono();
  api.get('/things', (c) => c.json({ things: [] }));
  api.post('/things', async (c) => c.json(await c.req.json(), 201));
  api.patch('/things/x', (c) => c.json({ ok: true }));
  api.put('/things/x', (c) => c.json({ ok: true }));
  api.delete('/things/x', (c) => c.body(null, 204));
  api.get('/cors', (c) => c.json({}, 200, { 'access-control-allow-origin': '*', 'access-control-allow-credentials': 'true' }));
  api.get('/hold', async (c) => {
    cd.enter();
    await gate;
    return c.json({ held: true });
  });
  api.get('/events', (c) => {
    const slot = takeStreamSlot(c);
    if (!slot) return c.json({ error: 'too many event streams', code: 'admin_busy' }, 503);
    slots.push(slot);
    return c.body(': open\n\n', 200, { 'content-type': 'text/event-stream' });
  });
  api.get('/page', (c) => c.html(`<script nonce="${cspNonce(c)}">1</script>`));
  api.get('/raw', (c) =>
    c.body('<b>stored</b>', 200, { 'content-type': 'application/octet-stream', 'content-security-policy': 'sandbox' }),
  );
  api.get('/boom', () => {
    throw new Error('boom');
  });
  const app = createAdminApp({
    logger,
    auth,
    limits,
    hosts: () => hostAllowList({ bindHost: '127.0.0.1', port: 8788, extraNames: ['admin.example.com'] }),
    health: () => ({ ok: true }),
    ...(o.api === false ? {} : { api }),
    ...(o.metrics ? { metrics: (c) => c.text('# HELP x\n') } : {}),
  });
  const req = (path: string, init: RequestInit & { peer?: string } = {}) => {
    const headers = new Headers(init.headers);
    if (!headers.has('host')) headers.set('host', HOST);
    return Promise.resolve(
      app.request(path, { ...init, headers }, { incoming: { socket: { remoteAddress: init.peer ?? '10.9.9.9' } } } as never),
    );
  };
  return { app, auth, limits, clock, logs, sleeps, slots, hold: { ...cd, release }, req };
}

const bearer = (t = TOKEN) => ({ authorization: `Bearer ${t}` });
const json = { 'content-type': 'application/json' };

describe('admin auth', () => {
  it('without a token (loopback only) every route is open, and there is nothing to log in to', async () => {
    const b = build();
    assert.equal((await b.req('/api/things')).status, 200);
    const login = await b.req('/login');
    assert.equal(login.status, 303);
    assert.equal(login.headers.get('location'), '/');
    const post = await b.req('/login', { method: 'POST', headers: json, body: JSON.stringify({ token: 'x' }) });
    assert.equal(post.status, 404);
    assert.equal(b.auth.enabled, false);
  });

  it('with a token: 401 without credentials, 200 with the Bearer token, 401 with a wrong one; /healthz stays open', async () => {
    const b = build({ token: TOKEN, metrics: true });
    const none = await b.req('/api/things');
    assert.equal(none.status, 401);
    assert.deepEqual(await none.json(), {
      error: 'this admin route needs the admin token (Authorization: Bearer <token>, or log in at /login)',
      code: 'unauthorized',
    });
    assert.match(none.headers.get('www-authenticate') ?? '', /^Bearer /);
    assert.equal((await b.req('/api/things', { headers: bearer() })).status, 200);
    assert.equal(
      (await b.req('/api/things', { headers: { authorization: `bearer   ${TOKEN}  ` } })).status,
      200,
      'scheme case-insensitive, spaces around',
    );
    for (const authorization of [
      `Bearer ${TOKEN}x`,
      `Bearer ${TOKEN.slice(1)}`,
      `Basic ${Buffer.from(`u:${TOKEN}`).toString('base64')}`,
      'Bearer',
      TOKEN,
    ]) {
      const r = await b.req('/api/things', { headers: { authorization } });
      assert.equal(r.status, 401, authorization);
      assert.equal(((await r.json()) as { code: string }).code, 'unauthorized');
    }
    assert.equal((await b.req('/metrics')).status, 401, 'metrics needs the token too');
    assert.equal((await b.req('/metrics', { headers: bearer() })).status, 200);
    assert.equal((await b.req('/')).status, 401);
    assert.equal((await b.req('/healthz')).status, 200);
  });

  it('sends a browser without credentials to /login instead of a JSON 401', async () => {
    const b = build({ token: TOKEN });
    const r = await b.req('/', { headers: { accept: 'text/html,application/xhtml+xml' } });
    assert.equal(r.status, 303);
    assert.equal(r.headers.get('location'), '/login');
    const page = await b.req('/login', { headers: { accept: 'text/html' } });
    assert.equal(page.status, 200);
    const html = await page.text();
    assert.match(html, /<form method="post" action="\/login">/);
    assert.match(html, /type="password"/);
    assert.doesNotMatch(html, /<script/);
  });

  it('logs in with the form: an HttpOnly, SameSite=Strict session cookie that opens every route until it expires', async () => {
    const b = build({ token: TOKEN });
    const r = await b.req('/login', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: ORIGIN },
      body: new URLSearchParams({ token: TOKEN }).toString(),
    });
    assert.equal(r.status, 303);
    assert.equal(r.headers.get('location'), '/');
    const setCookie = r.headers.get('set-cookie') ?? '';
    assert.match(setCookie, /^hookbucket_session=v1\.\d+\.[A-Za-z0-9_-]{43}; Path=\/; Max-Age=43200; HttpOnly; SameSite=Strict$/);
    assert.doesNotMatch(setCookie, new RegExp(TOKEN), 'the cookie is not the token');
    const cookie = setCookie.split(';')[0]!;
    assert.equal((await b.req('/api/things', { headers: { cookie } })).status, 200);
    assert.equal((await b.req('/', { headers: { cookie } })).status, 200);
    // A second app with the same token (a restart, or another receiver) takes the same cookie.
    const other = build({ token: TOKEN });
    assert.equal((await other.req('/api/things', { headers: { cookie } })).status, 200);
    b.clock.advance(SESSION_TTL_MS);
    assert.equal((await b.req('/api/things', { headers: { cookie } })).status, 401, 'expired');
  });

  it('refuses a wrong, forged or foreign session cookie with 401', async () => {
    const b = build({ token: TOKEN });
    const now = b.clock.now();
    for (const value of [
      'nonsense',
      issueSession('another-token-of-enough-length-000000', now),
      issueSession(TOKEN, now).replace(/.$/, (ch) => (ch === 'A' ? 'B' : 'A')),
    ]) {
      const r = await b.req('/api/things', { headers: { cookie: `hookbucket_session=${value}` } });
      assert.equal(r.status, 401, value);
      assert.equal(((await r.json()) as { code: string }).code, 'unauthorized');
    }
    assert.equal((await b.req('/api/things', { headers: { cookie: `hookbucket_session=${issueSession(TOKEN, now)}` } })).status, 200);
  });

  it('logs in with JSON too (204 and the cookie), and answers a wrong token with 401: JSON for JSON, the form again for a form', async () => {
    const b = build({ token: TOKEN });
    const ok = await b.req('/login', { method: 'POST', headers: json, body: JSON.stringify({ token: TOKEN }) });
    assert.equal(ok.status, 204);
    assert.match(ok.headers.get('set-cookie') ?? '', /^hookbucket_session=/);
    const bad = await b.req('/login', { method: 'POST', headers: json, body: JSON.stringify({ token: 'wrong' }) });
    assert.equal(bad.status, 401);
    assert.equal(((await bad.json()) as { code: string }).code, 'unauthorized');
    assert.equal(bad.headers.get('set-cookie'), null);
    const form = await b.req('/login', {
      method: 'POST',
      headers: { 'content-type': 'application/x-www-form-urlencoded', origin: ORIGIN },
      body: 'token=wrong',
    });
    assert.equal(form.status, 401);
    assert.match(await form.text(), /Wrong token/);
    assert.equal((await b.req('/login', { method: 'POST', headers: json, body: '{' })).status, 401, 'unparsable body: no token given');
  });

  it('takes the login form only with a matching Origin (CSRF: browsers send Origin with every POST)', async () => {
    const b = build({ token: TOKEN });
    const form = { 'content-type': 'application/x-www-form-urlencoded' };
    const body = `token=${TOKEN}`;
    const noOrigin = await b.req('/login', { method: 'POST', headers: form, body });
    assert.equal(noOrigin.status, 403);
    assert.equal(((await noOrigin.json()) as { code: string }).code, 'origin_mismatch');
    assert.equal((await b.req('/login', { method: 'POST', headers: { ...form, origin: 'http://evil.example' }, body })).status, 403);
    assert.equal(
      (await b.req('/login', { method: 'POST', headers: { ...form, origin: 'http://127.0.0.1:8787' }, body })).status,
      403,
      'the ingest port is another origin',
    );
    assert.equal(
      (await b.req('/api/things', { method: 'POST', headers: { ...form, origin: ORIGIN }, body: 'a=1' })).status,
      415,
      'form posts are for /login and /logout only',
    );
  });

  it('logs out by expiring the cookie', async () => {
    const b = build({ token: TOKEN });
    const r = await b.req('/logout', { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', origin: ORIGIN } });
    assert.equal(r.status, 303);
    assert.equal(r.headers.get('location'), '/login');
    assert.match(r.headers.get('set-cookie') ?? '', /^hookbucket_session=; Path=\/; Max-Age=0; HttpOnly; SameSite=Strict$/);
  });

  it('marks the cookie Secure when the request came over TLS (a proxy in front says so)', async () => {
    const b = build({ token: TOKEN });
    const r = await b.req('/login', {
      method: 'POST',
      headers: { ...json, 'x-forwarded-proto': 'https' },
      body: JSON.stringify({ token: TOKEN }),
    });
    assert.match(r.headers.get('set-cookie') ?? '', /; Secure$/);
  });

  it('counts failures by reason and logs them with peer and path, never the token or the guess', async () => {
    const b = build({ token: TOKEN });
    await b.req('/api/things');
    await b.req('/api/things', { headers: bearer('guess-guess-guess-guess-guess-guess') });
    await b.req('/api/things', { headers: { cookie: 'hookbucket_session=v1.1.x' } });
    await b.req('/api/things', { headers: bearer() });
    assert.deepEqual(b.auth.failures(), { missing: 1, invalid: 2 });
    const text = b.logs.join('');
    assert.equal(b.logs.filter((l) => l.includes('admin auth failed')).length, 3);
    assert.match(text, /"peer":"10\.9\.9\.9"/);
    assert.match(text, /"path":"\/api\/things"/);
    assert.ok(!text.includes(TOKEN), 'no token in the log');
    assert.ok(!text.includes('guess-guess'), 'no guess in the log');
    assert.ok(!text.includes('v1.1.x'), 'no cookie in the log');
  });

  it('slows down repeated wrong credentials per peer (0, 250, 500 ms…), not a first typo, and forgets a peer that succeeds', async () => {
    const b = build({ token: TOKEN });
    const wrong = { headers: bearer('w'.repeat(40)), peer: '10.0.0.1' };
    for (let i = 0; i < 4; i++) assert.equal((await b.req('/api/things', wrong)).status, 401);
    assert.deepEqual(b.sleeps, [250, 500, 1000], 'the first failure waits nothing');
    await b.req('/api/things', { ...wrong, peer: '10.0.0.2' });
    assert.deepEqual(b.sleeps, [250, 500, 1000], 'another peer is not slowed by the first');
    await b.req('/api/things', { peer: '10.0.0.1' });
    assert.deepEqual(b.sleeps, [250, 500, 1000], 'missing credentials are not guesses: no wait');
    assert.equal((await b.req('/api/things', { headers: bearer(), peer: '10.0.0.1' })).status, 200);
    await b.req('/api/things', wrong);
    await b.req('/api/things', wrong);
    assert.deepEqual(b.sleeps, [250, 500, 1000, 250], 'after a success the count starts again');
    // A wrong login guess counts the same way.
    await b.req('/login', { method: 'POST', headers: json, body: JSON.stringify({ token: 'nope' }), peer: '10.0.0.1' });
    assert.deepEqual(b.sleeps, [250, 500, 1000, 250, 500]);
  });

  it('answers a penalized peer 429 without checking, while the delayed answers are at their bound', async () => {
    let wake!: () => void;
    const b = build({ token: TOKEN, maxDelayed: 1, sleep: () => new Promise<void>((r) => (wake = r)) });
    const wrong = { headers: bearer('w'.repeat(40)), peer: '10.0.0.1' };
    assert.equal((await b.req('/api/things', wrong)).status, 401);
    const delayed = b.req('/api/things', wrong); // waits in sleep: one delayed answer
    const r = await b.req('/api/things', { headers: bearer(), peer: '10.0.0.1' });
    assert.equal(r.status, 429);
    assert.equal(((await r.json()) as { code: string }).code, 'too_many_attempts');
    assert.equal((await b.req('/api/things', { headers: bearer(), peer: '10.0.0.2' })).status, 200, 'other peers are served');
    wake();
    assert.equal((await delayed).status, 401);
    assert.equal(
      (await b.req('/api/things', { headers: bearer(), peer: '10.0.0.1' })).status,
      200,
      'once nothing waits, the peer is checked again',
    );
  });

  it('keeps the bound on waiting answers for login guesses that arrive together, too', async () => {
    const wakes: Array<() => void> = [];
    const b = build({ token: TOKEN, maxDelayed: 1, sleep: () => new Promise<void>((r) => wakes.push(r)) });
    const guess = { method: 'POST', headers: json, body: JSON.stringify({ token: 'w'.repeat(40) }), peer: '10.0.0.1' };
    assert.equal((await b.req('/login', guess)).status, 401);
    // Both read their bodies before checking: whichever is second finds the one wait taken.
    const [x, y] = [b.req('/login', guess), b.req('/login', guess)];
    const second = await Promise.race([x, y]);
    assert.equal(second.status, 429);
    assert.equal(wakes.length, 1, 'one answer waits, not two');
    wakes[0]!();
    assert.deepEqual([(await x).status, (await y).status].sort(), [401, 429]);
  });
});

describe('admin Host allow-list', () => {
  it('refuses a Host not on the list with 421 host_not_allowed, /healthz and valid tokens included', async () => {
    const b = build({ token: TOKEN });
    for (const host of ['evil.example', 'evil.example:8788', '127.0.0.1:9999', 'localhost.evil.example:8788']) {
      for (const path of ['/healthz', '/api/things', '/login']) {
        const r = await b.req(path, { headers: { host, ...bearer() } });
        assert.equal(r.status, 421, `${host} ${path}`);
        assert.deepEqual(await r.json(), {
          error: 'this admin listener does not answer to that Host; add the name with --admin-host-name',
          code: 'host_not_allowed',
        });
      }
    }
    for (const host of ['127.0.0.1:8788', 'localhost:8788', 'localhost', '[::1]:8788', 'admin.example.com', 'ADMIN.example.com:8788']) {
      assert.equal((await b.req('/api/things', { headers: { host, ...bearer() } })).status, 200, host);
    }
  });

  it('uses the URL authority when there is no Host header (app.request)', async () => {
    const b = build();
    assert.equal((await b.app.request('http://evil.example/healthz')).status, 421);
    assert.equal((await b.app.request('http://localhost:8788/healthz')).status, 200);
  });
});

describe('admin mutating requests', () => {
  it('accept JSON without Origin (the CLI with its Bearer token) or with the admin origin', async () => {
    const b = build({ token: TOKEN });
    const body = JSON.stringify({ a: 1 });
    assert.equal((await b.req('/api/things', { method: 'POST', headers: { ...json, ...bearer() }, body })).status, 201);
    assert.equal(
      (
        await b.req('/api/things', {
          method: 'POST',
          headers: { 'content-type': 'application/json; charset=utf-8', origin: ORIGIN, ...bearer() },
          body,
        })
      ).status,
      201,
    );
    assert.equal(
      (
        await b.req('/api/things', {
          method: 'POST',
          headers: { ...json, host: 'localhost:8788', origin: 'http://localhost:8788', 'sec-fetch-site': 'same-origin', ...bearer() },
          body,
        })
      ).status,
      201,
    );
    assert.equal((await b.req('/api/things/x', { method: 'PATCH', headers: { ...json, ...bearer() }, body })).status, 200);
    assert.equal((await b.req('/api/things/x', { method: 'PUT', headers: { ...json, ...bearer() }, body })).status, 200);
    assert.equal((await b.req('/api/things/x', { method: 'DELETE', headers: { ...json, ...bearer() } })).status, 204);
  });

  it('refuse another Content-Type with 415 unsupported_media_type (a form or text/plain post skips the CORS preflight)', async () => {
    const b = build();
    for (const [method, type] of [
      ['POST', 'text/plain'],
      ['POST', undefined],
      ['POST', 'application/x-www-form-urlencoded'],
      ['POST', 'multipart/form-data; boundary=x'],
      ['POST', 'application/jsonx'],
      ['DELETE', undefined],
      ['PATCH', 'text/plain'],
      ['PUT', undefined],
    ] as const) {
      const r = await b.req(method === 'POST' ? '/api/things' : '/api/things/x', {
        method,
        headers: type ? { 'content-type': type } : {},
        body: method === 'DELETE' ? null : '{"a":1}',
      });
      assert.equal(r.status, 415, `${method} ${type}`);
      assert.equal(((await r.json()) as { code: string }).code, 'unsupported_media_type');
    }
  });

  it('refuse a foreign Origin or a cross-site fetch with 403 origin_mismatch, before auth', async () => {
    const b = build({ token: TOKEN });
    const body = '{}';
    for (const headers of <Array<Record<string, string>>>[
      { origin: 'http://evil.example' },
      { origin: 'null' },
      { origin: 'http://127.0.0.1:8787' },
      { origin: 'https://127.0.0.1:9999' },
      { origin: 'not a url' },
      { 'sec-fetch-site': 'same-site' },
      { 'sec-fetch-site': 'cross-site' },
      { origin: ORIGIN, 'sec-fetch-site': 'cross-site' },
    ]) {
      const r = await b.req('/api/things', { method: 'POST', headers: { ...json, ...headers }, body });
      assert.equal(r.status, 403, JSON.stringify(headers));
      assert.equal(((await r.json()) as { code: string }).code, 'origin_mismatch');
    }
    assert.deepEqual(b.auth.failures(), { missing: 0, invalid: 0 }, 'refused before auth looked');
  });

  it('leave reads alone: a GET with a foreign Origin is answered (CORS keeps its body from the other site)', async () => {
    const b = build();
    const r = await b.req('/api/things', { headers: { origin: 'http://evil.example' } });
    assert.equal(r.status, 200);
    assert.equal(r.headers.get('access-control-allow-origin'), null);
  });

  it('limit request bodies to 1 MiB (413 body_too_large)', async () => {
    const b = build();
    const r = await b.req('/api/things', { method: 'POST', headers: json, body: JSON.stringify({ a: 'x'.repeat(ADMIN_BODY_LIMIT) }) });
    assert.equal(r.status, 413);
    assert.equal(((await r.json()) as { code: string }).code, 'body_too_large');
  });
});

describe('admin response headers', () => {
  const csp =
    /^default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'$/;

  it('sets nosniff, a strict CSP with frame-ancestors none, and no CORS header on every answer', async () => {
    const b = build({ token: TOKEN, maxRequests: 1 });
    const answers: Array<[string, Response]> = [
      ['200', await b.req('/api/things', { headers: bearer() })],
      ['200 html', await b.req('/', { headers: bearer() })],
      ['401', await b.req('/api/things')],
      ['404', await b.req('/nope', { headers: bearer() })],
      ['421', await b.req('/api/things', { headers: { host: 'evil.example', ...bearer() } })],
      ['415', await b.req('/api/things', { method: 'POST', headers: bearer(), body: 'x' })],
      ['403', await b.req('/api/things', { method: 'POST', headers: { ...json, origin: 'http://evil.example' }, body: '{}' })],
      ['500', await b.req('/api/boom', { headers: bearer() })],
      ['healthz', await b.req('/healthz')],
      [
        'OPTIONS preflight',
        await b.req('/api/things', {
          method: 'OPTIONS',
          headers: { origin: 'http://evil.example', 'access-control-request-method': 'POST' },
        }),
      ],
      ['a route that set CORS headers', await b.req('/api/cors', { headers: bearer() })],
    ];
    for (const [what, r] of answers) {
      assert.equal(r.headers.get('x-content-type-options'), 'nosniff', what);
      assert.match(r.headers.get('content-security-policy') ?? '', csp, what);
      assert.equal(r.headers.get('x-frame-options'), 'DENY', what);
      assert.equal(r.headers.get('cache-control'), 'no-store', what);
      assert.deepEqual(
        [...r.headers.keys()].filter((k) => k.startsWith('access-control-')),
        [],
        what,
      );
    }
    assert.equal(answers.find(([w]) => w === '500')![1].status, 500);
    assert.deepEqual(await answers.find(([w]) => w === '500')![1].json(), { error: 'internal error', code: 'internal' });
  });

  it('adds a route nonce to script-src, and keeps a route own CSP (sandbox) with frame-ancestors none added', async () => {
    const b = build();
    const page = await b.req('/api/page');
    const nonce = /nonce="([^"]+)"/.exec(await page.text())![1]!;
    assert.ok(nonce.length >= 16);
    assert.match(
      page.headers.get('content-security-policy') ?? '',
      new RegExp(`script-src 'self' 'nonce-${nonce.replace(/[+/]/g, '\\$&')}';`),
    );
    const second = await b.req('/api/page');
    assert.notEqual(/nonce="([^"]+)"/.exec(await second.text())![1], nonce, 'a nonce per response');
    const raw = await b.req('/api/raw');
    assert.equal(raw.headers.get('content-security-policy'), "sandbox; frame-ancestors 'none'");
    assert.equal(raw.headers.get('x-content-type-options'), 'nosniff');
  });
});

describe('admin caps', () => {
  it('serves at most maxRequests at once: the next gets 503 admin_busy, /healthz still answers, and slots come back', async () => {
    const b = build({ maxRequests: 4, holdN: 4 });
    const held = [1, 2, 3, 4].map(() => b.req('/api/hold'));
    await b.hold.reached;
    assert.equal(b.limits.requests, 4);
    const busy = await b.req('/api/things');
    assert.equal(busy.status, 503);
    assert.equal(busy.headers.get('retry-after'), '1');
    assert.deepEqual(await busy.json(), { error: 'more than 4 admin requests at once; try again', code: 'admin_busy' });
    assert.equal((await b.req('/healthz')).status, 200, 'health is not capped');
    assert.equal(b.limits.refused, 1);
    b.hold.release();
    for (const r of await Promise.all(held)) assert.equal(r.status, 200);
    assert.equal(b.limits.requests, 0);
    assert.equal((await b.req('/api/things')).status, 200);
  });

  it('caps event streams separately: a stream trades its request slot for a stream slot; 503 past maxStreams; release frees one', async () => {
    const b = build({ maxRequests: 2, maxStreams: 2 });
    for (let i = 0; i < 2; i++) assert.equal((await b.req('/api/events')).status, 200);
    assert.equal(b.limits.streams, 2);
    assert.equal(b.limits.requests, 0, 'open streams hold no request slot');
    const third = await b.req('/api/events');
    assert.equal(third.status, 503);
    assert.equal(((await third.json()) as { code: string }).code, 'admin_busy');
    assert.equal((await b.req('/api/things')).status, 200, 'other routes are not starved by streams');
    b.slots[0]!.release();
    b.slots[0]!.release(); // twice is harmless
    assert.equal(b.limits.streams, 1);
    assert.equal((await b.req('/api/events')).status, 200);
    assert.equal(
      b.slots.some((s) => s.signal.aborted),
      false,
    );
    b.limits.closeStreams();
    assert.equal(
      b.slots.slice(1).every((s) => s.signal.aborted),
      true,
      'stopping aborts every open stream signal',
    );
  });

  it('gives a route outside the admin app an unlimited stream slot (sub-apps tested on their own)', async () => {
    const api = new Hono();
    api.get('/events', (c) => c.json({ slot: takeStreamSlot(c) !== undefined }));
    assert.deepEqual(await (await api.request('/events')).json(), { slot: true });
  });
});

describe('admin index and unknown routes', () => {
  it('/ says what exists (and that there is no inspector yet), linking only what is mounted', async () => {
    const withBoth = await (await build({ metrics: true }).req('/')).text();
    assert.match(withBoth, /no web inspector yet/);
    assert.match(withBoth, /href="\/api\/openapi.json"/);
    assert.match(withBoth, /href="\/metrics"/);
    const bare = await (await build({ api: false }).req('/')).text();
    assert.doesNotMatch(bare, /openapi|metrics/);
    const r = await build({ api: false }).req('/api/things');
    assert.equal(r.status, 404);
    assert.deepEqual(await r.json(), { error: 'no such admin route', code: 'not_found' });
  });
});

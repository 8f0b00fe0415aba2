import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { AdminAuth } from '../../src/admin/auth.js';
import { createAdminApp } from '../../src/app.js';
import type { StoreReads } from '../../src/api/store-reads.js';
import { hostAllowList } from '../../src/policy/admin-host.js';
import { ManualClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { createUiApp } from '../../src/ui/ui-app.js';
import { sparkPoints } from '../../src/ui/sparkline.js';
import { importsOf, sourceFiles } from '../helpers/imports.js';
import { tempDir } from '../helpers/temp-dir.js';

// The inspector's pages through app.request(), mounted in the admin app as serve mounts it, on a
// real SQLite file: what the HTML says and, as important, what it never contains.

describe('inspector pages (app.request)', () => {
  const t = tempDir();
  const clock = new ManualClock(Date.UTC(2026, 11, 5, 12, 2, 0));
  let store: SqliteStore;
  const calls = new Map<string, number>();
  let app: ReturnType<typeof createAdminApp>;
  const ids: Record<string, string> = {};

  /** The store as the reads, counting each method's calls. */
  const countingReads = (s: SqliteStore): StoreReads =>
    new Proxy(s, {
      get(target, prop, receiver) {
        const v = Reflect.get(target, prop, receiver) as unknown;
        if (typeof v !== 'function') return v;
        return (...args: unknown[]) => {
          calls.set(String(prop), (calls.get(String(prop)) ?? 0) + 1);
          return (v as (...a: unknown[]) => unknown).apply(target, args);
        };
      },
    }) as unknown as StoreReads;

  const get = async (path: string) => {
    const res = await app.request(`http://127.0.0.1:8788${path}`, { headers: { accept: 'text/html' } });
    return { status: res.status, headers: res.headers, html: await res.text() };
  };

  before(async () => {
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock });
    for (const name of ['alpha', 'bravo', 'charlie', 'delta', 'echo']) {
      await store.createBucket({ name, destination: `https://user:pa55@example.com/hook?token=t0k&x=1` });
    }
    const alpha = (await store.getBucket('alpha'))!;
    const imp = await store.openImporter();
    const [hostile, binary] = await imp.write(
      { name: alpha.name, createdAt: alpha.createdAt },
      [
        {
          method: 'POST',
          path: '/p<script>',
          query: 'api_key=zzz&q=1',
          rawHeaders: ['X-Evil', '<img src=x onerror=alert(1)>', 'Authorization', 'Bearer hunter2', 'X-Ansi', '\x1b[31mred'],
          body: Buffer.from('{"html":"<script>alert(1)</script>","secret":"s1","ansi":"\\u001b[2J"}'),
        },
        {
          method: 'PUT',
          path: '/bin',
          query: null,
          rawHeaders: ['Content-Type', 'application/octet-stream'],
          body: Buffer.from([0x00, 0xff, 0x3c, 0x73, 0x1b, 0x80]),
        },
      ],
      { createDelivery: true },
    );
    await imp.close();
    ids.hostile = hostile!;
    ids.binary = binary!;
    const auth = new AdminAuth({ token: '', clock, logger: silentLogger });
    const ui = createUiApp({ store, reads: countingReads(store), clock, logger: silentLogger, config: { overviewPageSize: 2 } });
    app = createAdminApp({
      logger: silentLogger,
      auth,
      hosts: () => hostAllowList({ bindHost: '127.0.0.1', port: 8788, extraNames: [] }),
      health: () => ({ ok: true }),
      ui,
    });
  });

  after(async () => {
    await store.close();
    t.remove();
  });

  it('overview: a page of buckets from a fixed number of reads, destinations redacted', async () => {
    calls.clear();
    const p1 = await get('/');
    assert.equal(p1.status, 200);
    assert.match(p1.html, /^<!doctype html>/);
    assert.equal((p1.html.match(/<tr><td><a href="\/buckets\//g) ?? []).length, 2);
    assert.match(p1.html, /href="\/buckets\/alpha"/);
    assert.match(p1.html, /href="\/\?after=bravo"/);
    assert.ok(!p1.html.includes('pa55') && !p1.html.includes('t0k'), 'credentials of the destination are not shown');
    assert.match(p1.html, /https:\/\/\[redacted\]@example\.com\/hook\?token=\[redacted\]&amp;x=1/);
    // Five buckets, and no read per bucket: one aggregate read of the page (counts, oldest waiting, sparkline).
    assert.deepEqual(Object.fromEntries(calls), { bucketOverview: 1 });
    assert.match(p1.html, /5 bucket\(s\)/);
    calls.clear();
    await get('/');
    assert.deepEqual(Object.fromEntries(calls), { bucketOverview: 1 });
    const p3 = await get('/?after=delta');
    assert.match(p3.html, /href="\/buckets\/echo"/);
    assert.ok(!p3.html.includes('?after='), 'the last page has no next link');
    // CSP from the admin app: nothing inline, no framing.
    const csp = p1.headers.get('content-security-policy') ?? '';
    assert.match(csp, /script-src 'self'(;|$)/);
    assert.match(csp, /frame-ancestors 'none'/);
    assert.ok(!csp.includes('unsafe-inline'));
    assert.equal(p1.headers.get('access-control-allow-origin'), null);
  });

  it('request page: stored markup and control bytes escaped, credentials redacted until revealed', async () => {
    const r = await get(`/requests/${ids.hostile}`);
    assert.equal(r.status, 200);
    assert.ok(
      !/<script>|<img/i.test(r.html.replace(/<script src="\/ui\/app\.js" defer=""><\/script>/, '')),
      'no stored markup reaches the page as markup',
    );
    assert.match(r.html, /&lt;img src=x onerror=alert\(1\)&gt;/);
    assert.match(r.html, /\/p&lt;script&gt;\?api_key=\[redacted\]&amp;q=1/);
    assert.match(r.html, /\\x1b\[31mred/);
    assert.ok(!r.html.includes('\x1b'), 'no raw ESC byte');
    assert.ok(!r.html.includes('hunter2') && !r.html.includes('"s1"'));
    assert.match(r.html, /&quot;html&quot;: &quot;&lt;script&gt;alert\(1\)&lt;\/script&gt;&quot;/);
    assert.match(r.html, /&quot;ansi&quot;: &quot;\\u001b\[2J&quot;/);
    assert.match(r.html, new RegExp(`href="/api/requests/${ids.hostile}/body"`));
    // Headers in the stored order.
    const order = [...r.html.matchAll(/<tr><th>([^<]*)<\/th><td>/g)].map((m) => m[1]);
    assert.deepEqual(order.slice(-3), ['X-Evil', 'Authorization', 'X-Ansi']);
    const shown = await get(`/requests/${ids.hostile}?reveal=1`);
    assert.match(shown.html, /Bearer hunter2/);
    assert.match(shown.html, /api_key=zzz/);
  });

  it('request page: a binary body in hex and base64', async () => {
    const r = await get(`/requests/${ids.binary}`);
    assert.match(r.html, /Binary \(not UTF-8\)/);
    assert.match(r.html, /00000000 {2}00 ff 3c 73 1b 80 {32}\.\.&lt;s\.\./);
    assert.match(r.html, new RegExp(Buffer.from([0x00, 0xff, 0x3c, 0x73, 0x1b, 0x80]).toString('base64').replace(/[+/]/g, '\\$&')));
  });

  it('bucket page: requests, a refused filter with the CLI message, and HTML 404s', async () => {
    const b = await get('/buckets/alpha?method=PUT');
    assert.equal(b.status, 200);
    assert.equal((b.html.match(/<a href="\/requests\//g) ?? []).length, 1);
    assert.match(b.html, /give up after 14 attempts/);
    const bad = await get('/buckets/alpha?since=yesterday');
    assert.equal(bad.status, 400);
    assert.match(bad.html, /since: a duration before now/);
    const none = await get('/buckets/nope');
    assert.equal(none.status, 404);
    assert.match(none.headers.get('content-type') ?? '', /text\/html/);
    assert.equal((await get('/requests/not-an-id')).status, 404);
    assert.equal((await get('/requests/01a243ac-8ccc-70ee-b64e-404eaa6a02fd')).status, 404);
  });

  it('serves the script and the stylesheet as same-origin files', async () => {
    const js = await get('/ui/app.js');
    assert.match(js.headers.get('content-type') ?? '', /^text\/javascript/);
    assert.ok(!js.html.includes('innerHTML'), 'the script never writes HTML');
    const css = await get('/ui/style.css');
    assert.match(css.headers.get('content-type') ?? '', /^text\/css/);
  });

  it('sparkPoints scales to the peak and lays points across the width', () => {
    assert.equal(sparkPoints([0, 5, 10], 10), '2.0,26.0 60.0,14.0 118.0,2.0');
    assert.equal(sparkPoints([0, 0], 0), '2.0,26.0 118.0,26.0');
    assert.equal(sparkPoints([], 0), '');
  });
});

describe('inspector: layering', () => {
  it('src/ui imports nothing from src/cli, src/main.ts, src/app.ts or src/server.ts', () => {
    const files = sourceFiles('src/ui');
    assert.ok(files.length >= 6, `found ${files.length} files`);
    const upward = files
      .flatMap(importsOf)
      .filter(
        (e) => e.target !== null && (e.target.startsWith('src/cli/') || ['src/main.ts', 'src/app.ts', 'src/server.ts'].includes(e.target)),
      );
    assert.deepEqual(upward, []);
  });
});

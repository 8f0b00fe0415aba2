import assert from 'node:assert/strict';
import { existsSync, mkdirSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import { chromium, type Browser, type BrowserContext, type Page } from 'playwright-core';
import { loadConfig } from '../../src/config/config.js';
import { startServer } from '../../src/main.js';
import { DEFAULT_SCHEDULE } from '../../src/policy/schedule.js';
import { systemClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { tempDir } from '../helpers/temp-dir.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { until } from '../helpers/until.js';

// The web inspector in a real browser: Debian's Chromium driven by playwright-core (never a
// downloaded browser) against a real serve (ingest, worker, admin listener with the API and the
// inspector) on loopback, a SQLite file in a temp folder, and a scripted consumer.

const CHROMIUM = '/usr/bin/chromium';
const OUT = 'test-output';
const skip = existsSync(CHROMIUM) ? false : `${CHROMIUM} is missing (apt-get install -y chromium); .ci/run installs it`;

/** A body that would run script in three ways if it were ever rendered as HTML, with ANSI bytes besides. */
const HOSTILE =
  '<script>window.__pwned="script"</script>\n' +
  '<img src="x" onerror="window.__pwned=\'img\';alert(1)">\n' +
  '<a href="javascript:window.__pwned=\'link\'">click me</a>\n' +
  '\x1b[31mred\x1b[0m \x1b]0;retitled\x07 end';

describe('web inspector in Chromium', { skip }, () => {
  let server: TestServer;
  let consumer: Consumer;
  let browser: Browser;
  let context: BrowserContext;
  let page: Page;
  let admin: string;
  const problems: string[] = [];
  const dialogs: string[] = [];
  let plainId: string;
  let hostileId: string;

  const ingest = async (lines: string[], body: string): Promise<string> => {
    const u = new URL(server.url);
    const bytes = Buffer.from(body, 'utf8');
    const head = [
      `POST /b/shop/orders?token=s3cret&page=1 HTTP/1.1`,
      `Host: ${u.host}`,
      ...lines,
      `Content-Length: ${bytes.length}`,
      'Connection: close',
      '',
      '',
    ].join('\r\n');
    const res = await rawRequest(server.url, [head, bytes]);
    assert.equal(res.status, 200, res.body.toString());
    return (JSON.parse(res.body.toString()) as { id: string }).id;
  };

  const shot = async (name: string) => {
    await page.screenshot({ path: `${OUT}/inspector-${name}.png`, fullPage: true });
  };

  before(async () => {
    mkdirSync(OUT, { recursive: true });
    // The first delivery fails (503 with a body), every later one succeeds.
    consumer = await startConsumer({ status: 200, body: 'ok' });
    consumer.script({ status: 503, headers: { 'content-type': 'text/plain' }, body: 'down <b>for</b> \x1b[2J maintenance' });
    server = await startTestServer({ worker: true });
    admin = server.admin!.url;
    await server.store.createBucket({
      name: 'shop',
      destination: `${consumer.url}/hooks`,
      drain: { schedule: { ...DEFAULT_SCHEDULE, baseMs: 100, multiplier: 1, maxAttempts: 3, jitter: 'none' } },
    });
    plainId = await ingest(
      ['X-First: 1', 'Content-Type: application/json', 'Authorization: Bearer very-secret', 'x-second: two'],
      '{"order":7,"api_key":"k-123","nested":{"password":"pw"}}',
    );
    hostileId = await ingest(['Content-Type: text/html', 'X-Evil: <b>bold</b>'], HOSTILE);
    // Delivered: the first after one 503 and a retry, the second at once.
    await until(() => consumer.received.length >= 3, 'the consumer to receive three deliveries');
    await until(
      async () =>
        (await server.store.getRequest(plainId))?.state === 'delivered' &&
        (await server.store.getRequest(hostileId))?.state === 'delivered',
      'both requests delivered',
    );

    browser = await chromium.launch({
      executablePath: CHROMIUM,
      headless: true,
      args: [
        '--no-sandbox',
        '--disable-gpu',
        '--disable-quic',
        '--no-first-run',
        '--disable-background-networking',
        '--disable-component-update',
        '--disable-sync',
      ],
    });
    // A fresh context is a fresh, temporary profile.
    context = await browser.newContext({ viewport: { width: 1280, height: 800 } });
    page = await context.newPage();
    page.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console: ${m.text()}`);
    });
    page.on('pageerror', (e) => problems.push(`pageerror: ${e.message}`));
    page.on('dialog', (d) => {
      dialogs.push(d.message());
      void d.dismiss();
    });
  });

  after(async () => {
    await browser?.close();
    await server?.stop();
    await consumer?.close();
  });

  it('shows the buckets overview with counts and a sparkline', async () => {
    const res = await page.goto(`${admin}/`);
    assert.equal(res?.status(), 200);
    assert.match(res?.headers()['content-security-policy'] ?? '', /script-src 'self'/);
    assert.equal(await page.locator('h1').textContent(), 'Buckets');
    const row = page.locator('table.buckets tbody tr', { hasText: 'shop' });
    assert.equal(await row.count(), 1);
    const text = (await row.textContent()) ?? '';
    assert.ok(text.includes(`${consumer.url}/hooks`), text);
    assert.equal(await row.locator('svg.spark polyline').count(), 2);
    const label = (await row.locator('svg.spark').getAttribute('aria-label')) ?? '';
    assert.match(label, /2 arrived, 2 delivered/);
    await shot('overview');
  });

  it('shows a request: headers in the order received, credentials redacted, the timeline of attempts', async () => {
    await page.goto(`${admin}/requests/${plainId}`);
    const names = await page.locator('table.headers th').allTextContents();
    const values = await page.locator('table.headers td').allTextContents();
    const i = names.indexOf('X-First');
    assert.ok(i >= 0, names.join(','));
    assert.deepEqual(names.slice(i, i + 4), ['X-First', 'Content-Type', 'Authorization', 'x-second']);
    assert.equal(values[i + 2], '[redacted]');
    const body = (await page.locator('pre.body').textContent()) ?? '';
    assert.match(body, /"order": 7/);
    assert.ok(!body.includes('k-123') && !body.includes('"pw"'), body);
    assert.ok(((await page.locator('h1').textContent()) ?? '').includes('token=[redacted]'));
    // Generation 1: a 503 with its response excerpt (escaped), then delivered.
    const attempts = page.locator('li.generation[data-generation="1"] tr.attempt');
    assert.equal(await attempts.count(), 2);
    assert.match((await attempts.nth(0).locator('td.outcome').textContent()) ?? '', /503 → retry/);
    assert.match((await attempts.nth(0).textContent()) ?? '', /down <b>for<\/b> \\x1b\[2J maintenance/);
    assert.match((await attempts.nth(0).textContent()) ?? '', /next in .*the schedule/);
    assert.match((await attempts.nth(1).locator('td.outcome').textContent()) ?? '', /200 delivered/);
    const download = page.locator(`a[href="/api/requests/${plainId}/body"]`);
    assert.equal(await download.count(), 1);
    await shot('request');

    await page.click('a.js-reveal');
    await page.waitForURL(/reveal=1/);
    const revealed = await page.locator('table.headers td').allTextContents();
    assert.ok(revealed.includes('Bearer very-secret'));
    assert.match((await page.locator('pre.body').textContent()) ?? '', /k-123/);
  });

  it('renders a hostile body inert: nothing runs, the text shows escaped', async () => {
    await page.goto(`${admin}/requests/${hostileId}?reveal=1`);
    const body = (await page.locator('pre.body').textContent()) ?? '';
    assert.ok(body.includes('<script>window.__pwned="script"</script>'), body);
    assert.ok(body.includes(`<img src="x" onerror=`), body);
    assert.ok(body.includes('\\x1b[31mred\\x1b[0m \\x1b]0;retitled\\x07 end'), body);
    assert.ok(!body.includes('\x1b'), 'no raw ESC byte in the page text');
    assert.equal(await page.evaluate(() => (globalThis as unknown as { __pwned?: string }).__pwned), undefined);
    assert.equal(await page.locator('main img').count(), 0);
    assert.equal(await page.locator('main script').count(), 0);
    assert.equal(await page.locator('a[href^="javascript:"]').count(), 0);
    const evil = page.locator('table.headers tr', { hasText: 'X-Evil' });
    assert.equal(await evil.locator('td').textContent(), '<b>bold</b>');
    assert.equal(await evil.locator('b').count(), 0);
    // The title of the page stayed the inspector's (no OSC retitle, no injected markup).
    assert.match(await page.title(), /^Request /);
    await shot('hostile');
    // The same request in the bucket list.
    await page.goto(`${admin}/buckets/shop`);
    assert.equal(await page.evaluate(() => (globalThis as unknown as { __pwned?: string }).__pwned), undefined);
    assert.deepEqual(dialogs, []);
  });

  it('filters, pauses and resumes, shows live arrivals, and replays with progress to settled', async () => {
    await page.goto(`${admin}/buckets/shop?method=POST&header=X-Evil%3D%3Cb%3Ebold%3C%2Fb%3E`);
    assert.equal(await page.locator('table.requests tbody tr').count(), 1);
    // A bad filter value: the form again with the CLI's message, status 400 (fetched outside the
    // page, whose console would report the 400 itself as an error).
    const bad = await fetch(`${admin}/buckets/shop?status=9zz`);
    assert.equal(bad.status, 400);
    assert.match(await bad.text(), /<p class="error">status: a status code like 503 or a class like 5xx<\/p>/);

    await page.goto(`${admin}/buckets/shop`);
    assert.equal(await page.locator('table.requests tbody tr').count(), 2);
    assert.ok((await page.locator('table.schedule tbody tr').count()) === 3);
    await Promise.all([page.waitForEvent('load'), page.click('button[data-action="pause"]')]);
    assert.equal((await server.store.getBucket('shop'))?.paused, true);
    await page.locator('h1 .tag.paused').waitFor();
    await Promise.all([page.waitForEvent('load'), page.click('button[data-action="resume"]')]);
    assert.equal((await server.store.getBucket('shop'))?.paused, false);

    // Live: a request stored while the page is open appears without a reload.
    await page.locator('.live .js-live-status', { hasText: 'connected' }).waitFor();
    const liveId = await ingest(['Content-Type: text/plain'], 'live one');
    await page.locator(`.js-live-list a[href="/requests/${liveId}"]`).waitFor({ timeout: 10_000 });
    await until(async () => (await server.store.getRequest(liveId))?.state === 'delivered', 'the live request delivered');

    // Replay the POSTs with a JSON body: a dry-run count, then confirm, then progress to settled.
    await page.goto(`${admin}/buckets/shop?header=Content-Type%3Dapplication%2Fjson`);
    const before = consumer.received.length;
    await page.fill('input[name="rate"]', '50/s');
    await page.click('button.js-replay-count');
    await page.locator('.js-replay-status', { hasText: '1 request(s) would be sent again' }).waitFor();
    await page.click('button.js-replay-confirm');
    await page.locator('.js-replay-progress-text', { hasText: 'settled:' }).waitFor({ timeout: 20_000 });
    assert.match((await page.locator('.js-replay-progress-text').textContent()) ?? '', /settled: 1 of 1 settled, delivered 1/);
    assert.equal(await page.locator('progress.js-replay-progress').getAttribute('data-settled'), 'true');
    assert.equal(consumer.received.length, before + 1);
    await shot('replay');
  });

  it('with an admin token: the login form, then pages, live events and writes on the session cookie', async () => {
    const token = `${'x'.repeat(20)}inspector-token-1`;
    const t = tempDir();
    const config = loadConfig(
      { HOOKBUCKET_ADMIN_TOKEN: token },
      {},
      { db: t.db, port: 0, host: '127.0.0.1', minFreeDisk: '0', logLevel: 'silent', worker: false, adminPort: 0 },
    );
    const guarded = await startServer(config, { clock: systemClock, logger: silentLogger });
    const own = await browser.newContext();
    const p = await own.newPage();
    p.on('console', (m) => {
      if (m.type() === 'error') problems.push(`console (token): ${m.text()}`);
    });
    p.on('pageerror', (e) => problems.push(`pageerror (token): ${e.message}`));
    try {
      const res = await fetch(`${guarded.admin!.url}/api/buckets`, {
        method: 'POST',
        headers: { authorization: `Bearer ${token}`, 'content-type': 'application/json' },
        body: JSON.stringify({ name: 'locked' }),
      });
      assert.equal(res.status, 201, await res.text());
      await p.goto(`${guarded.admin!.url}/buckets/locked`);
      assert.match(p.url(), /\/login$/);
      await p.fill('input[name="token"]', token);
      await Promise.all([p.waitForURL(`${guarded.admin!.url}/`), p.click('button[type="submit"]')]);
      assert.equal(await p.locator('h1').textContent(), 'Buckets');
      await p.goto(`${guarded.admin!.url}/buckets/locked`);
      // EventSource sends the cookie; a refused stream would never say connected.
      await p.locator('.live .js-live-status', { hasText: 'connected' }).waitFor();
      await Promise.all([p.waitForEvent('load'), p.click('button[data-action="pause"]')]);
      await p.locator('h1 .tag.paused').waitFor();
      await Promise.all([p.waitForURL(/\/login$/), p.click('form.logout button')]);
    } finally {
      await own.close();
      await guarded.close(2000);
      t.remove();
    }
  });

  it('logged no console errors', () => {
    assert.deepEqual(problems, []);
  });
});

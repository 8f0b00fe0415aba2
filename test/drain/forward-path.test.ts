import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * End to end: hostile sub-paths sent over a raw socket (no client normalises them), stored by a
 * real server, forwarded by `hookbucket worker --once` to a real consumer that records the request
 * target as it arrived.
 */
describe('the forwarded path never escapes the destination', () => {
  const t = tempDir();
  const db = ['--db', t.db];
  let consumer: Consumer;
  // stored sub-path → what the consumer receives by default, and with --forward-raw-path
  const shapes: Array<[sent: string, safe: string, raw: string]> = [
    ['/../../admin/delete-all', '/webhooks/stripe/admin/delete-all', '/webhooks/stripe/../../admin/delete-all'],
    ['/%2e%2e/%2e%2e/users/1', '/webhooks/stripe/users/1', '/webhooks/stripe/%2e%2e/%2e%2e/users/1'],
    ['//evil.example/x', '/webhooks/stripe/evil.example/x', '/webhooks/stripe//evil.example/x'],
    ['/..;/..;/manager?q=/../x', '/webhooks/stripe/manager?q=/../x', '/webhooks/stripe/..;/..;/manager?q=/../x'],
    ['/invoice/paid/', '/webhooks/stripe/invoice/paid/', '/webhooks/stripe/invoice/paid/'],
  ];
  const ids = new Map<string, string>();

  before(async () => {
    consumer = await startConsumer();
    for (const [name, extra] of [
      ['safe', []],
      ['legacy', ['--forward-raw-path']],
    ] as const) {
      const r = await runCli([...db, 'bucket', 'create', name, '--destination', `${consumer.url}/webhooks/stripe`, ...extra]);
      assert.equal(r.code, 0, r.stderr);
    }
    const server: TestServer = await startTestServer({ db: t.db });
    try {
      for (const bucket of ['safe', 'legacy']) {
        for (const [sent] of shapes) {
          const target = `/b/${bucket}${sent}`;
          const res = await rawRequest(
            server.url,
            `POST ${target} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{}`,
          );
          assert.equal(res.status, 200, `${target}: ${res.body}`);
          ids.set(target, (JSON.parse(res.body.toString()) as { id: string }).id);
        }
      }
    } finally {
      await server.stop();
    }
    const w = await runCli([...db, 'worker', '--once', '--json']);
    assert.equal(w.code, 0, w.stderr);
    assert.equal(w.json().started, shapes.length * 2);
    assert.equal(consumer.received.length, shapes.length * 2);
  });
  after(async () => {
    await consumer.close();
    t.remove();
  });

  const showJson = async (target: string) => {
    const shown = await runCli([...db, 'requests', 'show', ids.get(target)!, '--json']);
    assert.equal(shown.code, 0, shown.stderr);
    return shown.json();
  };

  for (const [sent, safe, raw] of shapes) {
    it(`default: /b/safe${sent} reaches the consumer as ${safe}; the stored path stays as sent`, async () => {
      assert.ok(
        consumer.received.some((r) => r.url === safe),
        `received: ${consumer.received.map((r) => r.url).join(' ')}`,
      );
      const [shown, human] = await Promise.all([
        showJson(`/b/safe${sent}`),
        runCli([...db, 'requests', 'show', ids.get(`/b/safe${sent}`)!]),
      ]);
      const [path, query] = sent.split('?');
      assert.equal(shown.path, path);
      assert.equal(shown.query, query ?? null);
      assert.ok(human.text.includes(`request   POST ${sent}\n`), human.text);
      // The attempt records the URL actually requested.
      assert.equal(shown.deliveries[0].attempt_log[0].url, `${consumer.url}${safe}`);
    });
    it(`--forward-raw-path: /b/legacy${sent} reaches the consumer as ${raw}`, () => {
      assert.ok(
        consumer.received.some((r) => r.url === raw),
        `received: ${consumer.received.map((r) => r.url).join(' ')}`,
      );
    });
  }

  it('every default delivery stayed under /webhooks/stripe/ for a normalising reader (WHATWG URL)', () => {
    const urls = consumer.received.map((r) => r.url);
    const normalised = urls.map((u) => new URL(`http://consumer.test${u}`).pathname);
    const escaped = normalised.filter((p) => !p.startsWith('/webhooks/stripe/'));
    // Exactly the raw bucket's climbing shapes escape: `..` and `%2e%2e` resolved by the reader.
    assert.deepEqual(escaped.sort(), ['/admin/delete-all', '/users/1']);
  });
});

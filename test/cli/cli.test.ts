import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('CLI through the real binary', () => {
  const t = tempDir();
  const db = ['--db', t.db];
  after(() => t.remove());

  it('creates, shows, updates, lists and deletes buckets, with exit codes', async () => {
    const c = await runCli([...db, 'bucket', 'create', 'stripe', '--destination', 'http://127.0.0.1:3000/hooks', '--max-body', '1MiB']);
    assert.equal(c.code, 0, c.stderr);
    assert.match(c.text, /created bucket stripe/);

    const dup = await runCli([...db, 'bucket', 'create', 'stripe']);
    assert.equal(dup.code, 1);
    assert.match(dup.stderr, /bucket_exists/);

    const shown = await runCli([...db, 'bucket', 'show', 'stripe', '--json']);
    assert.equal(shown.code, 0);
    const b = shown.json();
    assert.equal(b.name, 'stripe');
    assert.equal(b.destination, 'http://127.0.0.1:3000/hooks');
    assert.equal(b.max_body, 1024 * 1024);
    assert.equal(b.requests, 0);
    assert.match(b.created_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$/);

    const upd = await runCli([...db, 'bucket', 'update', 'stripe', '--ack-status', '202']);
    assert.equal(upd.code, 0, upd.stderr);
    const after1 = (await runCli([...db, 'bucket', 'show', 'stripe', '--json'])).json();
    assert.equal(after1.ack_status, 202);
    assert.equal(after1.destination, 'http://127.0.0.1:3000/hooks', 'options not given stay as they are');
    assert.equal(after1.max_body, 1024 * 1024);

    const cleared = await runCli([...db, 'bucket', 'update', 'stripe', '--no-destination', '--json']);
    assert.equal(cleared.json().destination, null);

    const list = await runCli([...db, 'bucket', 'list', '--json']);
    assert.deepEqual(
      list.json().buckets.map((x: { name: string }) => x.name),
      ['stripe'],
    );
    assert.deepEqual(list.json().unattributed_rejections, {});
    const human = await runCli([...db, 'bucket', 'list']);
    assert.match(human.text, /^NAME\s+REQUESTS/m);

    const del = await runCli([...db, 'bucket', 'delete', 'stripe']);
    assert.equal(del.code, 0, del.stderr);
    const gone = await runCli([...db, 'bucket', 'show', 'stripe']);
    assert.equal(gone.code, 4);
    assert.match(gone.stderr, /not_found/);
  });

  it('exits 2 on usage errors, invalid names and bad options', async () => {
    for (const args of [
      ['bucket', 'create', 'Bad_Name'],
      ['bucket', 'create', 'ok', '--max-body', '200MiB'],
      ['bucket', 'create', 'ok', '--ack-status', '500'],
      ['bucket', 'create', 'ok', '--destination', 'ftp://x'],
      ['bucket', 'create', 'ok', '--ack-content-type', 'text/plain\r\nX-Evil: 1'],
      ['bucket', 'create', 'ok', '--ack-status', '204', '--ack-body', 'x'],
      ['serve', '--lock-timeout', '0'],
      ['bucket', 'frobnicate'],
      ['requests', 'list', 'ok', '--limit', 'zero'],
      ['serve', '--durability', 'fast'],
      ['--no-such-flag'],
    ]) {
      const r = await runCli([...db, ...args]);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      // Commander's own errors (unknown option or command, missing argument) carry a code like ours.
      assert.match(r.stderr, /^error \[[a-z_]+\]: /m, `${args.join(' ')}: ${r.stderr}`);
    }
    const missing = await runCli([...db, 'bucket', 'create']);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /^error \[usage\]: missing required argument 'name'/m);
    const env = await runCli(['bucket', 'list'], { HOOKBUCKET_LOCK_TIMEOUT: 'soon', HOOKBUCKET_DB: t.db });
    assert.equal(env.code, 2);
    assert.match(env.stderr, /HOOKBUCKET_LOCK_TIMEOUT/);
  });

  it('shows help with examples for every command, exit 0', async () => {
    for (const args of [
      [],
      ['serve'],
      ['bucket'],
      ['bucket', 'create'],
      ['bucket', 'list'],
      ['bucket', 'show'],
      ['bucket', 'update'],
      ['bucket', 'delete'],
      ['requests'],
      ['requests', 'list'],
      ['requests', 'show'],
    ]) {
      const r = await runCli([...args, '--help']);
      assert.equal(r.code, 0, args.join(' '));
      assert.match(r.text, /Examples:/, args.join(' '));
    }
  });

  it('reports unknown requests as not found (exit 4)', async () => {
    const r = await runCli([...db, 'requests', 'show', '00000000-0000-7000-8000-000000000000']);
    assert.equal(r.code, 4);
    const l = await runCli([...db, 'requests', 'list', 'missing']);
    assert.equal(l.code, 4);
  });
});

// Run twice: on the database file (--db) and through the server's admin API (--api, issue 14 point 5).
for (const mode of ['db', 'api'] as const)
  describe(`CLI against a running server (${mode === 'db' ? '--db' : '--api'})`, () => {
    let s: TestServer;
    const target = () => (mode === 'db' ? ['--db', s.db] : ['--api', s.admin!.url]);
    before(async () => {
      s = await startTestServer();
    });
    after(() => s.stop());

    it('a bucket created from the CLI while serving takes the very next request', async () => {
      const c = await runCli([...target(), 'bucket', 'create', 'live']);
      assert.equal(c.code, 0, c.stderr);
      const r = await fetch(`${s.url}/b/live`, { method: 'POST', body: 'hi' });
      assert.equal(r.status, 200);
    });

    it('requests show --raw returns the exact bytes; --json the headers as sent', async () => {
      const body = Buffer.concat([randomBytes(4096), Buffer.from([0, 0xff, 0xfe])]);
      const file = join(s.dir, 'body.bin');
      writeFileSync(file, body);
      const r = await fetch(`${s.url}/b/live/sub/path?x=1`, {
        method: 'POST',
        body,
        headers: { 'Content-Type': 'application/octet-stream', 'X-Custom': 'A', Authorization: 'Bearer secret-token' },
      });
      const { id } = (await r.json()) as { id: string };

      const raw = await runCli([...target(), 'requests', 'show', id, '--raw']);
      assert.equal(raw.code, 0);
      assert.ok(raw.stdout.equals(body), 'identical bytes');

      const j = (await runCli([...target(), 'requests', 'show', id, '--json'])).json();
      assert.equal(j.id, id);
      assert.equal(j.path, '/sub/path');
      assert.equal(j.query, 'x=1');
      assert.equal(j.body_encoding, 'base64');
      assert.ok(Buffer.from(j.body, 'base64').equals(body));
      const names = j.headers.map((h: [string, string]) => h[0].toLowerCase());
      assert.ok(names.includes('x-custom'));
      assert.deepEqual(
        j.headers.find((h: [string, string]) => h[0].toLowerCase() === 'authorization'),
        ['Authorization', 'Bearer secret-token'],
      );

      const human = await runCli([...target(), 'requests', 'show', id]);
      assert.equal(human.code, 0);
      assert.doesNotMatch(human.text, /secret-token/, 'credentials redacted in human output');
      assert.match(human.text, /authorization: \[redacted\]/i);
      const revealed = await runCli([...target(), 'requests', 'show', id, '--reveal']);
      assert.match(revealed.text, /secret-token/);

      const list = (await runCli([...target(), 'requests', 'list', 'live', '--json'])).json();
      assert.equal(list.requests[0].id, id, 'newest first');
      assert.ok(list.requests.length >= 1);
      assert.equal(list.next_cursor, null);
      const page = (await runCli([...target(), 'requests', 'list', 'live', '--limit', '1', '--json'])).json();
      assert.equal(page.requests.length, 1);
      const page2 = (
        await runCli([...target(), 'requests', 'list', 'live', '--limit', '1', '--cursor', page.next_cursor, '--json'])
      ).json();
      assert.notEqual(page2.requests[0].id, id);
    });

    it('pretty-prints JSON bodies and redacts secret-looking fields', async () => {
      const r = await fetch(`${s.url}/b/live`, {
        method: 'POST',
        body: '{"event":"x","api_key":"sk_live_1","nested":{"password":"p"}}',
        headers: { 'content-type': 'application/json' },
      });
      const { id } = (await r.json()) as { id: string };
      const human = await runCli([...target(), 'requests', 'show', id]);
      assert.match(human.text, /"event": "x"/);
      assert.doesNotMatch(human.text, /sk_live_1|"p"/);
    });

    it('bucket delete refuses while deliveries are undelivered, unless --force', async () => {
      await runCli([...target(), 'bucket', 'create', 'fwd', '--destination', 'http://127.0.0.1:9/']);
      await fetch(`${s.url}/b/fwd`, { method: 'POST', body: 'x' });
      const refused = await runCli([...target(), 'bucket', 'delete', 'fwd']);
      assert.equal(refused.code, 1);
      assert.match(refused.stderr, /bucket_not_empty/);
      const forced = await runCli([...target(), 'bucket', 'delete', 'fwd', '--force', '--json']);
      assert.equal(forced.code, 0, forced.stderr);
      assert.equal(forced.json().requests, 1);
    });
  });

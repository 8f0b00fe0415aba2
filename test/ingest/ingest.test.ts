import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { gzipSync } from 'node:zlib';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { rawRequest } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

function post(path: string, headers: string[], body: Buffer): Buffer {
  const lines = [`POST ${path} HTTP/1.1`, 'Host: 127.0.0.1'];
  for (let i = 0; i < headers.length; i += 2) lines.push(`${headers[i]}: ${headers[i + 1]}`);
  lines.push(`Content-Length: ${body.length}`);
  return Buffer.concat([Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1'), body]);
}

describe('ingest over a real socket', () => {
  let s: TestServer;
  before(async () => {
    s = await startTestServer();
    await s.store.createBucket({ name: 'hooks' });
    await s.store.createBucket({ name: 'withdest', destination: 'http://127.0.0.1:9/consumer' });
    await s.store.createBucket({ name: 'custom', ackStatus: 202, ackBody: 'ok', ackContentType: 'text/plain' });
  });
  after(() => s.stop());

  const bodies: Array<[string, Buffer]> = [
    ['binary', randomBytes(70_000)],
    ['gzip, stored as received', gzipSync(Buffer.from('{"a":1}'.repeat(100)))],
    ['empty', Buffer.alloc(0)],
    ['invalid UTF-8, NUL and BOM', Buffer.from([0xef, 0xbb, 0xbf, 0x00, 0xc3, 0x28, 0xff, 0xfe, 0x0a])],
  ];
  for (const [name, body] of bodies) {
    it(`stores a ${name} body byte-identical`, async () => {
      const res = await rawRequest(s.url, post('/b/hooks/in', ['Content-Type', 'application/octet-stream'], body));
      assert.equal(res.status, 200);
      const id = (JSON.parse(res.body.toString()) as { id: string }).id;
      assert.equal(res.headers['x-hookbucket-request-id'], id);
      const stored = await s.store.getRequest(id);
      assert.ok(stored);
      assert.ok(stored.body.equals(body));
      assert.equal(stored.size, body.length);
      assert.equal(stored.sha256, createHash('sha256').update(body).digest('hex'));
    });
  }

  it('keeps the raw header list: order, case and repeats', async () => {
    const headers = ['X-Dup', 'one', 'x-dup', 'two', 'Stripe-Signature', 't=1,v1=abc', 'X-MiXeD', ' spaced ', 'X-DUP', 'three'];
    const res = await rawRequest(s.url, post('/b/hooks', headers, Buffer.from('{}')));
    assert.equal(res.status, 200);
    const stored = await s.store.getRequest(JSON.parse(res.body.toString()).id);
    // Node trims optional whitespace around values (RFC 9110 §5.5); everything else is verbatim.
    assert.deepEqual(stored?.rawHeaders, [
      'Host',
      '127.0.0.1',
      'X-Dup',
      'one',
      'x-dup',
      'two',
      'Stripe-Signature',
      't=1,v1=abc',
      'X-MiXeD',
      'spaced',
      'X-DUP',
      'three',
      'Content-Length',
      '2',
    ]);
  });

  it('keeps the raw, still-encoded sub-path and query', async () => {
    const cases: Array<[string, string, string | null]> = [
      ['/b/hooks', '', null],
      ['/b/hooks/', '/', null],
      ['/b/hooks/x/%2e%2e/y?a=1&a=2&b=%20', '/x/%2e%2e/y', 'a=1&a=2&b=%20'],
      ['/b/hooks/a%2Fb//c?', '/a%2Fb//c', ''],
    ];
    for (const [target, path, query] of cases) {
      const res = await rawRequest(s.url, post(target, [], Buffer.from('x')));
      assert.equal(res.status, 200, target);
      const stored = await s.store.getRequest(JSON.parse(res.body.toString()).id);
      assert.equal(stored?.path, path, target);
      assert.equal(stored?.query, query, target);
    }
  });

  it('stores every method but CONNECT and TRACE', async () => {
    for (const method of ['GET', 'HEAD', 'PUT', 'PATCH', 'DELETE', 'OPTIONS', 'PROPFIND']) {
      const res = await rawRequest(
        s.url,
        `${method} /b/hooks/m HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`,
        method === 'HEAD' ? { waitForClose: false, timeoutMs: 1000 } : {},
      );
      if (method !== 'HEAD') assert.equal(res.status, 200, method);
      const id = res.headers['x-hookbucket-request-id'];
      assert.ok(id, method);
      assert.equal((await s.store.getRequest(id))?.method, method);
    }
  });

  it('creates the first delivery (generation 1, pending) in the same transaction when the bucket has a destination', async () => {
    const res = await rawRequest(s.url, post('/b/withdest', [], Buffer.from('{}')));
    const id = JSON.parse(res.body.toString()).id as string;
    const raw = new BetterSqlite3(s.db, { readonly: true });
    const rows = raw.prepare('select generation, state, destination, trigger from deliveries where request_id = ?').all(id);
    raw.close();
    assert.deepEqual(rows, [{ generation: 1, state: 'pending', destination: null, trigger: 'initial' }]);
    assert.equal((await s.store.getRequest(id))?.state, 'pending');
    const noDest = await rawRequest(s.url, post('/b/hooks', [], Buffer.from('{}')));
    assert.equal((await s.store.getRequest(JSON.parse(noDest.body.toString()).id))?.state, 'none');
  });

  it('answers 204 acks without a body', async () => {
    await s.store.createBucket({ name: 'nobody', ackStatus: 204 });
    const res = await rawRequest(s.url, post('/b/nobody', [], Buffer.from('x')), { timeoutMs: 1000 });
    assert.match(res.raw.toString('latin1'), /^HTTP\/1\.1 204 /);
    assert.doesNotMatch(res.raw.toString('latin1'), /content-length/i);
    assert.ok(res.headers['x-hookbucket-request-id']);
  });

  it('answers with the bucket ack settings', async () => {
    const res = await rawRequest(s.url, post('/b/custom', [], Buffer.from('x')));
    assert.equal(res.status, 202);
    assert.equal(res.body.toString(), 'ok');
    assert.match(res.headers['content-type'] ?? '', /^text\/plain/);
    assert.ok(res.headers['x-hookbucket-request-id']);
  });

  it('acknowledges only committed rows: every 2xx id is readable from another connection at once', async () => {
    const reader = new BetterSqlite3(s.db, { readonly: true });
    const exists = reader.prepare('select sha256 from requests where id = ?').pluck();
    const results = await Promise.all(
      Array.from({ length: 64 }, async (_, i) => {
        const body = Buffer.from(`{"n":${i}}`);
        const r = await fetch(`${s.url}/b/hooks/many`, { method: 'POST', body });
        const { id } = (await r.json()) as { id: string };
        // Checked the moment the answer arrives, before anything else can commit it later.
        return { status: r.status, sha: exists.get(id), want: createHash('sha256').update(body).digest('hex') };
      }),
    );
    reader.close();
    for (const r of results) {
      assert.equal(r.status, 200);
      assert.equal(r.sha, r.want);
    }
  });

  it('answers /healthz and 404s unknown routes with JSON', async () => {
    const h = await fetch(`${s.url}/healthz`);
    assert.equal(h.status, 200);
    assert.deepEqual(await h.json(), { status: 'ok' });
    const n = await fetch(`${s.url}/nowhere`);
    assert.equal(n.status, 404);
    assert.equal(((await n.json()) as { code: string }).code, 'not_found');
  });
});

describe('--trust-proxy', () => {
  it('stores the last X-Forwarded-For hop as the peer only when trusted', async () => {
    for (const trustProxy of [true, false]) {
      const s = await startTestServer({ trustProxy });
      try {
        await s.store.createBucket({ name: 'p' });
        const r = await fetch(`${s.url}/b/p`, { method: 'POST', body: 'x', headers: { 'x-forwarded-for': '198.51.100.7, 203.0.113.9' } });
        const { id } = (await r.json()) as { id: string };
        assert.equal((await s.store.getRequest(id))?.peer, trustProxy ? '203.0.113.9' : '127.0.0.1');
      } finally {
        await s.stop();
      }
    }
  });
});

describe('buckets created while serving', () => {
  it('a bucket created by another connection is found on the very next request', async () => {
    const s = await startTestServer();
    try {
      const before = await fetch(`${s.url}/b/late`, { method: 'POST', body: 'x' });
      assert.equal(before.status, 404);
      await s.store.createBucket({ name: 'late', ackStatus: 201 });
      const r = await fetch(`${s.url}/b/late`, { method: 'POST', body: 'x' });
      assert.equal(r.status, 201);
      await s.store.updateBucket('late', { ackStatus: 204 });
      const r2 = await fetch(`${s.url}/b/late`, { method: 'POST', body: 'x' });
      assert.equal(r2.status, 204);
    } finally {
      await s.stop();
    }
  });
});

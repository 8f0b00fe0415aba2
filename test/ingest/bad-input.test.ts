import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { rmSync, writeFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { rawRequest } from '../helpers/raw-http.js';
import { openFilesUnder } from '../helpers/open-files.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { until } from '../helpers/until.js';

const json = (b: Buffer) => JSON.parse(b.toString()) as { error: string; code: string };

describe('bad input answers', () => {
  let s: TestServer;
  let count: () => number;
  before(async () => {
    s = await startTestServer({ headersTimeoutMs: '500ms', requestTimeoutMs: '1s' });
    await s.store.createBucket({ name: 'small', maxBody: 1024 });
    await s.store.createBucket({ name: 'hooks' });
    const reader = new BetterSqlite3(s.db, { readonly: true });
    const stmt = reader.prepare('select count(*) from requests').pluck();
    count = () => stmt.get() as number;
  });
  after(() => s.stop());

  async function expectRefused(payload: Buffer | string | Array<Buffer | string>, status: number, code: string, opts = {}) {
    const before = count();
    const res = await rawRequest(s.url, payload, opts);
    assert.equal(res.status, status, res.raw.toString('latin1').slice(0, 300));
    assert.equal(json(res.body).code, code);
    assert.equal(count(), before, 'nothing stored');
    return res;
  }

  it('unknown or invalid bucket: 404, nothing stored', async () => {
    await expectRefused('POST /b/nope HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx', 404, 'unknown_bucket');
    await expectRefused('POST /b/..%2Fhooks HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx', 404, 'unknown_bucket');
    await expectRefused('POST /b/%00 HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx', 404, 'unknown_bucket');
    await expectRefused(`POST /b/${'a'.repeat(10_000)} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx`, 404, 'unknown_bucket');
  });

  it('body over the limit with Content-Length: 413 before reading it', async () => {
    await expectRefused(`POST /b/small HTTP/1.1\r\nHost: x\r\nContent-Length: 1025\r\n\r\n${'a'.repeat(1025)}`, 413, 'body_too_large');
  });

  it('body over the limit when chunked: 413 while streaming', async () => {
    const chunk = (n: number) => `${n.toString(16)}\r\n${'b'.repeat(n)}\r\n`;
    await expectRefused(
      ['POST /b/small HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n', chunk(600), chunk(600), '0\r\n\r\n'],
      413,
      'body_too_large',
    );
  });

  it('body at exactly the limit is stored', async () => {
    const res = await rawRequest(s.url, `POST /b/small HTTP/1.1\r\nHost: x\r\nContent-Length: 1024\r\n\r\n${'c'.repeat(1024)}`);
    assert.equal(res.status, 200);
  });

  it('Expect: 100-continue over the limit: 413 and no 100 Continue', async () => {
    const res = await expectRefused(
      'POST /b/small HTTP/1.1\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n',
      413,
      'body_too_large',
    );
    assert.doesNotMatch(res.raw.toString('latin1'), /100 Continue/);
  });

  it('Expect: 100-continue within the limit: 100, then stored', async () => {
    const res = await rawRequest(s.url, ['POST /b/small HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n', 'abc'], {
      chunkDelayMs: 100,
    });
    assert.match(res.raw.toString('latin1'), /^HTTP\/1\.1 100 Continue/);
    assert.equal(res.status, 200);
  });

  it("request line over 16 KiB: 414, even past Node's own parser limit", async () => {
    await expectRefused(`GET /b/hooks?${'q'.repeat(20_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 414, 'uri_too_long');
    await expectRefused(`GET /b/hooks?${'q'.repeat(120_000)} HTTP/1.1\r\nHost: x\r\n\r\n`, 414, 'uri_too_long');
  });

  it('missing Host and unknown Expect get JSON answers', async () => {
    await expectRefused('POST /b/hooks HTTP/1.1\r\nContent-Length: 1\r\n\r\nx', 400, 'bad_request');
    await expectRefused('POST /b/hooks HTTP/1.1\r\nHost: x\r\nExpect: foo\r\nContent-Length: 1\r\n\r\nx', 417, 'expectation_failed');
  });

  it('dot segments in the raw target stay inside the bucket and are stored verbatim', async () => {
    for (const target of ['/b/hooks/../../x', '/b/hooks/%2e%2e/%2e%2e/x']) {
      const res = await rawRequest(s.url, `POST ${target} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx`);
      assert.equal(res.status, 200, target);
      const stored = await s.store.getRequest(res.headers['x-hookbucket-request-id']!);
      assert.equal(stored?.bucket, 'hooks');
      assert.equal(stored?.path, target.slice('/b/hooks'.length));
    }
  });

  it('an 8 KiB query is stored verbatim', async () => {
    const q = `k=${'v'.repeat(8190)}`;
    const res = await rawRequest(s.url, `POST /b/hooks?${q} HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n`);
    assert.equal(res.status, 200);
    const id = res.headers['x-hookbucket-request-id']!;
    assert.equal((await s.store.getRequest(id))?.query, q);
  });

  it('headers over 64 KiB: 431', async () => {
    const big = Array.from({ length: 70 }, (_, i) => `X-Big-${i}: ${'h'.repeat(1000)}\r\n`).join('');
    await expectRefused(`POST /b/hooks HTTP/1.1\r\nHost: x\r\n${big}Content-Length: 0\r\n\r\n`, 431, 'headers_too_large');
  });

  it('2,000 headers are all stored; 2,001 get 431', async () => {
    const many = (n: number) => Array.from({ length: n }, (_, i) => `h${i}: ${i}\r\n`).join('');
    // Host + 1,998 + Content-Length = 2,000 headers.
    const ok = await rawRequest(s.url, `POST /b/hooks HTTP/1.1\r\nHost: x\r\n${many(1998)}Content-Length: 0\r\n\r\n`);
    assert.equal(ok.status, 200);
    const stored = await s.store.getRequest(ok.headers['x-hookbucket-request-id']!);
    assert.equal(stored?.rawHeaders.length, 4000);
    assert.equal(stored?.rawHeaders[3996], 'h1997');
    await expectRefused(`POST /b/hooks HTTP/1.1\r\nHost: x\r\n${many(1999)}Content-Length: 0\r\n\r\n`, 431, 'too_many_headers');
  });

  it('malformed requests and chunked encoding: 400', async () => {
    await expectRefused(
      'POST /b/hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n',
      400,
      'bad_request',
    );
    await expectRefused('POST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab', 400, 'bad_request');
    await expectRefused(
      'POST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
      400,
      'bad_request',
    );
    await expectRefused(
      'POST /b/hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding : chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
      400,
      'bad_request',
    );
    await expectRefused('POST /b/hooks HTTP/1.1\nHost: x\nContent-Length: 1\n\nx', 400, 'bad_request');
    await expectRefused('NOT A REQUEST\r\n\r\n', 400, 'bad_request');
  });

  it('Transfer-Encoding other than chunked: 501', async () => {
    await expectRefused(
      'POST /b/hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n',
      501,
      'unsupported_transfer_encoding',
    );
    await expectRefused('POST /b/hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: gzip\r\n\r\nabc', 501, 'unsupported_transfer_encoding');
  });

  it('CONNECT and TRACE: 405', async () => {
    await expectRefused('TRACE /b/hooks HTTP/1.1\r\nHost: x\r\n\r\n', 405, 'method_not_allowed');
    await expectRefused('CONNECT 127.0.0.1:1 HTTP/1.1\r\nHost: 127.0.0.1:1\r\n\r\n', 405, 'method_not_allowed', { waitForClose: true });
  });

  it('slowloris: a client that never finishes its headers is cut off, others keep getting 2xx', async () => {
    const slow = rawRequest(s.url, 'POST /b/hooks HTTP/1.1\r\nHost: x\r\nX-Slow: ', { waitForClose: true, timeoutMs: 8000 });
    const ok = await fetch(`${s.url}/b/hooks`, { method: 'POST', body: 'x' });
    assert.equal(ok.status, 200);
    const res = await slow;
    assert.equal(res.closed, true);
    assert.equal(res.status, 408);
  });

  it('slow body: cut off at the request timeout, nothing stored', async () => {
    const before = count();
    const res = await rawRequest(s.url, 'POST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc', {
      waitForClose: true,
      timeoutMs: 8000,
    });
    assert.equal(res.closed, true);
    assert.equal(res.status, 408);
    assert.equal(json(res.body).code, 'request_timeout');
    assert.equal(count(), before);
  });

  it('client reset mid-body: nothing stored', async () => {
    const before = count();
    const { connect } = await import('node:net');
    const u = new URL(s.url);
    await new Promise<void>((resolve) => {
      const sock = connect(Number(u.port), u.hostname, () => {
        sock.write('POST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 1000\r\n\r\nabc');
        setImmediate(() => {
          sock.resetAndDestroy();
          resolve();
        });
      });
    });
    const ok = await fetch(`${s.url}/b/hooks`, { method: 'POST', body: 'after' });
    assert.equal(ok.status, 200);
    assert.equal(count(), before + 1);
  });

  it('counts every refusal per bucket and reason, once, and only under buckets that exist', async () => {
    await expectRefused('TRACE /b/zzz HTTP/1.1\r\nHost: x\r\n\r\n', 404, 'unknown_bucket');
    await s.close(); // flushes buffered counts
    const small = await s.store.bucketCounts('small');
    // Content-Length 1025, chunked 1200, Expect with 5000: three 413s.
    assert.deepEqual(small.rejections, { body_too_large: 3 });
    const hooks = await s.store.bucketCounts('hooks');
    assert.deepEqual(hooks.rejections, {
      method_not_allowed: 1,
      too_many_headers: 1,
      headers_too_large: 1,
      unsupported_transfer_encoding: 2,
      client_aborted: 1,
    });
    const other = await s.store.unattributedRejections();
    assert.equal(other.unknown_bucket, 5);
    assert.equal(other.uri_too_long, 2);
    assert.equal(other.request_timeout, 2);
    assert.equal(other.expectation_failed, 1);
    assert.equal(other.method_not_allowed, 1, 'CONNECT never reaches a bucket');
    assert.ok((other.bad_request ?? 0) >= 7, JSON.stringify(other));
    const raw = new BetterSqlite3(s.db, { readonly: true });
    const names = raw.prepare('select distinct bucket from rejections order by bucket').pluck().all();
    raw.close();
    assert.deepEqual(names, ['', 'hooks', 'small']);
  });
});

describe('storage trouble means 503, never 2xx', () => {
  it('free disk under --min-free-disk: 503 with Retry-After, /healthz degraded', async () => {
    const s = await startTestServer({ minFreeDisk: '1000000GiB' });
    try {
      await s.store.createBucket({ name: 'hooks' });
      const r = await fetch(`${s.url}/b/hooks`, { method: 'POST', body: 'x' });
      assert.equal(r.status, 503);
      assert.ok(Number(r.headers.get('retry-after')) > 0);
      assert.equal(((await r.json()) as { code: string }).code, 'storage_full');
      const h = await fetch(`${s.url}/healthz`);
      assert.equal(h.status, 503);
      assert.equal(((await h.json()) as { status: string }).status, 'degraded');
    } finally {
      await s.stop();
    }
  });

  it('write lock held by another process beyond the lock timeout: 503, nothing stored; then recovers', async () => {
    const s = await startTestServer({ lockTimeoutMs: '300ms' });
    try {
      await s.store.createBucket({ name: 'hooks' });
      const locker = new BetterSqlite3(s.db);
      locker.exec('BEGIN IMMEDIATE');
      const r = await fetch(`${s.url}/b/hooks`, { method: 'POST', body: 'x' });
      assert.equal(r.status, 503);
      assert.equal(((await r.json()) as { code: string }).code, 'store_busy');
      assert.ok(r.headers.get('retry-after'));
      locker.exec('ROLLBACK');
      assert.equal(locker.prepare('select count(*) from requests').pluck().get(), 0);
      locker.close();
      const ok = await fetch(`${s.url}/b/hooks`, { method: 'POST', body: 'x' });
      assert.equal(ok.status, 200);
    } finally {
      await s.stop();
    }
  });

  it('no answer before commit: a request waits while the lock is held and is stored once it is released', async () => {
    const s = await startTestServer({ lockTimeoutMs: '10s' });
    try {
      await s.store.createBucket({ name: 'hooks' });
      const locker = new BetterSqlite3(s.db);
      locker.exec('BEGIN IMMEDIATE');
      let answered = false;
      const pending = fetch(`${s.url}/b/hooks`, { method: 'POST', body: 'held' }).then((r) => {
        answered = true;
        return r;
      });
      // The request reached the writer (its body was read) but cannot commit: no answer yet.
      await new Promise((r) => setTimeout(r, 300));
      assert.equal(answered, false);
      locker.exec('COMMIT');
      locker.close();
      const r = await pending;
      assert.equal(r.status, 200);
      const { id } = (await r.json()) as { id: string };
      assert.equal((await s.store.getRequest(id))?.body.toString(), 'held');
    } finally {
      await s.stop();
    }
  });

  it('a bucket deleted while a request is in flight: 404, no orphan row', async () => {
    const s = await startTestServer({ lockTimeoutMs: '10s' });
    try {
      await s.store.createBucket({ name: 'doomed' });
      const locker = new BetterSqlite3(s.db);
      locker.exec('BEGIN IMMEDIATE');
      const pending = fetch(`${s.url}/b/doomed`, { method: 'POST', body: 'x' });
      // The request is captured and waiting for the lock when the bucket goes.
      await new Promise((r) => setTimeout(r, 200));
      locker.exec(`delete from buckets where name = 'doomed'`);
      locker.exec('COMMIT');
      const r = await pending;
      assert.equal(r.status, 404);
      assert.equal(((await r.json()) as { code: string }).code, 'unknown_bucket');
      assert.equal(locker.prepare(`select count(*) from requests where bucket = 'doomed'`).pluck().get(), 0);
      locker.close();
    } finally {
      await s.stop();
    }
  });

  it('too many body bytes in flight: 503 with Retry-After', async () => {
    const s = await startTestServer({ maxInflightBytes: '1000B' });
    try {
      await s.store.createBucket({ name: 'hooks' });
      const r = await rawRequest(s.url, `POST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 2000\r\n\r\n`);
      assert.equal(r.status, 503);
      assert.equal(json(r.body).code, 'overloaded');
      assert.ok(r.headers['retry-after']);
      const ok = await fetch(`${s.url}/b/hooks`, { method: 'POST', body: 'small' });
      assert.equal(ok.status, 200);
    } finally {
      await s.stop();
    }
  });
});

describe('found by the reliability suite (test/reliability/cases/hostile.ts)', () => {
  let s: TestServer;
  let count: () => number;
  before(async () => {
    s = await startTestServer();
    await s.store.createBucket({ name: 'hooks' });
    const reader = new BetterSqlite3(s.db, { readonly: true });
    const stmt = reader.prepare('select count(*) from requests').pluck();
    count = () => stmt.get() as number;
  });
  after(() => s.stop());

  /** Statuses of every answer on one connection, in order (Content-Length framed). */
  function statuses(raw: Buffer): number[] {
    const out: number[] = [];
    let p = 0;
    for (let end = raw.indexOf('\r\n\r\n', p); end !== -1; end = raw.indexOf('\r\n\r\n', p)) {
      const head = raw.subarray(p, end).toString('latin1');
      out.push(Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1]));
      p = end + 4 + Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
    }
    return out;
  }

  it('an encoded line break in the sub-path is stored, not routed to a 404 (case 22)', async () => {
    for (const path of ['/x%0Ay', '/x%0D%0Ay', '/%E2%80%A8']) {
      const res = await rawRequest(s.url, `POST /b/hooks${path} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx`);
      assert.equal(res.status, 200, path);
      assert.equal((await s.store.getRequest(res.headers['x-hookbucket-request-id']!))?.path, path);
    }
  });

  it('two Host headers: 400, nothing stored (RFC 9112 §3.2; case 15)', async () => {
    const before = count();
    const res = await rawRequest(s.url, 'POST /b/hooks HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 1\r\n\r\nx');
    assert.equal(res.status, 400);
    assert.equal(json(res.body).code, 'bad_request');
    assert.equal(count(), before);
  });

  it('pipelined requests then garbage: their 200s first, in order, then the 400 (case 24)', async () => {
    const before = count();
    const req = (n: number) => `POST /b/hooks/p${n} HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\np${n}`;
    const res = await rawRequest(s.url, `${req(1)}${req(2)}GARBAGE\r\n\r\n`, { waitForClose: true });
    assert.deepEqual(statuses(res.raw), [200, 200, 400]);
    assert.equal(res.closed, true);
    assert.equal(count(), before + 2);
  });

  it('a client that half-closes mid-request still gets the answers for the whole ones before it (case 24)', async () => {
    const before = count();
    const { connect } = await import('node:net');
    const u = new URL(s.url);
    const raw = await new Promise<Buffer>((resolve) => {
      const got: Buffer[] = [];
      const sock = connect(Number(u.port), u.hostname, () =>
        sock.end(
          'POST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nxPOST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 9\r\n\r\nabc',
        ),
      );
      sock.on('data', (d: Buffer) => got.push(d));
      sock.on('close', () => resolve(Buffer.concat(got)));
    });
    assert.deepEqual(statuses(raw), [200]);
    assert.equal(count(), before + 1);
  });

  it('a 1 MB request line sent while the server answers: the 414 arrives, not a reset (case 21)', async () => {
    const head = `GET /b/hooks?q=${'v'.repeat(1_000_000)} HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\n`;
    for (let i = 0; i < 5; i++) {
      const res = await rawRequest(s.url, [head, 'x'], { waitForClose: true });
      assert.equal(res.status, 414);
    }
  });

  it('a chunked body in 1-byte, large and small chunks is stored byte-identical (case 12)', async () => {
    const body = Buffer.alloc(20_000);
    for (let i = 0; i < body.length; i++) body[i] = (i * 7) % 256;
    const sizes = [1, 1, 1, 3000, 1, 10_000, 2, 5000];
    const parts: Buffer[] = [Buffer.from('POST /b/hooks HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n')];
    let off = 0;
    for (let k = 0; off < body.length; k++) {
      const n = Math.min(sizes[k % sizes.length]!, body.length - off);
      parts.push(Buffer.from(`${n.toString(16)}\r\n`), body.subarray(off, off + n), Buffer.from('\r\n'));
      off += n;
    }
    parts.push(Buffer.from('0\r\n\r\n'));
    const res = await rawRequest(s.url, Buffer.concat(parts));
    assert.equal(res.status, 200);
    assert.ok((await s.store.getRequest(res.headers['x-hookbucket-request-id']!))?.body.equals(body));
  });

  // Bodies without a Content-Length spool to a file past 1 MiB (src/ingest/spool.ts).
  function chunkedWire(bucket: string, body: Buffer, chunkBytes: number): Buffer {
    const parts: Buffer[] = [Buffer.from(`POST /b/${bucket}/spooled HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n`)];
    for (let off = 0; off < body.length; off += chunkBytes) {
      const piece = body.subarray(off, off + chunkBytes);
      parts.push(Buffer.from(`${piece.length.toString(16)}\r\n`), piece, Buffer.from('\r\n'));
    }
    parts.push(Buffer.from('0\r\n\r\n'));
    return Buffer.concat(parts);
  }
  async function refused(wire: Buffer, status: number, code: string) {
    const before = count();
    const res = await rawRequest(s.url, wire);
    assert.equal(res.status, status, res.raw.toString('latin1').slice(0, 300));
    assert.equal(json(res.body).code, code);
    assert.equal(count(), before, 'nothing stored');
    return res;
  }
  // Spool files are unlinked when opened: a leaked one shows only as a descriptor this process holds.
  const spoolFiles = () => openFilesUnder('self', `${s.db}-spool`);

  it('a chunked body past the spool threshold is stored byte-identical, and its spool file is gone', async () => {
    const body = randomBytes(3 * 1024 * 1024 + 7);
    for (const chunkBytes of [64 * 1024, 1000]) {
      const res = await rawRequest(s.url, chunkedWire('hooks', body, chunkBytes));
      assert.equal(res.status, 200, res.raw.toString('latin1').slice(0, 300));
      assert.ok((await s.store.getRequest(res.headers['x-hookbucket-request-id']!))?.body.equals(body));
    }
    await until(() => spoolFiles().length === 0, 'spool file handles closed', 5000);
  });

  it('a chunked body that passes the limit after spooling: 413, nothing stored, no spool file left', async () => {
    await s.store.createBucket({ name: 'two-mib', maxBody: 2 * 1024 * 1024 });
    await refused(chunkedWire('two-mib', randomBytes(2 * 1024 * 1024 + 1), 64 * 1024), 413, 'body_too_large');
    await until(() => spoolFiles().length === 0, 'spool file handles closed', 5000);
    // At exactly the limit it is stored.
    const body = randomBytes(2 * 1024 * 1024);
    const res = await rawRequest(s.url, chunkedWire('two-mib', body, 64 * 1024));
    assert.equal(res.status, 200);
    assert.ok((await s.store.getRequest(res.headers['x-hookbucket-request-id']!))?.body.equals(body));
  });

  it('a spool that cannot be written: 503 with Retry-After, nothing stored; small bodies still 2xx', async () => {
    const dir = `${s.db}-spool`;
    rmSync(dir, { recursive: true, force: true });
    writeFileSync(dir, 'in the way');
    try {
      const res = await refused(chunkedWire('hooks', randomBytes(2 * 1024 * 1024), 64 * 1024), 503, 'storage_error');
      assert.equal(res.headers['retry-after'], '5');
      const small = await rawRequest(s.url, chunkedWire('hooks', randomBytes(1000), 100));
      assert.equal(small.status, 200);
    } finally {
      rmSync(dir, { force: true });
    }
    // The folder is made again on the next use.
    const ok = await rawRequest(s.url, chunkedWire('hooks', randomBytes(2 * 1024 * 1024), 64 * 1024));
    assert.equal(ok.status, 200);
  });
});

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { NODE_MAX_HEADER_SIZE, isRequestLine, lineHeadAfter } from '../../src/ingest/limits.js';
import { ImportFormatError, fromHarEntry, fromNdjsonRecord } from '../../src/transfer/import-format.js';
import { runCli } from '../helpers/cli.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const json = (b: Buffer) => JSON.parse(b.toString()) as { error: string; code: string };

/**
 * Sends each part as its own write (a pause between them, so the server reads them apart) and
 * collects everything until the server closes the connection. Fails if the server leaves the
 * connection open: an unanswered request must not hang its client.
 */
function untilClosed(url: string, parts: string[], pauseMs = 50, timeoutMs = 5000): Promise<Buffer> {
  const u = new URL(url);
  return new Promise((resolve, reject) => {
    const socket = connect(Number(u.port), u.hostname);
    const got: Buffer[] = [];
    const timer = setTimeout(() => {
      socket.destroy();
      reject(new Error(`connection still open after ${timeoutMs} ms; got ${JSON.stringify(Buffer.concat(got).toString('latin1'))}`));
    }, timeoutMs);
    socket.on('data', (d: Buffer) => got.push(d));
    socket.on('error', () => {}); // a write after the server closed: the close below still settles it
    socket.on('close', () => {
      clearTimeout(timer);
      resolve(Buffer.concat(got));
    });
    socket.on('connect', async () => {
      for (const p of parts) {
        if (socket.destroyed || socket.writableEnded) return;
        socket.write(p);
        await new Promise((r) => setTimeout(r, pauseMs));
      }
    });
  });
}

/** Status lines of every answer on one connection (interim ones included), Content-Length framed. */
function statusLines(raw: Buffer): string[] {
  const out: string[] = [];
  for (let p = 0, end = raw.indexOf('\r\n\r\n'); end !== -1; end = raw.indexOf('\r\n\r\n', p)) {
    const head = raw.subarray(p, end).toString('latin1');
    out.push(head.split('\r\n')[0]!);
    p = end + 4 + Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
  }
  return out;
}

describe("which line Node's header limit tripped in", () => {
  it('lineHeadAfter: the start of the line in progress, carried across reads', () => {
    const b = (t: string) => Buffer.from(t, 'latin1');
    const cases: Array<[before: string, chunk: string, end: number, want: string]> = [
      ['', 'POST /b/x HTTP/1.1\r\nHost: x\r\nX-Big: hh', 38, 'X-Big: hh'],
      ['', 'POST /b/x HTTP/1.1\r\nHost: x\r\nX-Big: hh', 32, 'X-B'],
      ['X-Big: hh', 'hhhh', 4, 'X-Big: hhhhhh'],
      ['GET /b/hooks?q=qqqqqqqqqqqqqqqqq', 'qqq HTTP/1.1\r\n', 3, 'GET /b/hooks?q=qqqqqqqqqqqqqqqqq'],
      ['GET /b/x', ' HTTP/1.1\r\nX: 1', 13, 'X:'],
      ['X-A', 'anything', 0, 'X-A'],
      ['', 'a\n', 2, ''],
      ['', 'x'.repeat(100), 100, 'x'.repeat(32)],
    ];
    for (const [before, chunk, end, want] of cases)
      assert.equal(lineHeadAfter(before, b(chunk), end), want, JSON.stringify([before, chunk, end]));
  });

  it('isRequestLine: a method and a space, not a name and a colon', () => {
    for (const head of ['GET /b/x', 'POST http://h/b/x?q', 'M-SEARCH *']) assert.equal(isRequestLine(head), true, head);
    for (const head of ['X-Big: hh', 'Host:x', 'X-Long-Name-Without-Colon-Yet', '', ' folded'])
      assert.equal(isRequestLine(head), false, head);
  });
});

describe('trailers in import records', () => {
  const ndjson = (trailers: unknown) => ({
    method: 'POST',
    path: '',
    query: null,
    headers: [['Transfer-Encoding', 'chunked']],
    body: 'x',
    trailers,
  });
  const har = (trailers: unknown) => ({
    request: { method: 'POST', url: 'http://h/b/x', headers: [], postData: { text: 'x' }, _trailers: trailers },
  });

  it('are read from NDJSON `trailers` and HAR `request._trailers`; none when absent or empty', () => {
    assert.deepEqual(
      fromNdjsonRecord(
        ndjson([
          ['X-Signature', 'a'],
          ['x-signature', 'b'],
        ]),
      ).rawTrailers,
      ['X-Signature', 'a', 'x-signature', 'b'],
    );
    assert.deepEqual(fromHarEntry(har([{ name: 'X-Signature', value: 'a' }])).rawTrailers, ['X-Signature', 'a']);
    for (const none of [undefined, null, []]) {
      assert.equal('rawTrailers' in fromNdjsonRecord(ndjson(none)), false);
      assert.equal('rawTrailers' in fromHarEntry(har(none)), false);
    }
  });

  it('are held to what ingest would take: field bytes, 2,000 fields, 64 KiB', () => {
    const bad: Array<[unknown, RegExp]> = [
      [[['X-A', 'a\r\nX-B: b']], /trailer X-A has a value with a control byte/],
      [[['X A', 'a']], /trailer name "X A" is not an HTTP token/],
      [[['X-A']], /trailers must be a list of \[name, value\] pairs/],
      ['X-A: a', /trailers must be a list/],
      [Array.from({ length: 2001 }, (_, i) => [`t${i}`, '1']), /more than 2000 trailers/],
      [[['X-Big', 'v'.repeat(70_000)]], /trailers over 65536 bytes/],
    ];
    for (const [trailers, message] of bad)
      assert.throws(
        () => fromNdjsonRecord(ndjson(trailers)),
        (e: unknown) => e instanceof ImportFormatError && message.test(e.message),
        JSON.stringify(trailers).slice(0, 60),
      );
    assert.throws(() => fromHarEntry(har([{ name: 'X-A', value: 'a\u0000' }])), /trailer X-A has a value with a control byte/);
  });
});

describe('protocol corners', () => {
  let s: TestServer;
  let count: () => number;
  before(async () => {
    s = await startTestServer();
    await s.store.createBucket({ name: 'hooks' });
    await s.store.createBucket({ name: 'small', maxBody: 1024 });
    await s.store.createBucket({ name: 'copy' });
    const reader = new BetterSqlite3(s.db, { readonly: true });
    const stmt = reader.prepare('select count(*) from requests').pluck();
    count = () => stmt.get() as number;
  });
  after(() => s.stop());

  async function refused(parts: string | string[], status: number, code: string) {
    const before = count();
    const res = await rawRequest(s.url, parts, { waitForClose: true, chunkDelayMs: 50 });
    assert.equal(res.status, status, res.raw.toString('latin1').slice(0, 300));
    assert.equal(json(res.body).code, code);
    assert.equal(count(), before, 'nothing stored');
  }

  describe("header size past Node's parser limit", () => {
    // Over Node's limit (request line + headers), which sits above ours, so its parser trips first.
    const over = NODE_MAX_HEADER_SIZE + 1000;

    it('a long header value behind a short request line, sent in one write: 431, not 414', async () => {
      await refused(
        `POST /b/hooks HTTP/1.1\r\nHost: x\r\nX-Big: ${'h'.repeat(over)}\r\nContent-Length: 0\r\n\r\n`,
        431,
        'headers_too_large',
      );
    });

    it('a long header value split across writes: 431', async () => {
      await refused(
        ['POST /b/hooks HTTP/1.1\r\nHost: x\r\nX-Big: ', 'h'.repeat(over / 2), 'h'.repeat(over / 2), '\r\nContent-Length: 0\r\n\r\n'],
        431,
        'headers_too_large',
      );
    });

    it('a long URL split across two writes, the second ending its line early: 414', async () => {
      // The limit trips in the second write, whose first LF comes after only 5,000 bytes.
      const first = `GET /b/hooks?q=${'q'.repeat(NODE_MAX_HEADER_SIZE - 2000)}`;
      await refused([first, `${'q'.repeat(5000)} HTTP/1.1\r\nHost: x\r\n\r\n`], 414, 'uri_too_long');
    });
  });

  describe('chunked trailers', () => {
    const chunked = (trailers: string) =>
      `POST /b/hooks/t HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nTrailer: X-Signature\r\n\r\n5\r\nhello\r\n0\r\n${trailers}\r\n`;
    let id: string;

    it('are stored with the request, in order, case and repeats as received', async () => {
      const res = await rawRequest(s.url, chunked('X-Signature: abc\r\nx-signature: def\r\nX-Empty: \r\n'));
      assert.equal(res.status, 200, res.raw.toString('latin1'));
      id = res.headers['x-hookbucket-request-id']!;
      const stored = await s.store.getRequest(id);
      assert.deepEqual(stored?.rawTrailers, ['X-Signature', 'abc', 'x-signature', 'def', 'X-Empty', '']);
      assert.equal(stored?.body.toString(), 'hello');
      // A request without trailers reads back with none.
      const plain = await rawRequest(s.url, 'POST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 1\r\n\r\nx');
      assert.deepEqual((await s.store.getRequest(plain.headers['x-hookbucket-request-id']!))?.rawTrailers, []);
    });

    it('requests show prints them after the body; --json keeps them as pairs', async () => {
      const db = ['--db', s.db];
      const human = await runCli([...db, 'requests', 'show', id]);
      assert.equal(human.code, 0, human.stderr);
      assert.match(
        human.text,
        /body:\n {2}hello\n\ntrailers \(3, as received; stored, not forwarded; credentials redacted\):\n {2}X-Signature: \[redacted\]\n {2}x-signature: \[redacted\]\n {2}X-Empty: \n/,
      );
      const revealed = await runCli([...db, 'requests', 'show', id, '--reveal']);
      assert.match(revealed.text, /\n {2}X-Signature: abc\n {2}x-signature: def\n/);
      const j = (await runCli([...db, 'requests', 'show', id, '--json'])).json();
      assert.deepEqual(j.trailers, [
        ['X-Signature', 'abc'],
        ['x-signature', 'def'],
        ['X-Empty', ''],
      ]);
      // No block and an empty list when there were none.
      const plainId = (await s.store.listRequests('hooks', {}, { limit: 1 })).requests[0]!.id;
      assert.doesNotMatch((await runCli([...db, 'requests', 'show', plainId])).text, /trailers/);
      assert.deepEqual((await runCli([...db, 'requests', 'show', plainId, '--json'])).json().trailers, []);
    });

    it('round-trip through NDJSON and HAR export and import', async () => {
      const db = ['--db', s.db];
      const file = (name: string) => join(s.dir, name);
      const ok = async (...args: string[]) => {
        const r = await runCli([...db, ...args]);
        assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
        return r;
      };
      await ok('requests', 'export', 'hooks', '--id', id, '--out', file('t.ndjson'));
      assert.deepEqual(JSON.parse(readFileSync(file('t.ndjson'), 'utf8')).trailers, [
        ['X-Signature', 'abc'],
        ['x-signature', 'def'],
        ['X-Empty', ''],
      ]);
      await ok('requests', 'export', 'hooks', '--id', id, '--format', 'har', '--out', file('t.har'));
      const har = JSON.parse(readFileSync(file('t.har'), 'utf8'));
      assert.deepEqual(har.log.entries[0].request._trailers, [
        { name: 'X-Signature', value: 'abc' },
        { name: 'x-signature', value: 'def' },
        { name: 'X-Empty', value: '' },
      ]);
      for (const name of ['t.ndjson', 't.har']) {
        const imp = (await ok('requests', 'import', 'copy', file(name), '--json')).json();
        const copy = await s.store.getRequest(imp.first_id);
        assert.deepEqual(copy?.rawTrailers, ['X-Signature', 'abc', 'x-signature', 'def', 'X-Empty', ''], name);
        assert.equal(copy?.body.toString(), 'hello');
      }
    });

    it("over hookbucket's header limits: 431, nothing stored", async () => {
      const many = (n: number, bytes: number) => Array.from({ length: n }, (_, i) => `X-T${i}: ${'t'.repeat(bytes)}\r\n`).join('');
      await refused(chunked(many(70, 1000)), 431, 'headers_too_large');
      await refused(chunked(many(2001, 1)), 431, 'too_many_headers');
    });

    it("over Node's own trailer limit: 431 answered, the connection closed, nothing stored", async () => {
      await refused(chunked(`X-Big: ${'t'.repeat(NODE_MAX_HEADER_SIZE + 1000)}\r\n`), 431, 'headers_too_large');
    });
  });

  describe('Upgrade', () => {
    const upgrade = 'POST /b/hooks/up HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\nContent-Length: 2\r\n\r\nup';
    const second = 'POST /b/hooks/second HTTP/1.1\r\nHost: x\r\nContent-Length: 6\r\n\r\nsecond';

    it('is stored and answered with Connection: close; a request pipelined behind it is closed on, not stored', async () => {
      const before = count();
      const raw = await untilClosed(s.url, [upgrade + second]);
      assert.deepEqual(statusLines(raw), ['HTTP/1.1 200 OK']);
      assert.match(raw.toString('latin1'), /\r\nconnection: close\r\n/i);
      assert.equal(count(), before + 1);
      const [stored] = (await s.store.listRequests('hooks', {}, { limit: 1 })).requests;
      assert.equal(stored?.path, '/up');
      // An Upgrade header without `Connection: upgrade` is an ordinary header: keep-alive as usual.
      const plain = 'POST /b/hooks HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nContent-Length: 1\r\n\r\nx';
      const last = 'POST /b/hooks HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0\r\n\r\n';
      assert.deepEqual(statusLines(await untilClosed(s.url, [plain + second + last])), [
        'HTTP/1.1 200 OK',
        'HTTP/1.1 200 OK',
        'HTTP/1.1 200 OK',
      ]);
      assert.equal(count(), before + 4);
    });

    it('a request sent behind it in a later write is not stored or answered either', async () => {
      const before = count();
      const raw = await untilClosed(s.url, [upgrade, second, second]);
      assert.deepEqual(statusLines(raw), ['HTTP/1.1 200 OK']);
      assert.equal(count(), before + 1);
    });
  });

  describe('HTTP/1.0 and Expect: 100-continue', () => {
    it('no interim 100 to an HTTP/1.0 client; the request is still stored, or refused by the same rules', async () => {
      const before = count();
      const raw = await untilClosed(s.url, [
        'POST /b/hooks/ten HTTP/1.0\r\nHost: x\r\nContent-Length: 3\r\nExpect: 100-continue\r\n\r\n',
        'abc',
      ]);
      assert.deepEqual(statusLines(raw), ['HTTP/1.1 200 OK']);
      assert.equal(count(), before + 1);
      const id = /x-hookbucket-request-id: (\S+)/i.exec(raw.toString('latin1'))![1]!;
      assert.equal((await s.store.getRequest(id))?.body.toString(), 'abc');
      // Over the body limit: 413, still without a 100.
      const raw413 = await untilClosed(s.url, [
        'POST /b/small HTTP/1.0\r\nHost: x\r\nContent-Length: 5000\r\nExpect: 100-continue\r\n\r\n',
      ]);
      assert.deepEqual(statusLines(raw413), ['HTTP/1.1 413 Payload Too Large']);
      assert.equal(count(), before + 1);
    });
  });

  it('counts each refusal under its reason', async () => {
    await s.close(); // flushes buffered counts
    const other = await s.store.unattributedRejections();
    // Node's limit: the two header values and the oversized trailer.
    assert.equal(other.headers_too_large, 3, JSON.stringify(other));
    assert.equal(other.uri_too_long, 1, JSON.stringify(other));
    const hooks = await s.store.bucketCounts('hooks');
    assert.deepEqual(hooks.rejections, { headers_too_large: 1, too_many_headers: 1 });
    const small = await s.store.bucketCounts('small');
    assert.deepEqual(small.rejections, { body_too_large: 1 });
  });
});

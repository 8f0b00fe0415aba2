import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import type { StoredRequest } from '../../src/store/store.js';
import { curlCommand } from '../../src/transfer/export-format.js';

const stored = (rawHeaders: string[], body = Buffer.from('hello')): StoredRequest => ({
  id: '019ae0c4-0000-7000-8000-000000000002',
  bucket: 'b',
  disposition: 'accepted',
  verdict: null,
  dedupKey: null,
  duplicateOf: null,
  receivedAt: Date.UTC(2026, 11, 2),
  method: 'POST',
  path: '/evt',
  query: null,
  rawHeaders,
  body,
  size: body.length,
  sha256: 'x',
  peer: null,
  state: 'none',
});

describe('curl export never sends both Content-Length and Transfer-Encoding', () => {
  let server: Server;
  let url: string;
  const received: Array<{ rawHeaders: string[]; body: Buffer }> = [];
  before(async () => {
    server = createServer((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (c: Buffer) => chunks.push(c));
      req.on('end', () => {
        received.push({ rawHeaders: req.rawHeaders, body: Buffer.concat(chunks) });
        res.end('ok');
      });
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    url = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  });
  after(() => new Promise((r) => server.close(r)));

  const pairs: Array<[string, string[]]> = [
    ['Transfer-Encoding first', ['Transfer-Encoding', 'chunked', 'Content-Length', '5']],
    ['Content-Length first, lower case', ['content-length', '5', 'transfer-encoding', 'chunked']],
  ];
  for (const [what, rawHeaders] of pairs) {
    it(`${what}: the Content-Length goes, the body is sent chunked and arrives whole`, async () => {
      const cmd = curlCommand(stored(['X-A', '1', ...rawHeaders]), url);
      assert.doesNotMatch(cmd, /content-length/i);
      assert.match(cmd, /-H '?transfer-encoding: chunked'?/i);
      const before = received.length;
      const out = await new Promise<string>((resolve, reject) =>
        execFile('bash', ['-c', cmd], { encoding: 'utf8' }, (err, stdout, stderr) => (err ? reject(new Error(stderr)) : resolve(stdout))),
      );
      assert.equal(out, 'ok\n', 'Node answers 400 to a request with both (and -w adds the newline after the response)');
      assert.equal(received.length, before + 1);
      const got = received[received.length - 1]!;
      const names = got.rawHeaders.filter((_, i) => i % 2 === 0).map((n) => n.toLowerCase());
      assert.ok(names.includes('transfer-encoding'));
      assert.ok(!names.includes('content-length'));
      assert.equal(got.body.toString(), 'hello');
    });
  }

  it('a stored Content-Length alone is still sent as stored', () => {
    assert.match(curlCommand(stored(['Content-Length', '5']), url), / -H 'Content-Length: 5' /);
  });
});

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import type { StoredRequest } from '../../src/store/store.js';
import { curlCommand, harEntry, ndjsonLine } from '../../src/transfer/export-format.js';
import { ImportFormatError, detectFormat, fromHarEntry, fromNdjsonRecord, splitRawUrl } from '../../src/transfer/import-format.js';
import { bashQuote, printfBytes, shellWord } from '../../src/transfer/shell-quote.js';

const bash = (script: string) => execFileSync('bash', ['-c', script]);

describe('shell quoting gives the exact bytes back through bash', () => {
  it("bashQuote: safe words, single quotes, and $'\\xHH' for bytes outside printable ASCII", () => {
    assert.equal(bashQuote('X-Event:'), 'X-Event:');
    assert.equal(bashQuote("it's"), `'it'\\''s'`);
    const cases = [
      'plain',
      'it\'s "quoted" $HOME `id` \\ %',
      'caf\u00e9',
      "\u00ff\u0080\t\\'",
      Buffer.from(randomBytes(64).filter((b) => b !== 0)).toString('latin1'),
    ];
    for (const text of cases) {
      assert.ok(bash(`printf %s ${bashQuote(text)}`).equals(Buffer.from(text, 'latin1')), JSON.stringify(text));
    }
    assert.throws(() => bashQuote('\u2603'), RangeError);
  });

  it('printfBytes: any bytes, NUL, %, \\ and quotes included', () => {
    for (const bytes of [Buffer.from([0, 0x25, 0x5c, 0x27, 0x0a, 0xff, 0x31, 0x32]), randomBytes(2048), Buffer.alloc(0)]) {
      assert.ok(bash(`printf ${printfBytes(bytes)}`).equals(bytes));
    }
  });

  it('shellWord: any text typed by a person', () => {
    assert.equal(bash(`printf %s ${shellWord("a b 'c' ✓")}`).toString('utf8'), "a b 'c' ✓");
  });
});

const request = (over: Partial<StoredRequest> = {}): StoredRequest => ({
  id: '019ae0c4-0000-7000-8000-000000000001',
  bucket: 'b',
  disposition: 'accepted',
  verdict: null,
  dedupKey: null,
  duplicateOf: null,
  receivedAt: Date.UTC(2026, 11, 2),
  method: 'POST',
  path: '/a/%2e%2e/b',
  query: 'x=1&x=2',
  rawHeaders: ['Host', 'h', 'X-Dup', '1', 'x-dup', '2', 'X-Latin', 'caf\u00e9'],
  body: Buffer.from([0xff, 0x00, 0x41]),
  size: 3,
  sha256: 'x',
  peer: null,
  state: 'none',
  ...over,
});

describe('export formats read back by import', () => {
  it('ndjson and HAR records give back method, raw target, raw headers and body bytes', () => {
    for (const r of [
      request(),
      request({ body: Buffer.from('{"é":1}'), query: null, path: '' }),
      request({ body: Buffer.alloc(0), method: 'GET' }),
    ]) {
      const want = { method: r.method, path: r.path, query: r.query, rawHeaders: r.rawHeaders, body: r.body };
      assert.deepEqual(fromNdjsonRecord(JSON.parse(ndjsonLine(r))), want);
      assert.deepEqual(fromHarEntry(JSON.parse(harEntry(r, 'http://x/b/b'))), want);
    }
  });

  it('a HAR from another tool: target from the raw URL, /b/<name> dropped, pseudo-headers skipped', () => {
    const entry = {
      request: {
        method: 'POST',
        url: 'https://h.example/b/stripe/a/%2e%2e/b?q=1#frag',
        headers: [
          { name: ':authority', value: 'h' },
          { name: 'A', value: '1' },
        ],
        postData: { text: 'hi' },
      },
    };
    assert.deepEqual(fromHarEntry(entry), {
      method: 'POST',
      path: '/a/%2e%2e/b',
      query: 'q=1',
      rawHeaders: ['A', '1'],
      body: Buffer.from('hi'),
    });
    assert.deepEqual(splitRawUrl('http://h'), { path: '', query: null });
    assert.deepEqual(splitRawUrl('/p?'), { path: '/p', query: '' });
  });

  it('refuses what a socket could not have carried', () => {
    const base = JSON.parse(ndjsonLine(request()));
    for (const bad of [
      { ...base, method: 'G T' },
      { ...base, path: 'no-slash' },
      { ...base, path: '/a b' },
      { ...base, headers: [['X', 'a\r\nb']] },
      { ...base, headers: [['X', '\u2603']] },
      { ...base, headers: [['bad name', 'x']] },
      { ...base, headers: [['X']] },
      { ...base, body: '***', body_encoding: 'base64' },
      { ...base, body_encoding: 'gzip' },
      [],
    ]) {
      assert.throws(() => fromNdjsonRecord(bad), ImportFormatError, JSON.stringify(bad).slice(0, 80));
    }
  });

  it('detects NDJSON from a whole record on the first line, HAR otherwise', () => {
    assert.equal(detectFormat(ndjsonLine(request()).trim()), 'ndjson');
    assert.equal(detectFormat('{"log":{"version":"1.2","entries":['), 'har');
    assert.equal(detectFormat('{'), 'har');
  });

  it('curl: method flags, suppressed defaults, Host left to curl, body from stdin', () => {
    const post = curlCommand(request(), 'http://t/b/c');
    assert.match(post, /^# 019ae0c4-0000-7000-8000-000000000001 2026-12-02T00:00:00.000Z POST \/a\/%2e%2e\/b\?x=1&x=2\n/);
    assert.match(
      post,
      /\nprintf '\\377\\000A' \| curl -sS -g --path-as-is -w '\\n' -H User-Agent: -H Accept: -H Content-Type: -H Expect: -H 'X-Dup: 1' -H 'x-dup: 2' -H \$'X-Latin: caf\\xe9' --data-binary @- 'http:\/\/t\/b\/c\/a\/%2e%2e\/b\?x=1&x=2'\n$/,
    );
    const get = curlCommand(
      request({ method: 'GET', body: Buffer.alloc(0), rawHeaders: ['User-Agent', 'u', 'Accept', '*/*', 'X-Empty', ''] }),
      'http://t',
    );
    assert.match(get, /\ncurl -sS -g --path-as-is -w '\\n' -H 'User-Agent: u' -H 'Accept: \*\/\*' -H 'X-Empty;' /);
    assert.match(curlCommand(request({ method: 'HEAD', body: Buffer.alloc(0) }), 'http://t'), / -I /);
    assert.match(curlCommand(request({ method: 'PUT' }), 'http://t'), / -X PUT /);
    assert.match(curlCommand(request({ method: 'POST', body: Buffer.alloc(0) }), 'http://t'), / -X POST /);
  });
});

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { openSqlite, type SqliteDb } from '../../src/store/sqlite/open.js';
import { runCli } from '../helpers/cli.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * Export and import through the real binary, on requests a real server stored from exact bytes
 * sent over a socket: duplicate mixed-case headers, a latin1 header byte, a `%2e%2e` path, raw
 * queries, an empty header value, chunked framing, and bodies that are JSON with non-ASCII text,
 * binary (NUL, invalid UTF-8, quote, percent and backslash bytes), empty, and shell metacharacters.
 */
// Run twice: every command on the database file (--db), and every command but import (which needs
// the database itself) through the server's admin listener (--api, issue 14 point 6).
for (const mode of ['db', 'api'] as const)
  describe(`requests export / import (real binary, real server, ${mode === 'db' ? '--db' : 'export through --api'})`, () => {
    let s: TestServer;
    /** The database file: what import needs. */
    let db: string[];
    /** Where every other command goes. */
    let target: string[];
    let raw: SqliteDb;
    let host: string;
    const binary = Buffer.concat([
      Buffer.from([0x00, 0xff, 0xfe, 0x80, 0x0a, 0x27, 0x25, 0x5c, 0x00]),
      randomBytes(3000),
      Buffer.from([0xc3]),
    ]);
    const shellText = `it's "quoted" $(touch /tmp/hookbucket-pwned) \`id\` %s %% \\n \\\\ ${'\n'}line2\r\n\ttab é ✓ \u{1f600}`;

    function request(
      method: string,
      target: string,
      headers: Array<[string, string]>,
      body: Buffer,
      framing: 'length' | 'chunked' = 'length',
    ): Buffer {
      const all: Array<[string, string]> = [
        ['Host', host],
        ...headers,
        framing === 'chunked' ? ['Transfer-Encoding', 'chunked'] : ['Content-Length', String(body.length)],
      ];
      const head = Buffer.from(`${method} ${target} HTTP/1.1\r\n${all.map(([n, v]) => `${n}: ${v}\r\n`).join('')}\r\n`, 'latin1');
      const framed =
        framing === 'chunked' ? Buffer.concat([Buffer.from(`${body.length.toString(16)}\r\n`), body, Buffer.from('\r\n0\r\n\r\n')]) : body;
      return Buffer.concat([head, framed]);
    }

    async function send(payload: Buffer): Promise<void> {
      const res = await rawRequest(s.url, payload);
      assert.equal(res.status, 200, res.body.toString());
    }

    const cli = async (...args: string[]) => {
      const r = await runCli([...(args[0] === 'requests' && args[1] === 'import' ? db : target), ...args]);
      assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
      return r;
    };

    /** An NDJSON export's records, without what a new request legitimately changes. */
    const exported = (file: string) =>
      readFileSync(file, 'utf8')
        .split('\n')
        .filter((l) => l !== '')
        .map((l) => {
          const { id, bucket, received_at, state, ...rest } = JSON.parse(l) as Record<string, unknown>;
          assert.match(String(id), /^[0-9a-f-]{36}$/);
          assert.ok(bucket && received_at && state);
          return rest;
        });

    const deliveries = (bucket: string) => raw.prepare('select count(*) from deliveries where bucket = ?').pluck().get(bucket) as number;
    const file = (name: string) => join(s.dir, name);

    before(async () => {
      s = await startTestServer();
      db = ['--db', s.db];
      target = mode === 'db' ? db : ['--api', s.admin!.url];
      host = new URL(s.url).host;
      await cli('bucket', 'create', 'src', '--destination', 'http://127.0.0.1:9/unused');
      await cli('bucket', 'create', 'copy');
      await cli('bucket', 'create', 'harcopy', '--destination', 'http://127.0.0.1:9/unused');
      await cli('bucket', 'create', 'quiet', '--destination', 'http://127.0.0.1:9/unused');
      await cli('bucket', 'create', 'curlcopy');
      raw = openSqlite(s.db, { durability: 'normal', busyTimeoutMs: 5000 });

      await send(
        request(
          'POST',
          '/b/src/a/%2e%2e/b?x=1&y=%20z&x=2',
          [
            ['Content-Type', 'application/json'],
            ['X-Dup', 'one'],
            ['x-dup', 'two'],
            ['X-DUP', 'three'],
            ['X-Latin', 'caf\u00e9'],
            ['X-Empty', ''],
          ],
          Buffer.from('{"text":"é ✓ 😀","n":1}'),
        ),
      );
      await send(request('POST', '/b/src/bin', [['Content-Type', 'application/octet-stream']], binary));
      await send(request('GET', '/b/src?only=query', [['Accept', 'text/plain']], Buffer.alloc(0)));
      await send(
        request(
          'PUT',
          '/b/src/chunked/',
          [['User-Agent', 'Stripe/1.0 (+https://stripe.com/docs/webhooks)']],
          Buffer.from('hello chunks'),
          'chunked',
        ),
      );
      await send(
        request(
          'POST',
          '/b/src/shell%27s?q=%27%22',
          [
            ['Content-Type', 'text/plain; charset=utf-8'],
            ['X-Quote', `it's "x" $HOME`],
          ],
          Buffer.from(shellText),
        ),
      );
    });
    after(async () => {
      raw?.close();
      await s?.stop();
    });

    it('stored what was sent (the starting point of every round trip)', async () => {
      const list = (await cli('requests', 'list', 'src', '--json')).json().requests as Array<{
        id: string;
        path: string;
        query: string | null;
      }>;
      assert.deepEqual(list.map((r) => [r.path, r.query]).reverse(), [
        ['/a/%2e%2e/b', 'x=1&y=%20z&x=2'],
        ['/bin', null],
        ['', 'only=query'],
        ['/chunked/', null],
        ['/shell%27s', 'q=%27%22'],
      ]);
      const first = (await cli('requests', 'show', list[list.length - 1]!.id, '--json')).json();
      assert.deepEqual(first.headers.slice(1), [
        ['Content-Type', 'application/json'],
        ['X-Dup', 'one'],
        ['x-dup', 'two'],
        ['X-DUP', 'three'],
        ['X-Latin', 'caf\u00e9'],
        ['X-Empty', ''],
        ['Content-Length', String(Buffer.byteLength('{"text":"é ✓ 😀","n":1}'))],
      ]);
      const bin = await cli('requests', 'show', list[list.length - 2]!.id, '--raw');
      assert.ok(bin.stdout.equals(binary));
    });

    it('ndjson: export, import into another bucket, export again: identical requests; no deliveries', async () => {
      await cli('requests', 'export', 'src', '--out', file('src.ndjson'));
      const imp = (await cli('requests', 'import', 'copy', file('src.ndjson'), '--json')).json();
      assert.equal(imp.format, 'ndjson');
      assert.equal(imp.imported, 5);
      assert.equal(imp.deliveries, 0);
      await cli('requests', 'export', 'copy', '--format', 'ndjson', '--out', file('copy.ndjson'));

      const a = exported(file('src.ndjson'));
      const b = exported(file('copy.ndjson'));
      assert.equal(a.length, 5);
      assert.deepEqual(b, a);
      const bin = a[1]!;
      assert.equal(bin.body_encoding, 'base64');
      assert.ok(Buffer.from(String(bin.body), 'base64').equals(binary));
      assert.equal(a[0]!.body_encoding, 'utf8');

      const copies = (await cli('requests', 'list', 'copy', '--json')).json().requests as Array<{ id: string; state: string }>;
      assert.deepEqual(
        copies.map((r) => r.state),
        ['none', 'none', 'none', 'none', 'none'],
      );
      const srcIds = new Set(((await cli('requests', 'list', 'src', '--json')).json().requests as Array<{ id: string }>).map((r) => r.id));
      assert.ok(
        copies.every((r) => !srcIds.has(r.id)),
        'new ids',
      );
      assert.equal(deliveries('copy'), 0);

      // Exported with a filter, the same flags as list.
      const one = await cli('requests', 'export', 'src', '--path', '/bin');
      assert.equal(one.text.trim().split('\n').length, 1);
      assert.equal(JSON.parse(one.text).path, '/bin');
    });

    it('har: a valid HAR 1.2 whose round trip is exact; --deliver creates first deliveries, without it none', async () => {
      await cli('requests', 'export', 'src', '--format', 'har', '--out', file('src.har'), '--base-url', 'https://hooks.example.com/b/src');
      const har = JSON.parse(readFileSync(file('src.har'), 'utf8'));
      assert.equal(har.log.version, '1.2');
      assert.equal(har.log.entries.length, 5);
      const [first, bin] = har.log.entries;
      assert.equal(first.request.url, 'https://hooks.example.com/b/src/a/%2e%2e/b?x=1&y=%20z&x=2', 'raw target, not normalised');
      assert.deepEqual(first.request.queryString, [
        { name: 'x', value: '1' },
        { name: 'y', value: ' z' },
        { name: 'x', value: '2' },
      ]);
      assert.deepEqual(first.request.headers.slice(2, 5), [
        { name: 'X-Dup', value: 'one' },
        { name: 'x-dup', value: 'two' },
        { name: 'X-DUP', value: 'three' },
      ]);
      assert.equal(first._hookbucket.path, '/a/%2e%2e/b');
      assert.equal(bin.request.postData._encoding, 'base64');
      assert.ok(Buffer.from(bin.request.postData.text, 'base64').equals(binary));
      assert.equal(first.request.postData._encoding, undefined);

      const imp = (await cli('requests', 'import', 'harcopy', file('src.har'), '--deliver', '--json')).json();
      assert.deepEqual([imp.format, imp.imported, imp.deliveries], ['har', 5, 5]);
      assert.equal(deliveries('harcopy'), 5);
      const states = (
        (await cli('requests', 'list', 'harcopy', '--json')).json().requests as Array<{ state: string; generation: number }>
      ).map((r) => [r.state, r.generation]);
      assert.deepEqual(states, Array(5).fill(['pending', 1]));

      await cli('requests', 'export', 'harcopy', '--out', file('harcopy.ndjson'));
      assert.deepEqual(exported(file('harcopy.ndjson')), exported(file('src.ndjson')));
      await cli(
        'requests',
        'export',
        'harcopy',
        '--format',
        'har',
        '--out',
        file('harcopy.har'),
        '--base-url',
        'https://hooks.example.com/b/src',
      );
      const again = JSON.parse(readFileSync(file('harcopy.har'), 'utf8'));
      assert.deepEqual(
        again.log.entries.map((e: any) => e.request),
        har.log.entries.map((e: any) => e.request),
      );

      const quiet = await cli('requests', 'import', 'quiet', file('src.har'));
      assert.match(quiet.text, /imported 5 requests into quiet .*no deliveries created/);
      assert.equal(deliveries('quiet'), 0, 'a bucket with a destination still gets no deliveries without --deliver');
    });

    it('curl: the commands run with bash and store the same requests again', async () => {
      await cli('requests', 'export', 'src', '--format', 'curl', '--base-url', `${s.url}/b/curlcopy`, '--out', file('src.sh'));
      const script = readFileSync(file('src.sh'), 'utf8');
      assert.equal(script.match(/^curl |\| curl /gm)?.length, 5);
      const run = await new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
        execFile('bash', [file('src.sh')], { encoding: 'utf8' }, (err, stdout, stderr) =>
          resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
        ),
      );
      assert.equal(run.code, 0, run.stderr);
      assert.equal(run.stdout.match(/"id":/g)?.length, 5, run.stdout);

      await cli('requests', 'export', 'curlcopy', '--out', file('curlcopy.ndjson'));
      // Host is the target's own (here the same server, so the same value) and comes first as sent.
      assert.deepEqual(exported(file('curlcopy.ndjson')), exported(file('src.ndjson')));
    });

    it('refuses what it cannot do: bad files store nothing, --deliver needs a destination, --json needs --out', async () => {
      const lines = readFileSync(file('src.ndjson'), 'utf8').trim().split('\n');
      writeFileSync(file('bad.ndjson'), `${lines[0]}\n${lines[1]!.replace('"method":"POST"', '"method":"P O"')}\n`);
      const bad = await runCli([...db, 'requests', 'import', 'copy', file('bad.ndjson')]);
      assert.equal(bad.code, 2, bad.stderr);
      assert.match(bad.stderr, /line 2: method/);
      writeFileSync(file('bad2.ndjson'), `${lines[0]}\n{"method":"POST","headers":[["X-Bad","\\u2603"]]}\n`);
      const bad2 = await runCli([...db, 'requests', 'import', 'copy', file('bad2.ndjson')]);
      assert.equal(bad2.code, 2, bad2.stderr);
      assert.match(bad2.stderr, /line 2: header X-Bad/);
      writeFileSync(file('bad.har'), '{"log":{"version":"1.2"}}');
      assert.equal((await runCli([...db, 'requests', 'import', 'copy', file('bad.har')])).code, 2);
      assert.equal(
        ((await cli('requests', 'list', 'copy', '--json')).json().requests as unknown[]).length,
        5,
        'nothing stored by a refused import',
      );

      const noDest = await runCli([...db, 'requests', 'import', 'copy', file('src.ndjson'), '--deliver']);
      assert.equal(noDest.code, 2);
      assert.match(noDest.stderr, /no destination/);
      assert.equal((await runCli([...db, 'requests', 'import', 'copy', file('missing.ndjson')])).code, 4);
      assert.equal((await runCli([...db, 'requests', 'import', 'nope', file('src.ndjson')])).code, 4);
      assert.equal((await runCli([...target, 'requests', 'export', 'nope'])).code, 4);
      assert.equal((await runCli([...target, 'requests', 'export', 'src', '--json'])).code, 2);
      assert.equal((await runCli([...target, 'requests', 'export', 'src', '--format', 'xml'])).code, 2);
      assert.equal((await runCli([...target, 'requests', 'export', 'src', '--base-url', 'ftp://x'])).code, 2);

      const summary = (await cli('requests', 'export', 'src', '--state', 'pending', '--out', file('pending.ndjson'), '--json')).json();
      assert.deepEqual([summary.requests, summary.format, summary.filter], [5, 'ndjson', { state: ['pending'] }]);
    });

    it('export and import --help show examples', async () => {
      for (const sub of ['list', 'export', 'import']) {
        const r = await runCli(['requests', sub, '--help']);
        assert.equal(r.code, 0);
        assert.match(r.text, /Examples:\n\s+\$ hookbucket requests /);
      }
    });
  });

/**
 * Issue 10 points 4 and 5 through the real binary: requests carrying terminal escapes, C1, bidi,
 * zero-width, DEL and invalid UTF-8 (over a real socket where ingest stores them, by import, and
 * by direct SQLite writes for what neither lets in), then every human command, asserting that no
 * such character reaches stdout or stderr and that secrets stay hidden until --reveal.
 */
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import Database from 'better-sqlite3';
import { newId } from '../../src/shared/ids.js';
import { BIN } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/** Sets the window title, rings the bell, clears the screen. */
const OSC = '\x1b]0;TITLE\x07\x1b[2J';
const HOSTILE = `${OSC}\u009b2J\u202eevil\u2066\u200b\ufeff\x7f`;

/**
 * What must never reach a terminal: C0 except TAB and LF, DEL, C1 as code points, bidi controls,
 * zero-width and invisible characters, line separators, lone surrogates.
 */
const FORBIDDEN = /[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\ud800-\udfff]/u;

interface Run {
  code: number;
  stdout: Buffer;
  stderr: Buffer;
  text: string;
}

function run(args: string[]): Promise<Run> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { encoding: 'buffer', env: { ...process.env, NO_COLOR: '1' }, maxBuffer: 64 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
        resolve({ code, stdout, stderr, text: stdout.toString('utf8') });
      },
    );
  });
}

/** Valid UTF-8 (no raw invalid byte) holding no forbidden character. */
function assertTerminalSafe(out: Buffer, what: string): void {
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true }).decode(out);
  } catch {
    assert.fail(`${what}: invalid UTF-8 reached the output`);
  }
  const m = FORBIDDEN.exec(text);
  assert.equal(
    m,
    null,
    `${what}: U+${m?.[0].codePointAt(0)?.toString(16).padStart(4, '0')} at ${m?.index} in ${JSON.stringify(text.slice(Math.max(0, (m?.index ?? 0) - 40), (m?.index ?? 0) + 40))}`,
  );
}

function assertSafe(r: Run, what: string): void {
  assertTerminalSafe(r.stdout, `${what} stdout`);
  assertTerminalSafe(r.stderr, `${what} stderr`);
}

const SECRETS = [
  'qs-secret',
  'qs-key',
  'hmac-secret',
  'auth-secret',
  'json-secret',
  'json-pass',
  'form-secret',
  'form-pw',
  'sql-secret',
  'dest-pw',
  'dest-secret',
  'fwd-secret',
];

function assertNoSecret(text: string, what: string): void {
  for (const s of SECRETS) assert.ok(!text.includes(s), `${what} shows ${s}`);
}

describe('nothing hostile reaches the terminal; secrets stay hidden (real binary)', () => {
  let s: TestServer;
  let consumer: Consumer;
  let db: string[];
  const ids: Record<string, string> = {};
  let replayRun: Run;

  async function ingest(name: string, head: string, body: Buffer): Promise<void> {
    const payload = Buffer.concat([Buffer.from(`${head}Content-Length: ${body.length}\r\n\r\n`, 'latin1'), body]);
    const r = await rawRequest(s.url, payload);
    assert.equal(r.status, 200, `${name}: ${r.body.toString()}`);
    ids[name] = JSON.parse(r.body.toString()).id;
  }

  before(async () => {
    s = await startTestServer();
    db = ['--db', s.db];
    // The consumer's 500 carries hostile text; to /bin it is latin1, not UTF-8.
    consumer = await startConsumer((req, res) => {
      res.writeHead(500, { 'content-type': 'text/plain' });
      res.end(
        req.url?.includes('/bin')
          ? Buffer.concat([Buffer.from(`${OSC} caf`), Buffer.from([0xe9, 0x9b])])
          : Buffer.from(`${HOSTILE} consumer said no`),
      );
    });
    const created = await run([
      ...db,
      'bucket',
      'create',
      'hostile',
      '--destination',
      `${consumer.url}/hook?token=dest-secret`,
      '--forward-header',
      'X-Webhook-Key: fwd-secret',
    ]);
    assert.equal(created.code, 0, created.stderr.toString());

    // Over a real socket: ingest stores bytes 0x80–0xff in header values (latin1: 0x9b is U+009B)
    // and any body; it refuses controls in the target and in headers (400), so those go by SQLite.
    await ingest(
      'text',
      'POST /b/hostile/text HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\nX-C1: a\x9bb\r\nX-Bidi: \xe2\x80\xae\xe2\x80\x8b\r\n',
      Buffer.from(`line one ${HOSTILE}\n\tline two \\x1b\n`),
    );
    await ingest(
      'json',
      'POST /b/hostile/json?token=qs-secret&api_key=qs-key&page=2 HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nX-Shopify-Hmac-Sha256: hmac-secret\r\nAuthorization: Bearer auth-secret\r\n',
      Buffer.from(
        JSON.stringify({ text: HOSTILE, token: 'json-secret', auth: { user: 'u', pass: 'json-pass' }, author: { name: 'Ada Lovelace' } }),
      ),
    );
    await ingest(
      'form',
      'POST /b/hostile/slack HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-www-form-urlencoded\r\n',
      Buffer.from('token=form-secret&team_id=T1&password=form-pw&text=%1b%5d0%3bT'),
    );
    await ingest(
      'binary',
      'POST /b/hostile/bin HTTP/1.1\r\nHost: x\r\nContent-Type: text/plain\r\n',
      Buffer.concat([Buffer.from(OSC), Buffer.from([0xff, 0xfe, 0x9b, 0xc3])]),
    );
    await ingest('sql', 'POST /b/hostile/sql HTTP/1.1\r\nHost: x\r\n', Buffer.from('x'));

    // By import: a header value with byte 0x9b, and a body that is text with escapes plus invalid UTF-8.
    const file = join(s.dir, 'hostile.ndjson');
    const imported = {
      method: 'POST',
      path: '/imported',
      query: null,
      headers: [
        ['X-Imp', 'a\u009bb'],
        ['Content-Type', 'text/plain'],
      ],
      body: Buffer.concat([Buffer.from(`${HOSTILE}\n`), Buffer.from([0xff, 0x80])]).toString('base64'),
      body_encoding: 'base64',
    };
    writeFileSync(file, `${JSON.stringify(imported)}\n`);
    const imp = await run([...db, 'requests', 'import', 'hostile', file, '--json']);
    assert.equal(imp.code, 0, imp.stderr.toString());
    ids.imported = JSON.parse(imp.text).first_id;

    // One attempt each: the consumer answers 500 with a hostile body, shown in the timeline.
    const w = await run([...db, 'worker', '--once']);
    assert.equal(w.code, 0, w.stderr.toString());

    // What neither ingest nor import lets in, written straight into the database file.
    const sql = new Database(s.db);
    try {
      sql
        .prepare('UPDATE requests SET path = ?, query = ?, headers = ?, body = ? WHERE id = ?')
        // \ud800 is stored as the invalid UTF-8 bytes ed a0 80 in a TEXT column.
        .run(
          `/p${HOSTILE}\ud800`,
          `x=${OSC}&token=sql-secret`,
          JSON.stringify([`X-${OSC}`, `v${HOSTILE}`, 'Content-Type', 'text/plain']),
          Buffer.from(`${HOSTILE} body`),
          ids.sql,
        );
      sql.prepare('UPDATE attempts SET error_message = ? WHERE request_id = ?').run(`connect ${HOSTILE}`, ids.sql);
      sql
        .prepare("UPDATE buckets SET destination = ?, ack_content_type = ?, ack_body = ?, forward_headers = ? WHERE name = 'hostile'")
        .run(
          `http://user:dest-pw@127.0.0.1:1/${OSC}?token=dest-secret`,
          `text/${OSC}`,
          `ok ${HOSTILE}`,
          JSON.stringify(['X-Webhook-Key', 'fwd-secret', `X-${OSC}`, HOSTILE]),
        );
    } finally {
      sql.close();
    }
    // --to refuses userinfo; a secret query value goes through, and an older row may hold userinfo.
    const replayed = await run([...db, 'replay', 'hostile', '--all', '--yes', '--to', 'http://127.0.0.1:1/r?token=dest-secret']);
    assert.equal(replayed.code, 0, replayed.stderr.toString());
    replayRun = replayed;
    const sql2 = new Database(s.db);
    try {
      sql2.prepare('UPDATE replays SET destination = ?').run(`http://user:dest-pw@127.0.0.1:1/${OSC}?token=dest-secret`);
      sql2
        .prepare('UPDATE deliveries SET destination = ? WHERE destination IS NOT NULL')
        .run(`http://user:dest-pw@127.0.0.1:1/${OSC}?token=dest-secret`);
    } finally {
      sql2.close();
    }
  });

  after(async () => {
    await consumer.close();
    await s.stop();
  });

  it('requests show, for every kind of body, prints no control byte and no secret', async () => {
    for (const [name, id] of Object.entries(ids)) {
      const r = await run([...db, 'requests', 'show', id!]);
      assert.equal(r.code, 0, `${name}: ${r.stderr.toString()}`);
      assertSafe(r, `requests show (${name})`);
      assertNoSecret(r.text, `requests show (${name})`);
    }
    const text = (await run([...db, 'requests', 'show', ids.text!])).text;
    assert.match(text, /line one \\x1b\]0;TITLE\\x07\\x1b\[2J\\u009b2J\\u202eevil\\u2066\\u200b\\ufeff\\x7f$/m, 'escapes are visible');
    assert.match(text, /^ {2}\tline two \\\\x1b$/m, 'TAB kept for layout; a literal backslash doubled');
    assert.match(text, /^ {2}X-C1: a\\u009bb$/m);
    assert.match(text, /consumer said no/, 'the timeline shows the response excerpt');

    const json = (await run([...db, 'requests', 'show', ids.json!])).text;
    assert.match(json, /X-Shopify-Hmac-Sha256: \[redacted\]/);
    assert.match(json, /request {3}POST \/json\?token=\[redacted\]&api_key=\[redacted\]&page=2/);
    assert.match(json, /"pass": "\[redacted\]"/, 'a secret key holding an object keeps its structure');
    assert.match(json, /"name": "Ada Lovelace"/, 'author is not auth');
    assert.match(json, /\\u001b\]0;TITLE\\u0007\\u001b\[2J\\u009b2J\\u202eevil/, 'JSON strings escaped as JSON');

    const form = (await run([...db, 'requests', 'show', ids.form!])).text;
    assert.match(form, /token=\[redacted\]&team_id=T1&password=\[redacted\]&text=%1b%5d0%3bT/);

    const bin = (await run([...db, 'requests', 'show', ids.binary!])).text;
    assert.match(bin, new RegExp(`binary: ${Buffer.byteLength(OSC) + 4} bytes`), 'invalid UTF-8 goes to the hex dump');
    assert.match(
      bin,
      /response \(20 bytes, not UTF-8\): \\x1b\]0;TITLE\\x07\\x1b\[2J caf\\xe9\\x9b$/m,
      'a response that is not UTF-8 as escaped text',
    );

    const sqlShow = (await run([...db, 'requests', 'show', ids.sql!])).text;
    assert.match(sqlShow, /request {3}POST \/p\\x1b\]0;TITLE.*\?x=\\x1b.*&token=\[redacted\]/);
    assert.match(sqlShow, /^ {2}X-\\x1b\]0;TITLE\\x07\\x1b\[2J: v\\x1b/m);
    assert.match(sqlShow, /connect \\x1b\]0;TITLE/, 'attempt error message escaped');
    assert.match(
      sqlShow,
      /→ http:\/\/\[redacted\]@127\.0\.0\.1:1\/\\x1b\]0;TITLE\\x07\\x1b\[2J\?token=\[redacted\]/,
      'the destination redacted and escaped',
    );
  });

  it('--reveal shows every secret, still escaped', async () => {
    const seen: string[] = [];
    for (const id of Object.values(ids)) {
      const r = await run([...db, 'requests', 'show', id, '--reveal']);
      assertSafe(r, 'requests show --reveal');
      seen.push(r.text);
    }
    const all = seen.join('\n');
    for (const secret of [
      'qs-secret',
      'qs-key',
      'hmac-secret',
      'auth-secret',
      'json-secret',
      'json-pass',
      'form-secret',
      'form-pw',
      'sql-secret',
      'dest-pw',
    ]) {
      assert.ok(all.includes(secret), `--reveal shows ${secret}`);
    }
    const list = await run([...db, 'requests', 'list', 'hostile', '--reveal']);
    assert.match(list.text, /token=qs-secret/);
    const bucket = await run([...db, 'bucket', 'show', 'hostile', '--reveal']);
    assert.match(bucket.text, /dest-pw/);
    assert.match(bucket.text, /X-Webhook-Key: fwd-secret/);
  });

  it('requests list, bucket show, bucket list, stats, replay, replays list: no control byte, no secret', async () => {
    assertSafe(replayRun, 'replay');
    assertNoSecret(replayRun.stderr.toString(), 'replay');
    for (const args of [
      ['requests', 'list', 'hostile'],
      ['bucket', 'show', 'hostile'],
      ['bucket', 'list'],
      ['stats'],
      ['stats', 'hostile'],
      ['replays', 'list'],
      ['replay', 'hostile', '--all', '--dry-run', '--to', 'http://127.0.0.1:1/r?token=dest-secret'],
      ['replay', 'hostile', '--all', '--dry-run'],
    ]) {
      const r = await run([...db, ...args]);
      assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr.toString()}`);
      assertSafe(r, args.join(' '));
      assertNoSecret(r.text + r.stderr.toString(), args.join(' '));
    }
    const shown = (await run([...db, 'bucket', 'show', 'hostile'])).text;
    assert.match(shown, /^destination {7}http:\/\/\[redacted\]@127\.0\.0\.1:1\/\\x1b\]0;TITLE\\x07\\x1b\[2J\?token=\[redacted\]$/m);
    assert.match(shown, /^forward headers {3}X-Webhook-Key: \[redacted\]$/m);
    assert.match(shown, /^ {18}X-\\x1b\]0;TITLE\\x07\\x1b\[2J: \\x1b\]0;TITLE/m);
    const list = (await run([...db, 'requests', 'list', 'hostile'])).text;
    assert.match(list, /\/json\?token=\[redacted\]&api_key=\[redacted\]&page=2/);
  });

  it('--json escapes DEL, C1, bidi and zero-width as \\uXXXX and parses back to the stored values', async () => {
    for (const args of [
      ['requests', 'show', ids.sql!, '--json'],
      ['requests', 'show', ids.text!, '--json'],
      ['requests', 'list', 'hostile', '--json'],
      ['bucket', 'show', 'hostile', '--json'],
      ['bucket', 'list', '--json'],
      ['replays', 'list', '--json'],
    ]) {
      const r = await run([...db, ...args]);
      assert.equal(r.code, 0, r.stderr.toString());
      assertSafe(r, args.join(' '));
    }
    const sqlJson = JSON.parse((await run([...db, 'requests', 'show', ids.sql!, '--json'])).text);
    // The lone surrogate went into SQLite as invalid UTF-8 and comes back as U+FFFD, one per byte.
    assert.equal(sqlJson.path, `/p${HOSTILE}\ufffd\ufffd\ufffd`, 'the stored path, exactly');
    assert.deepEqual(sqlJson.headers[0], [`X-${OSC}`, `v${HOSTILE}`]);
    assert.equal(sqlJson.body, `${HOSTILE} body`);
    const textJson = JSON.parse((await run([...db, 'requests', 'show', ids.text!, '--json'])).text);
    assert.deepEqual(
      textJson.headers.find((h: string[]) => h[0] === 'X-C1'),
      ['X-C1', 'a\u009bb'],
    );
    const bucketJson = JSON.parse((await run([...db, 'bucket', 'show', 'hostile', '--json'])).text);
    assert.equal(bucketJson.ack_body, `ok ${HOSTILE}`);
  });

  it('requests tail, human and --json, escapes what arrives', async () => {
    for (const json of [false, true]) {
      const child = spawn(process.execPath, [BIN, ...db, 'requests', 'tail', 'hostile', '--count', '1', ...(json ? ['--json'] : [])]);
      const out: Buffer[] = [];
      const err: Buffer[] = [];
      child.stdout.on('data', (d: Buffer) => out.push(d));
      const following = new Promise<void>((resolve) =>
        child.stderr.on('data', (d: Buffer) => {
          err.push(d);
          if (Buffer.concat(err).includes('following')) resolve();
        }),
      );
      const exited = new Promise<number>((resolve) => child.on('close', (code) => resolve(code ?? -1)));
      await following;
      const sql = new Database(s.db);
      try {
        sql
          .prepare(
            'INSERT INTO requests (id, bucket, received_at, method, path, query, headers, body, size, sha256, peer) SELECT ?, bucket, ?, method, ?, ?, headers, body, size, sha256, peer FROM requests WHERE id = ?',
          )
          .run(newId(), Date.now(), `/tail${HOSTILE}`, `token=qs-secret&x=${OSC}`, ids.text);
      } finally {
        sql.close();
      }
      assert.equal(await exited, 0, Buffer.concat(err).toString());
      const r: Run = { code: 0, stdout: Buffer.concat(out), stderr: Buffer.concat(err), text: Buffer.concat(out).toString('utf8') };
      assertSafe(r, `requests tail${json ? ' --json' : ''}`);
      if (json) {
        const e = JSON.parse(r.text);
        assert.equal(e.path, `/tail${HOSTILE}`, 'NDJSON parses back to the stored path');
        assert.match(r.text, /\\u009b2J\\u202eevil\\u2066\\u200b\\ufeff\\u007f/);
      } else {
        assert.match(r.text, /POST \/tail\\x1b\]0;TITLE\\x07\\x1b\[2J\\u009b2J\\u202eevil.*\?token=\[redacted\]&x=\\x1b/);
      }
    }
  });

  it('error messages echoing hostile arguments and file contents are escaped', async () => {
    const cases: string[][] = [
      ['requests', 'show', `id${HOSTILE}`],
      ['bucket', 'show', `b${HOSTILE}`],
      ['requests', 'list', 'hostile', '--path', `/x${HOSTILE}`, '--nope'],
      ['requests', 'show', ids.text!, `--${HOSTILE}`],
    ];
    const bad = join(s.dir, 'bad.ndjson');
    writeFileSync(bad, `{"method":"P${HOSTILE}","path":"${HOSTILE}","headers":[],"body":""}\n`);
    cases.push(['requests', 'import', 'hostile', bad]);
    for (const args of cases) {
      const r = await run([...db, ...args]);
      assert.notEqual(r.code, 0, args.join(' '));
      assert.ok(r.stderr.length > 0, 'an error was printed');
      assertSafe(r, `error for ${args.join(' ')}`);
    }
    const notFound = await run([...db, 'requests', 'show', `id${HOSTILE}`]);
    assert.match(notFound.stderr.toString(), /^error \[not_found\]: request id\\x1b\]0;TITLE\\x07\\x1b\[2J\\u009b2J\\u202eevil/);
  });

  it('requests import --deliver names the destination without its secrets', async () => {
    const made = await run([...db, 'bucket', 'create', 'impdest', '--destination', 'http://127.0.0.1:9/x?token=dest-secret']);
    assert.equal(made.code, 0, made.stderr.toString());
    const file = join(s.dir, 'one.ndjson');
    writeFileSync(file, `${JSON.stringify({ method: 'POST', path: '/one', query: null, headers: [], body: 'x' })}\n`);
    const r = await run([...db, 'requests', 'import', 'impdest', file, '--deliver']);
    assert.equal(r.code, 0, r.stderr.toString());
    assert.match(r.text, /queued for delivery to http:\/\/127\.0\.0\.1:9\/x\?token=\[redacted\]/);
    assertNoSecret(r.text + r.stderr.toString(), 'requests import --deliver');
  });

  it('an error echoing an argument with a newline stays one line (no forged second error line)', async () => {
    const r = await run([...db, 'requests', 'show', 'abc\nerror [ok]: forged line']);
    assert.equal(r.code, 4);
    const err = r.stderr.toString();
    assert.equal(err.trimEnd().split('\n').length, 1, err);
    assert.match(err, /^error \[not_found\]: request abc\\x0aerror \[ok\]: forged line/);
  });

  it('a usage error echoing a refused --destination does not print its credentials', async () => {
    const r = await run([...db, 'bucket', 'create', 'creds', '--destination', 'http://user:s3cret@127.0.0.1/x?token=t0ken']);
    assert.equal(r.code, 2);
    const err = r.stderr.toString();
    assert.match(
      err,
      /^error \[usage\]: option '--destination <url>' argument 'http:\/\/\[redacted\]@127\.0\.0\.1\/x\?token=\[redacted\]' is invalid/,
    );
    assert.ok(!err.includes('s3cret') && !err.includes('t0ken'), err);
  });

  it('requests show --raw: the exact bytes to a pipe; to a terminal (a real pseudo-terminal) only with --force', async () => {
    const piped = await run([...db, 'requests', 'show', ids.binary!, '--raw']);
    assert.equal(piped.code, 0);
    assert.deepEqual(piped.stdout, Buffer.concat([Buffer.from(OSC), Buffer.from([0xff, 0xfe, 0x9b, 0xc3])]));

    // util-linux script(1) gives the command a pty for stdin and stdout; -e returns its exit code.
    const viaPty = (args: string[]) =>
      new Promise<{ code: number; out: Buffer }>((resolve) => {
        const cmd = [process.execPath, BIN, ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
        execFile('script', ['-qec', cmd, '/dev/null'], { encoding: 'buffer' }, (err, stdout) => {
          resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, out: stdout });
        });
      });
    const refused = await viaPty([...db, 'requests', 'show', ids.binary!, '--raw']);
    assert.equal(refused.code, 2);
    const said = refused.out.toString('utf8');
    assert.match(said, /error \[raw_to_terminal\]: .*redirect to a file .* or a pipe, or add --force/);
    assert.ok(!refused.out.includes(Buffer.from(OSC)), 'no body byte reached the terminal');
    const forced = await viaPty([...db, 'requests', 'show', ids.binary!, '--raw', '--force']);
    assert.equal(forced.code, 0);
    assert.ok(forced.out.includes(Buffer.from(OSC)), '--force writes the exact bytes');
  });
});

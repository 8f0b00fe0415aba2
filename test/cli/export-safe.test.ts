import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { runCli, type CliResult } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * `requests export` safe by default (issue 16 point 6), through the real binary against a real
 * serve, locally (--db) and through its admin API (--api): curl needs an explicit --base-url, each
 * curl prints a newline after the response, the script warns about credentials, --redact replaces
 * them in every format, and --limit takes the oldest n.
 */
const TOKEN = 'export-safe-test-token-0123456789abcdef0123';

/** Values that must never survive --redact, each under a name the human-output redaction hides. */
const SECRETS = {
  authorization: 'Bearer sk_live_AUTHSECRET',
  signature: 'sha256=SIGSECRET',
  cookie: 'session=COOKIESECRET',
  apiKey: 'APIKEYSECRET',
  token: 'QUERYTOKENSECRET',
  sig: 'QUERYSIGSECRET',
};

describe('requests export: safe by default (real binary, real serve, local and --api)', () => {
  let srv: TestServer;
  let consumer: Consumer;
  const env = { HOOKBUCKET_ADMIN_TOKEN: TOKEN, HOOKBUCKET_API: '' };
  let db: string[];
  let api: string[];
  const ids: string[] = [];
  const cli = (args: string[]) => runCli(args, env);
  const ok = async (args: string[]) => {
    const r = await cli(args);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return r;
  };
  const bash = (file: string) =>
    new Promise<{ code: number; stdout: string; stderr: string }>((resolve) =>
      execFile('bash', [file], { encoding: 'utf8' }, (err, stdout, stderr) =>
        resolve({ code: err ? Number(err.code ?? 1) : 0, stdout, stderr }),
      ),
    );

  before(async () => {
    srv = await startTestServer({ adminToken: TOKEN });
    consumer = await startConsumer({ status: 200, body: 'got it' });
    db = ['--db', srv.db];
    api = ['--api', srv.admin!.url];
    await ok([...db, 'bucket', 'create', 'hooks']);
    // Five requests, oldest first; the first carries every kind of credential.
    for (let i = 0; i < 5; i++) {
      const headers: Record<string, string> =
        i === 0
          ? {
              'content-type': 'application/json',
              authorization: SECRETS.authorization,
              'x-hub-signature-256': SECRETS.signature,
              cookie: SECRETS.cookie,
              'x-api-key': SECRETS.apiKey,
              'idempotency-key': 'idem-1',
            }
          : { 'content-type': 'application/json' };
      const query = i === 0 ? `?token=${SECRETS.token}&sig=${SECRETS.sig}&page=2` : `?n=${i}`;
      const res = await request(`${srv.url}/b/hooks/in${query}`, { method: 'POST', headers, body: `{"n":${i}}` });
      const body = await res.body.text();
      assert.equal(res.statusCode, 200, body);
      const listed = (await ok([...db, 'requests', 'list', 'hooks', '--limit', '1', '--json'])).json().requests[0].id as string;
      ids.push(listed);
    }
  });
  after(async () => {
    await consumer?.close();
    await srv?.stop();
  });

  it('--format curl without --base-url is a usage error (exit 2) with a hint, locally and through --api', async () => {
    for (const target of [db, api]) {
      const r = await cli([...target, 'requests', 'export', 'hooks', '--format', 'curl']);
      assert.equal(r.code, 2, r.stderr);
      assert.equal(r.text, '', 'nothing written');
      assert.match(r.stderr, /^error \[usage\]: --format curl needs --base-url/);
      assert.match(r.stderr, /--base-url http:\/\/localhost:3000\/webhooks/);
      assert.match(r.stderr, /stored and delivered again.*--base-url http:\/\/localhost:\d+\/b\/hooks/s);
    }
  });

  it('the API refuses format=curl without base_url (400 usage) and takes base_url, redact and limit', async () => {
    const get = (query: string) =>
      request(`${srv.admin!.url}/api/buckets/hooks/export?${query}`, { headers: { authorization: `Bearer ${TOKEN}` } });
    const refused = await get('format=curl');
    const body = (await refused.body.json()) as { code: string; error: string };
    assert.equal(refused.statusCode, 400);
    assert.equal(body.code, 'usage');
    assert.match(body.error, /format=curl needs base_url/);

    const res = await get(`format=curl&base_url=${encodeURIComponent(consumer.url)}&redact=true&limit=2`);
    assert.equal(res.statusCode, 200);
    const script = await res.body.text();
    assert.deepEqual(script.match(/^# [0-9a-f-]{36}/gm), [`# ${ids[0]}`, `# ${ids[1]}`]);
    for (const s of Object.values(SECRETS)) assert.ok(!script.includes(s), `${s} left in the API's redacted export`);

    const bad = await get('limit=0');
    assert.equal(bad.statusCode, 400);
    await bad.body.dump();
  });

  it('the curl script warns that it holds credentials, and each curl prints a newline after the response', async () => {
    const r = await ok([...db, 'requests', 'export', 'hooks', '--format', 'curl', '--base-url', `${consumer.url}/replayed`]);
    const script = r.text;
    assert.match(script, /^#!\/usr\/bin\/env bash\n/);
    assert.match(script, /^# WARNING: this script contains credentials/m);
    assert.match(script, /^# sends every request to http:\/\/127\.0\.0\.1:\d+\/replayed /m);
    assert.ok(script.includes(SECRETS.authorization), 'without --redact the export keeps what was received');
    const file = join(srv.dir, 'all.sh');
    writeFileSync(file, script);
    const before = consumer.received.length;
    const run = await bash(file);
    assert.equal(run.code, 0, run.stderr);
    assert.equal(run.stdout, 'got it\n'.repeat(5), 'one response a line');
    assert.equal(consumer.received.length, before + 5);
    const first = consumer.received[before]!;
    assert.equal(first.url, `/replayed/in?token=${SECRETS.token}&sig=${SECRETS.sig}&page=2`);
    // Nothing went back to the bucket: it still holds its five requests.
    assert.equal((await ok([...db, 'requests', 'list', 'hooks', '--json'])).json().requests.length, 5);
  });

  it('--redact replaces credential headers and secret query values in every format, keeps the rest', async () => {
    for (const target of [db, api]) {
      for (const format of ['ndjson', 'har', 'curl']) {
        const args = ['requests', 'export', 'hooks', '--format', format, '--base-url', consumer.url];
        const plain = await ok([...target, ...args]);
        const red = await ok([...target, ...args, '--redact']);
        for (const s of Object.values(SECRETS)) {
          assert.ok(plain.text.includes(s), `${format}: ${s} is in the plain export`);
          assert.ok(!red.text.includes(s), `${format}: ${s} left in the redacted export`);
        }
        assert.ok(red.text.includes('[redacted]'), format);
        assert.ok(red.text.includes('idem-1'), `${format}: Idempotency-Key is no credential`);
        assert.ok(red.text.includes('page=2'), `${format}: other query values stay`);
        assert.ok(red.text.includes('{\\"n\\":0}') || red.text.includes('{"n":0}'), `${format}: the body stays`);
      }
    }
    const nd = (await ok([...db, 'requests', 'export', 'hooks', '--redact', '--limit', '1'])).json();
    assert.equal(nd.id, ids[0]);
    assert.equal(nd.query, 'token=[redacted]&sig=[redacted]&page=2');
    const headers = Object.fromEntries(nd.headers as Array<[string, string]>);
    assert.equal(headers.authorization, '[redacted]');
    assert.equal(headers['x-hub-signature-256'], '[redacted]');
    assert.equal(headers.cookie, '[redacted]');
    assert.equal(headers['x-api-key'], '[redacted]');
    assert.equal(headers['idempotency-key'], 'idem-1');
    assert.equal(headers['content-type'], 'application/json');

    const curl = (await ok([...db, 'requests', 'export', 'hooks', '--format', 'curl', '--base-url', consumer.url, '--redact'])).text;
    assert.match(curl, /^# --redact: credential headers and secret query values are replaced by \[redacted\]/m);
    assert.doesNotMatch(curl, /WARNING/);
  });

  it('--limit n exports the n oldest matching requests in every format, the same locally and through --api', async () => {
    for (const format of ['ndjson', 'har', 'curl']) {
      const args = ['requests', 'export', 'hooks', '--format', format, '--limit', '2', '--base-url', consumer.url];
      const [l, r] = [await ok([...db, ...args]), await ok([...api, ...args])];
      assert.ok(Buffer.compare(l.stdout, r.stdout) === 0, `${format}: --api differs`);
      const got =
        format === 'ndjson'
          ? l.text
              .trim()
              .split('\n')
              .map((x) => JSON.parse(x).id)
          : format === 'har'
            ? JSON.parse(l.text).log.entries.map((e: { _hookbucket: { id: string } }) => e._hookbucket.id)
            : [...l.text.matchAll(/^# ([0-9a-f-]{36}) /gm)].map((m) => m[1]);
      assert.deepEqual(got, ids.slice(0, 2), format);
    }
    // With a filter: the first n of those that match.
    const filtered = await ok([...db, 'requests', 'export', 'hooks', '--id', `${ids[3]},${ids[1]},${ids[4]}`, '--limit', '2']);
    assert.deepEqual(
      filtered.text
        .trim()
        .split('\n')
        .map((x) => JSON.parse(x).id),
      [ids[1], ids[3]],
    );
    // More than there are: all of them.
    assert.equal((await ok([...db, 'requests', 'export', 'hooks', '--limit', '1000'])).text.trim().split('\n').length, 5);
    const out = join(srv.dir, 'two.ndjson');
    const summary = (await ok([...db, 'requests', 'export', 'hooks', '--limit', '2', '--redact', '--out', out, '--json'])).json();
    assert.deepEqual([summary.requests, summary.limit, summary.redacted], [2, 2, true]);
    for (const bad of ['0', '-1', 'x', '1.5']) {
      const r: CliResult = await cli([...db, 'requests', 'export', 'hooks', '--limit', bad]);
      assert.equal(r.code, 2, `--limit ${bad}: ${r.stderr}`);
    }
  });
});

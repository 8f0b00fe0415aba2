import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { BIN, runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { until } from '../helpers/until.js';

/**
 * `requests tail --since` (issue 16 point 7): what happened since then first, oldest first, in the
 * shape of live events, then the live events with nothing missed or repeated; locally (--db) and
 * through the server's event stream (--api). Real binary, real serve with its worker, real consumer.
 */
const TOKEN = 'tail-since-test-token-0123456789abcdef01234';
const env = { HOOKBUCKET_ADMIN_TOKEN: TOKEN, HOOKBUCKET_API: '' };

/** Starts the real binary; `following` resolves once it says so (stderr), `done` when it exits. */
function startTail(args: string[]) {
  const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, ...env } });
  let stdout = '';
  let stderr = '';
  child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
  const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
    child.on('close', (code) => resolve({ code, stdout, stderr })),
  );
  const following = new Promise<void>((resolve, reject) => {
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
      if (stderr.includes('following')) resolve();
    });
    void done.then((r) => reject(new Error(`tail ended before following: ${r.stderr}`)));
  });
  following.catch(() => undefined);
  return { following, done, out: () => stdout, kill: () => child.kill('SIGINT') };
}

describe('requests tail --since (real binary, real serve and worker, local and --api)', () => {
  let srv: TestServer;
  let consumer: Consumer;
  let db: string[];
  let api: string[];
  const first: string[] = [];
  let between = '';
  let later = '';

  const ingest = async (n: number) => {
    const res = await request(`${srv.url}/b/since/in?n=${n}`, {
      method: 'POST',
      body: `{"n":${n}}`,
      headers: { 'content-type': 'application/json' },
    });
    const text = await res.body.text();
    assert.equal(res.statusCode, 200, text);
  };
  const delivered = async (count: number) => {
    const r = await runCli([...db, 'requests', 'list', 'since', '--state', 'delivered', '--json'], env);
    return (r.json().requests as unknown[]).length >= count;
  };
  const lines = (stdout: string) =>
    stdout
      .split('\n')
      .filter(Boolean)
      .map((l) => JSON.parse(l) as Record<string, unknown>);

  before(async () => {
    consumer = await startConsumer({ status: 200, body: 'ok' });
    srv = await startTestServer({ adminToken: TOKEN, worker: true });
    db = ['--db', srv.db];
    api = ['--api', srv.admin!.url];
    const r = await runCli([...db, 'bucket', 'create', 'since', '--destination', `${consumer.url}/hook`], env);
    assert.equal(r.code, 0, r.stderr);
    for (let i = 0; i < 3; i++) await ingest(i);
    await until(() => delivered(3), 'three deliveries');
    const listed = (await runCli([...db, 'requests', 'list', 'since', '--json'], env)).json().requests as Array<{ id: string }>;
    first.push(...listed.map((x) => x.id).reverse());
    // A time after everything so far (its ids and finished attempts), before what comes next.
    await new Promise((r) => setTimeout(r, 20));
    between = new Date().toISOString();
    await new Promise((r) => setTimeout(r, 20));
    await ingest(3);
    await until(() => delivered(4), 'the fourth delivery');
    later = (await runCli([...db, 'requests', 'list', 'since', '--limit', '1', '--json'], env)).json().requests[0].id;
  });
  after(async () => {
    await srv?.stop();
    await consumer?.close();
  });

  it('--since 1h --count 8 --json: the four requests and their attempts, oldest first, then exit 0; the same through --api', async () => {
    const args = ['requests', 'tail', 'since', '--since', '1h', '--count', '8', '--json'];
    const local = startTail([...db, ...args]);
    const remote = startTail([...api, ...args]);
    const [l, r] = await Promise.all([local.done, remote.done]);
    assert.equal(l.code, 0, l.stderr);
    assert.equal(r.code, 0, r.stderr);
    assert.match(l.stderr, /following since since \d{4}-\d\d-\d\dT/);
    const events = lines(l.stdout);
    assert.equal(events.length, 8);
    assert.deepEqual(
      events.filter((e) => e.event === 'request').map((e) => e.id),
      [...first, later],
    );
    assert.deepEqual(
      events.filter((e) => e.event === 'attempt').map((e) => [e.request_id, e.outcome]),
      [...first, later].map((id) => [id, 'delivered']),
    );
    // Oldest first, and each request before its own attempt.
    const at = events.map((e) => Date.parse(String(e.at)));
    assert.deepEqual(
      at,
      [...at].sort((a, b) => a - b),
    );
    for (const e of events.filter((x) => x.event === 'attempt')) {
      assert.ok(events.findIndex((x) => x.id === e.request_id) < events.indexOf(e), 'request before attempt');
    }
    assert.equal(r.stdout, l.stdout, '--api prints the same NDJSON');
  });

  it('the replayed lines have the shape of live events: text and JSON, locally and through --api', async () => {
    // A live tail (local: the --api one prints the same, test/cli/remote-tail.test.ts) catches a new request.
    const live = startTail([...db, 'requests', 'tail', 'since', '--count', '1', '--json']);
    const text = startTail([...db, 'requests', 'tail', 'since', '--count', '1']);
    await Promise.all([live.following, text.following]);
    await ingest(10);
    const [liveOut, textOut] = await Promise.all([live.done, text.done]);
    assert.equal(liveOut.code, 0, liveOut.stderr);
    const [liveEvent] = lines(liveOut.stdout);
    assert.equal(liveEvent!.event, 'request');
    const since = new Date(Date.parse(String(liveEvent!.at)) - 1).toISOString();
    for (const target of [db, api]) {
      const replayed = await Promise.all([
        startTail([...target, 'requests', 'tail', 'since', '--since', since, '--count', '1', '--json']).done,
        startTail([...target, 'requests', 'tail', 'since', '--since', since, '--count', '1']).done,
      ]);
      assert.equal(replayed[0].code, 0, replayed[0].stderr);
      const [again] = lines(replayed[0].stdout);
      assert.deepEqual(Object.keys(again!), Object.keys(liveEvent!));
      // The same event; only its state may have moved on (pending → delivered).
      assert.deepEqual({ ...again, state: null }, { ...liveEvent, state: null });
      const cut = (s: string) => s.trim().split(/\s+/).slice(0, -1).join(' ');
      assert.equal(cut(replayed[1].stdout), cut(textOut.stdout));
    }
    await until(() => delivered(5), 'the delivery of the extra request');
  });

  it('an ISO --since leaves out what came before it, and the backlog is followed by live events without gaps or repeats', async () => {
    for (const target of [db, api]) {
      const tail = startTail([...target, 'requests', 'tail', 'since', '--since', between, '--json']);
      await tail.following;
      await ingest(20);
      const newId = async () => {
        const listed = (await runCli([...db, 'requests', 'list', 'since', '--limit', '1', '--json'], env)).json().requests[0].id;
        return listed as string;
      };
      const newest = await newId();
      await until(() => {
        // Complete lines only: the last one may still be arriving.
        return lines(tail.out().slice(0, tail.out().lastIndexOf('\n') + 1)).some((e) => e.event === 'attempt' && e.request_id === newest);
      }, 'the new request and its attempt');
      tail.kill();
      const out = await tail.done;
      // Stopped by SIGINT: tail exits 130, as every command does after Ctrl-C.
      assert.equal(out.code, 130, out.stderr);
      const got = lines(out.stdout);
      const requestIds = got.filter((e) => e.event === 'request').map((e) => e.id as string);
      assert.ok(!requestIds.some((id) => first.includes(id)), 'nothing from before --since');
      assert.equal(requestIds[0], later, 'the first after --since comes first');
      assert.equal(requestIds.at(-1), newest, 'and the live one last');
      assert.equal(new Set(requestIds).size, requestIds.length, 'no request twice');
      const attempts = got.filter((e) => e.event === 'attempt').map((e) => `${e.delivery_id}#${e.attempt}`);
      assert.equal(new Set(attempts).size, attempts.length, 'no attempt twice');
      const attemptsOf = (id: string) => got.filter((e) => e.event === 'attempt' && e.request_id === id).length;
      assert.deepEqual(
        requestIds.map(attemptsOf),
        requestIds.map(() => 1),
        'each request with its one delivered attempt',
      );
    }
  });

  it('refuses a --since that is no time (exit 2)', async () => {
    for (const bad of ['10', 'soon', '-5m']) {
      const r = await runCli([...db, 'requests', 'tail', 'since', '--since', bad], env);
      assert.equal(r.code, 2, `${bad}: ${r.stderr}`);
      assert.match(r.stderr, /--since/);
    }
  });
});

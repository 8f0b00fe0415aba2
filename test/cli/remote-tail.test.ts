import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { getEventListeners } from 'node:events';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { request } from 'undici';
import { ApiClient } from '../../src/remote/api-client.js';
import { followEvents, parseSse } from '../../src/remote/event-stream.js';
import { BIN, runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const TOKEN = 'remote-tail-test-token-0123456789abcdef0123';

/** Starts the real binary, resolves once it says it is following (stderr), and with its output once it exits. */
function startTail(
  args: string[],
): Promise<{ done: Promise<{ code: number | null; stdout: string; stderr: string }>; interrupt: () => void }> {
  return new Promise((ready, fail) => {
    const child = spawn(process.execPath, [BIN, ...args], { env: { ...process.env, HOOKBUCKET_ADMIN_TOKEN: TOKEN, HOOKBUCKET_API: '' } });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (c: Buffer) => (stdout += c.toString()));
    const done = new Promise<{ code: number | null; stdout: string; stderr: string }>((resolve) =>
      child.on('close', (code) => resolve({ code, stdout, stderr })),
    );
    child.stderr.on('data', (c: Buffer) => {
      stderr += c.toString();
      if (stderr.includes('following')) ready({ done, interrupt: () => child.kill('SIGINT') });
    });
    void done.then((r) => (r.stderr.includes('following') ? undefined : fail(new Error(`tail ended before following: ${r.stderr}`))));
  });
}

describe('requests tail --api: the server event stream, the same lines as a local tail', () => {
  let srv: TestServer;
  before(async () => {
    srv = await startTestServer({ adminToken: TOKEN });
    const r = await runCli(['--db', srv.db, 'bucket', 'create', 'live'], { HOOKBUCKET_API: '' });
    assert.equal(r.code, 0, r.stderr);
  });
  after(async () => {
    await srv?.stop();
  });

  for (const json of [true, false]) {
    it(`--count 2${json ? ' --json' : ''}: both tails print the same two events and exit 0`, async () => {
      const extra = ['requests', 'tail', 'live', '--count', '2', ...(json ? ['--json'] : [])];
      const local = await startTail(['--db', srv.db, ...extra]);
      const remote = await startTail(['--api', srv.admin!.url, ...extra]);
      for (const body of ['{"n":1}', '{"n":2}']) {
        const res = await request(`${srv.url}/b/live/x?y=1`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
        assert.equal(res.statusCode, 200);
        await res.body.dump();
      }
      const [l, r] = await Promise.all([local.done, remote.done]);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(l.code, 0, l.stderr);
      assert.equal(r.stdout.split('\n').filter(Boolean).length, 2);
      assert.equal(r.stdout, l.stdout);
    });
  }

  it('Ctrl-C ends a remote tail with exit 130, as locally', async () => {
    const tail = await startTail(['--api', srv.admin!.url, 'requests', 'tail', 'live']);
    tail.interrupt();
    const r = await tail.done;
    assert.equal(r.code, 130, r.stderr);
    assert.equal(r.stdout, '');
  });

  it('an unknown bucket is not found (exit 4) as locally', async () => {
    const r = await runCli(['--api', srv.admin!.url, 'requests', 'tail', 'nope'], { HOOKBUCKET_ADMIN_TOKEN: TOKEN, HOOKBUCKET_API: '' });
    assert.equal(r.code, 4, r.stderr);
  });
});

describe('followEvents: reconnects with Last-Event-ID, stops on abort', () => {
  it('resumes after the last id when the stream drops, and ends when the signal aborts', async () => {
    const seen: Array<string | undefined> = [];
    let n = 0;
    // A scripted SSE server: two events, then the connection drops; on reconnect it checks the id.
    const server = createServer((req: IncomingMessage, res: ServerResponse) => {
      seen.push(req.headers['last-event-id'] as string | undefined);
      res.writeHead(200, { 'content-type': 'text/event-stream', 'content-security-policy': "frame-ancestors 'none'" });
      res.write(': connected\n\n');
      const next = () => `id: h.${++n}\nevent: request\ndata: ${JSON.stringify({ event: 'request', n, bucket: 'b' })}\n\n`;
      // The first connection drops once its two events are written out.
      const first = seen.length === 1;
      res.write(next() + next(), () => (first ? res.destroy() : undefined));
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const api = new ApiClient({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, token: '' });
    const stop = new AbortController();
    const got: unknown[] = [];
    const notes: string[] = [];
    try {
      await followEvents(api, 'b', {
        signal: stop.signal,
        retryMs: 10,
        onNote: (t) => notes.push(t),
        onEvent: (j) => {
          got.push(j);
          if (got.length === 4) stop.abort();
        },
      });
    } finally {
      await api.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
    assert.deepEqual(seen, [undefined, 'h.2']);
    assert.deepEqual(
      got,
      [1, 2, 3, 4].map((n) => ({ event: 'request', n })),
    );
    assert.ok(
      notes.some((t) => t.includes('resuming after event h.2')),
      notes.join('; '),
    );
  });

  it('leaves no abort listener behind per reconnect: 40 drops, the count on the signal stays flat', async () => {
    let n = 0;
    // Each connection sends one event and drops: every event is followed by a reconnect wait.
    const server = createServer((_req: IncomingMessage, res: ServerResponse) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(`id: h.${++n}\nevent: request\ndata: ${JSON.stringify({ event: 'request', n, bucket: 'b' })}\n\n`, () => res.destroy());
    });
    await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
    const api = new ApiClient({ url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, token: '' });
    const stop = new AbortController();
    const counts: number[] = [];
    try {
      await followEvents(api, 'b', {
        signal: stop.signal,
        retryMs: 1,
        onNote: () => undefined,
        onEvent: () => {
          counts.push(getEventListeners(stop.signal, 'abort').length);
          if (counts.length === 40) stop.abort();
        },
      });
    } finally {
      await api.close();
      server.closeAllConnections();
      await new Promise((r) => server.close(r));
    }
    assert.equal(counts.length, 40);
    // The open request's own listeners only; one more per reconnect would reach 40 and more.
    assert.ok(Math.max(...counts) <= counts[0]! + 1, `listeners per event: ${counts.join(',')}`);
    assert.ok(counts[0]! <= 3, `listeners on the first event: ${counts[0]}`);
  });

  it('parses multi-line data, CRLF, comments and events split across chunks', async () => {
    async function* chunks() {
      yield Buffer.from(': hi\r\nid: 1\r\nevent: a\r\ndata: x\r\ndata: y\r\n\r\nid');
      yield Buffer.from(': 2\ndata:z\n\n');
    }
    const out = [];
    for await (const m of parseSse(chunks())) out.push(m);
    assert.deepEqual(out, [
      { id: '1', event: 'a', data: 'x\ny' },
      { id: '2', event: 'message', data: 'z' },
    ]);
  });
});

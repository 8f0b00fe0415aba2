import assert from 'node:assert/strict';
import { execFileSync, spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import type { ErrorClass } from '../../src/policy/classify.js';
import {
  Aborter,
  createDeliveryAgent,
  errorClassOf,
  forward,
  forwardHeaders,
  RESPONSE_EXCERPT_BYTES,
  type ForwardMeta,
  type ForwardRequest,
  type ForwardResult,
} from '../../src/drain/forward.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('forwardHeaders: the stored list minus the dropped set, then ours, then the bucket extras', () => {
  const meta: ForwardMeta = { requestId: 'req_01', generation: 2, attempt: 3 };
  const ours = ['x-hookbucket-request-id', 'req_01', 'x-hookbucket-delivery-generation', '2', 'x-hookbucket-attempt', '3'];
  const cases: Array<[string, string[], Array<[string, string]>, string[]]> = [
    ['nothing stored', [], [], ours],
    [
      'order, case and repeats kept',
      ['X-Dup', 'one', 'Content-Type', 'application/json', 'x-dup', 'two', 'X-DUP', 'three', 'Stripe-Signature', 't=1,v1=ab'],
      [],
      ['X-Dup', 'one', 'Content-Type', 'application/json', 'x-dup', 'two', 'X-DUP', 'three', 'Stripe-Signature', 't=1,v1=ab', ...ours],
    ],
    [
      'host and content-length dropped, any case',
      ['Host', 'in.example', 'X-A', '1', 'CONTENT-LENGTH', '5', 'HOST', 'again'],
      [],
      ['X-A', '1', ...ours],
    ],
    [
      'hop-by-hop set and expect dropped',
      [
        'Connection',
        'keep-alive',
        'Keep-Alive',
        'timeout=5',
        'TE',
        'trailers',
        'Trailer',
        'X-T',
        'Transfer-Encoding',
        'chunked',
        'Upgrade',
        'h2c',
        'Expect',
        '100-continue',
        'X-Kept',
        'yes',
      ],
      [],
      ['X-Kept', 'yes', ...ours],
    ],
    [
      'proxy-* dropped',
      ['Proxy-Authorization', 'Basic eA==', 'proxy-connection', 'keep-alive', 'PROXY-Whatever', '1', 'X-Proxy', 'kept'],
      [],
      ['X-Proxy', 'kept', ...ours],
    ],
    [
      'headers named by Connection dropped, whatever case and spacing, across Connection headers',
      ['Connection', 'keep-alive, X-Hop ,x-other', 'X-Hop', 'h', 'X-Other', 'o', 'connection', 'X-Third', 'x-third', 't', 'X-Keep', 'k'],
      [],
      ['X-Keep', 'k', ...ours],
    ],
    [
      'stored x-hookbucket-* of ours replaced, not repeated',
      ['X-Hookbucket-Attempt', '99', 'x-hookbucket-request-id', 'forged', 'X-HOOKBUCKET-DELIVERY-GENERATION', '7', 'X-A', '1'],
      [],
      ['X-A', '1', ...ours],
    ],
    [
      'every stored x-hookbucket-* dropped, so a sender cannot forge one (x-hookbucket-verified)',
      ['X-Hookbucket-Verified', 'stripe', 'x-hookbucket-anything', 'x', 'X-Hookbucketish', 'kept', 'X-A', '1'],
      [],
      ['X-Hookbucketish', 'kept', 'X-A', '1', ...ours],
    ],
    [
      'bucket forward headers appended, replacing stored ones of the same name',
      ['Authorization', 'Bearer from-sender', 'X-A', '1', 'authorization', 'second'],
      [
        ['authorization', 'Bearer for-consumer'],
        ['X-Env', 'prod'],
      ],
      ['X-A', '1', ...ours, 'authorization', 'Bearer for-consumer', 'X-Env', 'prod'],
    ],
    [
      'bucket forward headers may repeat a name',
      ['X-A', '1'],
      [
        ['X-Tag', 'a'],
        ['X-Tag', 'b'],
      ],
      ['X-A', '1', ...ours, 'X-Tag', 'a', 'X-Tag', 'b'],
    ],
  ];
  for (const [name, stored, extra, want] of cases) {
    it(name, () => assert.deepEqual(forwardHeaders(stored, meta, extra), want));
  }

  describe('a provider-ready bucket', () => {
    const sig = ['webhook-id', 'evt_1', 'webhook-timestamp', '1765108800', 'webhook-signature', 'v1,abc= v1,def='];
    it('re-signed: stored webhook-* go as x-hookbucket-original-<name> in place, ours after the attempt headers', () => {
      const stored = ['Webhook-Id', 'msg_orig', 'X-A', '1', 'webhook-timestamp', '1', 'webhook-signature', 'v1,orig', 'Webhook-Other', 'o'];
      assert.deepEqual(forwardHeaders(stored, meta, [], { signature: sig }), [
        'x-hookbucket-original-Webhook-Id',
        'msg_orig',
        'X-A',
        '1',
        'x-hookbucket-original-webhook-timestamp',
        '1',
        'x-hookbucket-original-webhook-signature',
        'v1,orig',
        'x-hookbucket-original-Webhook-Other',
        'o',
        ...ours,
        ...sig,
      ]);
    });
    it("not re-signed: stored webhook-* go as they are (the sender's own signature passes through)", () => {
      assert.deepEqual(forwardHeaders(['webhook-id', 'msg_orig'], meta, [], {}), ['webhook-id', 'msg_orig', ...ours]);
    });
    it('a stored x-hookbucket-verified or x-hookbucket-original-* is dropped; ours is set once', () => {
      const stored = ['X-Hookbucket-Verified', 'forged', 'x-hookbucket-original-webhook-id', 'forged', 'webhook-id', 'msg_orig'];
      assert.deepEqual(forwardHeaders(stored, meta, [], { signature: sig, verified: 'stripe' }), [
        'x-hookbucket-original-webhook-id',
        'msg_orig',
        ...ours,
        'x-hookbucket-verified',
        'stripe',
        ...sig,
      ]);
    });
    it('x-hookbucket-verified without re-signing; none when null', () => {
      assert.deepEqual(forwardHeaders(['X-A', '1'], meta, [], { verified: 'github' }), [
        'X-A',
        '1',
        ...ours,
        'x-hookbucket-verified',
        'github',
      ]);
      assert.deepEqual(forwardHeaders(['X-A', '1'], meta, [], { verified: null }), ['X-A', '1', ...ours]);
    });
    it('re-signed: a bucket forward header named like a signature header is left out, others kept', () => {
      const extra: Array<[string, string]> = [
        ['Webhook-Id', 'from-settings'],
        ['X-Env', 'prod'],
      ];
      assert.deepEqual(forwardHeaders(['webhook-id', 'msg_orig'], meta, extra, { signature: sig }), [
        'x-hookbucket-original-webhook-id',
        'msg_orig',
        ...ours,
        ...sig,
        'X-Env',
        'prod',
      ]);
    });
    it('re-signed: a stored webhook-* header a bucket forward header names is renamed, not replaced; Connection still drops', () => {
      const stored = [
        'Webhook-Source',
        'sender',
        'webhook-id',
        'msg_orig',
        'X-Env',
        'dev',
        'Connection',
        'webhook-hop',
        'webhook-hop',
        'h',
      ];
      const extra: Array<[string, string]> = [
        ['Webhook-Source', 'bucket'],
        ['X-Env', 'prod'],
      ];
      assert.deepEqual(forwardHeaders(stored, meta, extra, { signature: sig }), [
        'x-hookbucket-original-Webhook-Source',
        'sender',
        'x-hookbucket-original-webhook-id',
        'msg_orig',
        ...ours,
        ...sig,
        'Webhook-Source',
        'bucket',
        'X-Env',
        'prod',
      ]);
      // Not re-signed: the forward header replaces the stored one of its name, as for any header.
      assert.deepEqual(forwardHeaders(['Webhook-Source', 'sender'], meta, extra), [...ours, 'Webhook-Source', 'bucket', 'X-Env', 'prod']);
    });
  });

  it('does not change the stored list it is given', () => {
    const stored = ['Host', 'h', 'X-A', '1'];
    forwardHeaders(stored, meta, [['X-A', '2']]);
    assert.deepEqual(stored, ['Host', 'h', 'X-A', '1']);
  });
});

describe('errorClassOf', () => {
  const cases: Array<[string | undefined, ErrorClass]> = [
    ['ECONNREFUSED', 'refused'],
    ['ECONNRESET', 'reset'],
    ['EPIPE', 'reset'],
    ['UND_ERR_SOCKET', 'reset'],
    ['ENOTFOUND', 'dns'],
    ['EAI_AGAIN', 'dns'],
    ['EAI_FAIL', 'dns'],
    ['ETIMEDOUT', 'timeout'],
    ['UND_ERR_CONNECT_TIMEOUT', 'timeout'],
    ['UND_ERR_HEADERS_TIMEOUT', 'timeout'],
    ['UND_ERR_BODY_TIMEOUT', 'timeout'],
    ['DEPTH_ZERO_SELF_SIGNED_CERT', 'tls'],
    ['SELF_SIGNED_CERT_IN_CHAIN', 'tls'],
    ['UNABLE_TO_VERIFY_LEAF_SIGNATURE', 'tls'],
    ['CERT_HAS_EXPIRED', 'tls'],
    ['ERR_TLS_CERT_ALTNAME_INVALID', 'tls'],
    ['ERR_SSL_WRONG_VERSION_NUMBER', 'tls'],
    ['EPROTO', 'tls'],
    ['EHOSTUNREACH', 'network'],
    ['UND_ERR_ABORTED', 'network'],
    ['SOMETHING_NEW', 'network'],
    ['UND_ERR_INVALID_ARG', 'unsendable'],
    [undefined, 'network'],
  ];
  for (const [code, want] of cases) it(`${code} → ${want}`, () => assert.equal(errorClassOf(code), want));
});

/** A loopback HTTP server on port 0 whose handler each test sets. */
async function listen(
  handler: (req: IncomingMessage, res: ServerResponse) => void,
): Promise<{ server: Server; origin: string; close: () => Promise<void> }> {
  const server = createServer(handler);
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const origin = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
  return {
    server,
    origin,
    close() {
      server.closeAllConnections();
      return new Promise<void>((r) => server.close(() => r()));
    },
  };
}

function request(origin: string, overrides: Partial<ForwardRequest> = {}): ForwardRequest {
  return {
    target: { origin, path: '/hook' },
    method: 'POST',
    headers: ['Content-Type', 'application/json'],
    body: Buffer.from('{"a":1}'),
    timeoutMs: 5_000,
    ...overrides,
  };
}

function pattern(n: number): Buffer {
  const b = Buffer.alloc(n);
  for (let i = 0; i < n; i++) b[i] = i % 251;
  return b;
}

function expectResponse(r: ForwardResult): Extract<ForwardResult, { kind: 'response' }> {
  assert.equal(r.kind, 'response', r.kind === 'error' ? `${r.errorClass} ${r.code}: ${r.message}` : '');
  return r as Extract<ForwardResult, { kind: 'response' }>;
}

function expectError(r: ForwardResult): Extract<ForwardResult, { kind: 'error' }> {
  assert.equal(r.kind, 'error', r.kind === 'response' ? `got status ${r.status}` : '');
  return r as Extract<ForwardResult, { kind: 'error' }>;
}

describe('forward() over real sockets', () => {
  const agent = createDeliveryAgent();
  after(() => agent.close());

  it('returns status and headers, and sends method, raw target, headers and body as given', async () => {
    const seen: Array<{ method: string; url: string; rawHeaders: string[]; body: Buffer }> = [];
    const srv = await listen((req, res) => {
      const chunks: Buffer[] = [];
      req.on('data', (d: Buffer) => chunks.push(d));
      req.on('end', () => {
        seen.push({ method: req.method!, url: req.url!, rawHeaders: req.rawHeaders, body: Buffer.concat(chunks) });
        res.setHeader('X-Custom', 'a');
        res.setHeader('Set-Cookie', ['one=1', 'two=2']);
        res.writeHead(201);
        res.end('created');
      });
    });
    try {
      const body = Buffer.from([0x00, 0xff, 0xfe, 0xc3, 0x28, 0x0a]);
      const r = expectResponse(
        await forward(
          agent,
          request(srv.origin, {
            target: { origin: srv.origin, path: '/in/x/%2e%2e/y?a=1&a=2' },
            method: 'PUT',
            headers: ['X-Dup', '1', 'x-dup', '2', 'Content-Type', 'application/octet-stream'],
            body,
          }),
        ),
      );
      assert.equal(r.status, 201);
      assert.deepEqual(r.body, Buffer.from('created'));
      assert.equal(r.truncated, false);
      assert.equal(r.bodyError, undefined);
      const pairs = (name: string) => r.headers.flatMap((v, i) => (i % 2 === 0 && v === name ? [r.headers[i + 1]] : []));
      assert.deepEqual(pairs('x-custom'), ['a']);
      assert.deepEqual(pairs('set-cookie'), ['one=1', 'two=2']);

      assert.equal(seen.length, 1);
      const got = seen[0]!;
      assert.equal(got.method, 'PUT');
      assert.equal(got.url, '/in/x/%2e%2e/y?a=1&a=2');
      assert.ok(got.body.equals(body));
      const framing = new Set(['host', 'connection', 'content-length']);
      const rest: string[] = [];
      for (let i = 0; i < got.rawHeaders.length; i += 2)
        if (!framing.has(got.rawHeaders[i]!.toLowerCase())) rest.push(got.rawHeaders[i]!, got.rawHeaders[i + 1]!);
      assert.deepEqual(rest, ['X-Dup', '1', 'x-dup', '2', 'Content-Type', 'application/octet-stream']);
      const cl = got.rawHeaders.flatMap((v, i) => (i % 2 === 0 && v.toLowerCase() === 'content-length' ? [got.rawHeaders[i + 1]] : []));
      assert.deepEqual(cl, [String(body.length)]);
    } finally {
      await srv.close();
    }
  });

  it('a GET with no stored body goes without a body and without content-length', async () => {
    const seen: IncomingMessage[] = [];
    const srv = await listen((req, res) => {
      seen.push(req);
      req.resume();
      req.on('end', () => res.end());
    });
    try {
      const r = expectResponse(await forward(agent, request(srv.origin, { method: 'GET', headers: [], body: Buffer.alloc(0) })));
      assert.equal(r.status, 200);
      assert.equal(seen[0]?.headers['content-length'], undefined);
      assert.equal(seen[0]?.headers['transfer-encoding'], undefined);
    } finally {
      await srv.close();
    }
  });

  const sizes: Array<[string, number, boolean]> = [
    ['empty', 0, false],
    ['small', 100, false],
    ['exactly 4 KiB', RESPONSE_EXCERPT_BYTES, false],
    ['4 KiB + 1', RESPONSE_EXCERPT_BYTES + 1, true],
    ['5 MB streamed', 5 * 1024 * 1024, true],
  ];
  for (const [name, size, truncated] of sizes) {
    it(`keeps the first 4 KiB of the response body: ${name} → truncated ${truncated}`, async () => {
      const payload = pattern(size);
      const srv = await listen((req, res) => {
        req.resume();
        res.on('error', () => undefined);
        res.writeHead(200, { 'Content-Type': 'application/octet-stream' });
        // Streamed in 64 KiB writes with backpressure, without a content-length: chunked.
        let off = 0;
        const pump = () => {
          while (off < payload.length) {
            const chunk = payload.subarray(off, off + 65_536);
            off += chunk.length;
            if (!res.write(chunk)) return void res.once('drain', pump);
          }
          res.end();
        };
        pump();
      });
      try {
        const r = expectResponse(await forward(agent, request(srv.origin)));
        assert.equal(r.status, 200);
        assert.equal(r.truncated, truncated);
        assert.equal(r.body.length, Math.min(size, RESPONSE_EXCERPT_BYTES));
        assert.ok(r.body.equals(payload.subarray(0, RESPONSE_EXCERPT_BYTES)));
        assert.equal(r.bodyError, undefined);
      } finally {
        await srv.close();
      }
    });
  }

  it('a connection lost after the status line is still a response, with bodyError', async () => {
    const srv = await listen((req, res) => {
      req.resume();
      res.writeHead(503, { 'Content-Length': '1000', 'Retry-After': '7' });
      res.write('partial');
      // Node flushes the corked head and first chunk on the next tick; the connection goes after.
      setImmediate(() => res.socket?.destroy());
    });
    try {
      const r = expectResponse(await forward(agent, request(srv.origin)));
      assert.equal(r.status, 503);
      assert.ok(r.bodyError, 'the lost connection is recorded');
      assert.ok(Buffer.from('partial').subarray(0, r.body.length).equals(r.body), 'what arrived is kept');
    } finally {
      await srv.close();
    }
  });

  it('a 3xx comes back as a 3xx: the redirect is not followed', async () => {
    const elsewhere: string[] = [];
    const target = await listen((req, res) => {
      elsewhere.push(req.url!);
      res.end('followed');
    });
    const srv = await listen((req, res) => {
      req.resume();
      res.writeHead(307, { Location: `${target.origin}/moved` });
      res.end();
    });
    try {
      for (const method of ['POST', 'GET']) {
        const r = expectResponse(
          await forward(agent, request(srv.origin, { method, body: method === 'GET' ? Buffer.alloc(0) : Buffer.from('x') })),
        );
        assert.equal(r.status, 307, method);
        assert.ok(r.headers.includes(`${target.origin}/moved`), 'the Location is kept as evidence');
      }
      assert.deepEqual(elsewhere, [], 'the Location target received nothing');
    } finally {
      await srv.close();
      await target.close();
    }
  });

  it('refused: a port that was just closed', async () => {
    const srv = await listen(() => undefined);
    const origin = srv.origin;
    await srv.close();
    const r = expectError(await forward(agent, request(origin)));
    assert.equal(r.errorClass, 'refused');
    assert.equal(r.code, 'ECONNREFUSED');
    assert.equal(r.aborted, false);
  });

  it('reset: the server destroys the socket before the status line', async () => {
    let arrived = 0;
    const srv = await listen((req) => {
      arrived++;
      req.socket.destroy();
    });
    try {
      const r = expectError(await forward(agent, request(srv.origin)));
      assert.equal(r.errorClass, 'reset', `${r.code}: ${r.message}`);
      assert.equal(r.aborted, false);
      assert.equal(arrived, 1, 'one attempt, no retry by the client');
    } finally {
      await srv.close();
    }
  });

  it('timeout: the server never answers', async () => {
    let arrived = 0;
    const srv = await listen((req) => {
      arrived++;
      req.resume();
    });
    try {
      const r = expectError(await forward(agent, request(srv.origin, { timeoutMs: 150 })));
      assert.equal(r.errorClass, 'timeout', `${r.code}: ${r.message}`);
      assert.equal(r.aborted, false);
      assert.equal(arrived, 1);
    } finally {
      await srv.close();
    }
  });

  it('timeout while the body is read: the status decides, the excerpt so far is kept, the body error says why', async () => {
    const srv = await listen((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.write('partial'); // and never ends
    });
    try {
      const r = expectResponse(await forward(agent, request(srv.origin, { timeoutMs: 300 })));
      assert.equal(r.status, 200);
      assert.equal(r.body.toString(), 'partial');
      assert.equal(r.truncated, false);
      assert.equal(r.bodyError, 'error: attempt timed out');
    } finally {
      await srv.close();
    }
  });

  it('shutdown after the headers, before any body: a response with an empty excerpt and the abort as its body error', async () => {
    const ac = new Aborter();
    const srv = await listen((req, res) => {
      req.resume();
      res.writeHead(200, { 'content-type': 'text/plain' });
      res.flushHeaders();
      // Well after the head reached the client on loopback; the body never comes.
      setTimeout(() => ac.abort(), 200);
    });
    try {
      const r = expectResponse(await forward(agent, request(srv.origin, { aborter: ac })));
      assert.equal(r.status, 200);
      assert.equal(r.body.length, 0);
      assert.equal(r.bodyError, 'error: attempt aborted');
    } finally {
      await srv.close();
    }
  });

  it('an abort through the aborter (shutdown) is marked aborted, not timeout', async () => {
    const ac = new Aborter();
    const srv = await listen((req) => {
      req.resume();
      ac.abort();
    });
    try {
      const r = expectError(await forward(agent, request(srv.origin, { aborter: ac })));
      assert.equal(r.aborted, true);
      assert.notEqual(r.errorClass, 'timeout');
    } finally {
      await srv.close();
    }
  });

  it('one aborter ends every attempt in flight, and an attempt started after it is aborted sends nothing', async () => {
    const ac = new Aborter();
    let arrived = 0;
    const srv = await listen((req) => {
      req.resume();
      arrived++;
      if (arrived === 2) ac.abort();
    });
    try {
      const both = await Promise.all([
        forward(agent, request(srv.origin, { aborter: ac })),
        forward(agent, request(srv.origin, { aborter: ac })),
      ]);
      for (const r of both) assert.equal(expectError(r).aborted, true);
      const late = expectError(await forward(agent, request(srv.origin, { aborter: ac })));
      assert.equal(late.aborted, true);
      assert.equal(late.message, 'attempt aborted');
      assert.equal(arrived, 2);
    } finally {
      await srv.close();
    }
  });

  const openssl = spawnSync('openssl', ['version']).error === undefined;
  it('tls: a self-signed certificate is refused as tls', {
    skip: openssl ? false : 'openssl is not installed: cannot make a self-signed certificate',
  }, async () => {
    const t = tempDir('hookbucket-tls-');
    try {
      const key = join(t.dir, 'key.pem');
      const cert = join(t.dir, 'cert.pem');
      execFileSync(
        'openssl',
        [
          'req',
          '-x509',
          '-newkey',
          'ec',
          '-pkeyopt',
          'ec_paramgen_curve:prime256v1',
          '-nodes',
          '-keyout',
          key,
          '-out',
          cert,
          '-days',
          '1',
          '-subj',
          '/CN=127.0.0.1',
          '-addext',
          'subjectAltName=IP:127.0.0.1',
        ],
        { stdio: 'ignore' },
      );
      let arrived = 0;
      const server = createHttpsServer({ key: readFileSync(key), cert: readFileSync(cert) }, (_req, res) => {
        arrived++;
        res.end('should not get here');
      });
      server.on('tlsClientError', () => undefined);
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      try {
        const origin = `https://127.0.0.1:${(server.address() as AddressInfo).port}`;
        const r = expectError(await forward(agent, request(origin)));
        assert.equal(r.errorClass, 'tls', `${r.code}: ${r.message}`);
        assert.equal(arrived, 0);
      } finally {
        server.closeAllConnections();
        await new Promise<void>((r) => server.close(() => r()));
      }
    } finally {
      t.remove();
    }
  });
});

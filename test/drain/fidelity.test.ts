import assert from 'node:assert/strict';
import { randomBytes, randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { sign, verify } from '@octokit/webhooks-methods';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import type { Agent } from 'undici';
import { createDeliveryAgent } from '../../src/drain/forward.js';
import { DrainWorker } from '../../src/drain/worker.js';
import { ManualClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { SqliteDrainStore } from '../../src/store/sqlite/sqlite-drain.js';
import { startConsumer, type Consumer, type Received } from '../helpers/consumer.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/** Exact request bytes: the request line, the headers as written, then the body. */
function rawHttp(method: string, target: string, headers: string[], body: Buffer, framing: 'length' | 'chunked' = 'length'): Buffer {
  const lines = [`${method} ${target} HTTP/1.1`, 'Host: 127.0.0.1'];
  for (let i = 0; i < headers.length; i += 2) lines.push(`${headers[i]}: ${headers[i + 1]}`);
  if (framing === 'length') lines.push(`Content-Length: ${body.length}`);
  else lines.push('Transfer-Encoding: chunked');
  const head = Buffer.from(`${lines.join('\r\n')}\r\n\r\n`, 'latin1');
  if (framing === 'length') return Buffer.concat([head, body]);
  const half = Math.floor(body.length / 2);
  const chunk = (b: Buffer) => Buffer.concat([Buffer.from(`${b.length.toString(16)}\r\n`), b, Buffer.from('\r\n')]);
  return Buffer.concat([head, chunk(body.subarray(0, half)), chunk(body.subarray(half)), Buffer.from('0\r\n\r\n')]);
}

function valuesOf(raw: readonly string[], name: string): string[] {
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) out.push(raw[i + 1]!);
  return out;
}

/** The received header list without the framing undici writes itself (host, connection, content-length). */
function withoutFraming(raw: readonly string[]): string[] {
  const framing = new Set(['host', 'connection', 'content-length']);
  const out: string[] = [];
  for (let i = 0; i < raw.length; i += 2) if (!framing.has(raw[i]!.toLowerCase())) out.push(raw[i]!, raw[i + 1]!);
  return out;
}

interface Harness {
  s: TestServer;
  worker: DrainWorker;
  /** Ingests over a raw socket; returns the request id from the ack. */
  ingest(raw: Buffer): Promise<string>;
  /** One worker pass and its attempts, expecting `started` attempts. */
  drain(started: number): Promise<void>;
  close(): Promise<void>;
}

/** A real server (its own worker off), and the real drain worker on its database, driven by runOnce. */
async function harness(): Promise<Harness> {
  const s = await startTestServer({ worker: false });
  const drainStore = await SqliteDrainStore.open({ path: s.db });
  const agent: Agent = createDeliveryAgent();
  const clock = new ManualClock();
  const worker = new DrainWorker({ store: drainStore, dispatcher: agent, clock, logger: silentLogger, random: () => 0.5, leaseMs: 60_000 });
  return {
    s,
    worker,
    async ingest(raw) {
      const res = await rawRequest(s.url, raw);
      assert.equal(res.status, 200, res.body.toString());
      const id = res.headers['x-hookbucket-request-id'];
      assert.ok(id);
      return id;
    },
    async drain(started) {
      // The server stamps requests with the system clock; the worker's clock catches up to it.
      clock.set(Date.now());
      const r = await worker.runOnce();
      assert.equal(r.started, started);
    },
    async close() {
      await worker.stop(0);
      await agent.close();
      await drainStore.close();
      await s.stop();
    },
  };
}

function receivedFor(c: Consumer, id: string): Received {
  const got = c.received.filter((r) => valuesOf(r.rawHeaders, 'x-hookbucket-request-id')[0] === id);
  assert.equal(got.length, 1, `the consumer got request ${id} once`);
  return got[0]!;
}

describe('fidelity: raw socket → hookbucket → worker → consumer', () => {
  let h: Harness;
  let consumer: Consumer;
  before(async () => {
    consumer = await startConsumer();
    h = await harness();
    await h.s.store.createBucket({ name: 'fid', destination: `${consumer.url}/in/hook?k=v` });
    await h.s.store.createBucket({
      name: 'fid-nopath',
      destination: `${consumer.url}/in/hook?k=v`,
      drain: {
        forwardPath: false,
        forwardHeaders: [
          ['Authorization', 'Bearer for-consumer'],
          ['X-Env', 'test'],
        ],
      },
    });
  });
  after(async () => {
    await h.close();
    await consumer.close();
  });

  it('keeps method, raw target, header order/case/repeats minus the dropped set, and the body bytes', async () => {
    const body = Buffer.concat([Buffer.from([0x00, 0xff, 0xfe, 0xc3, 0x28, 0xef, 0xbb, 0xbf, 0x00, 0x0d, 0x0a]), randomBytes(70_000)]);
    const sent = [
      'X-Dup',
      'one',
      'Content-Type',
      'application/octet-stream',
      'x-dup',
      'two',
      'Connection',
      'keep-alive, X-Hop',
      'X-Hop',
      'hop-secret',
      'Keep-Alive',
      'timeout=5',
      'Proxy-Authorization',
      'Basic eDp5',
      'TE',
      'trailers',
      'X-MiXeD-Case',
      'Value With  Inner Spaces',
      'Trailer',
      'X-Checksum',
      'Upgrade',
      'h2c',
      'X-DUP',
      'three',
      'X-Hookbucket-Attempt',
      '99',
      'X-Latin1',
      'caf\u00e9',
    ];
    const id = await h.ingest(rawHttp('POST', '/b/fid/x/%2e%2e/y/a%2Fb%20c?a=1&a=2&b=%20', sent, body));
    await h.drain(1);
    const got = receivedFor(consumer, id);
    assert.equal(got.method, 'POST');
    // The sub-path's dot-segments go (src/policy/forward-path.ts); its other escapes and the query stay raw.
    assert.equal(got.url, '/in/hook/y/a%2Fb%20c?k=v&a=1&a=2&b=%20');
    assert.deepEqual(withoutFraming(got.rawHeaders), [
      'X-Dup',
      'one',
      'Content-Type',
      'application/octet-stream',
      'x-dup',
      'two',
      'X-MiXeD-Case',
      'Value With  Inner Spaces',
      'X-DUP',
      'three',
      'X-Latin1',
      'caf\u00e9',
      'x-hookbucket-request-id',
      id,
      'x-hookbucket-delivery-generation',
      '1',
      'x-hookbucket-attempt',
      '1',
    ]);
    assert.deepEqual(valuesOf(got.rawHeaders, 'host'), [new URL(consumer.url).host], "the consumer's host, not the sender's");
    assert.deepEqual(valuesOf(got.rawHeaders, 'content-length'), [String(body.length)]);
    assert.ok(!valuesOf(got.rawHeaders, 'connection').some((v) => /x-hop/i.test(v)));
    assert.ok(got.body.equals(body), 'byte-identical body');
    assert.equal((await h.s.store.getRequest(id))?.state, 'delivered');
  });

  const methods: Array<[string, string, Buffer, string]> = [
    ['PUT', '/b/fid/put', Buffer.from('{"put":true}'), '/in/hook/put?k=v'],
    ['PATCH', '/b/fid', Buffer.from([0x00, 0x01, 0x02]), '/in/hook?k=v'],
    ['DELETE', '/b/fid/items/7', Buffer.alloc(0), '/in/hook/items/7?k=v'],
    ['GET', '/b/fid/ping?x=%2F&y', Buffer.alloc(0), '/in/hook/ping?k=v&x=%2F&y'],
    ['POST', '/b/fid/', Buffer.alloc(0), '/in/hook/?k=v'],
  ];
  for (const [method, target, body, want] of methods) {
    it(`${method} ${target} arrives as ${method} ${want} with ${body.length} body bytes`, async () => {
      const id = await h.ingest(rawHttp(method, target, ['X-Method-Test', method], body));
      await h.drain(1);
      const got = receivedFor(consumer, id);
      assert.equal(got.method, method);
      assert.equal(got.url, want);
      assert.ok(got.body.equals(body));
      assert.deepEqual(withoutFraming(got.rawHeaders).slice(0, 2), ['X-Method-Test', method]);
    });
  }

  it('a chunked request goes on with a content-length and the same bytes', async () => {
    const body = randomBytes(20_000);
    const id = await h.ingest(rawHttp('POST', '/b/fid/chunked', ['Content-Type', 'application/octet-stream'], body, 'chunked'));
    await h.drain(1);
    const got = receivedFor(consumer, id);
    assert.deepEqual(valuesOf(got.rawHeaders, 'transfer-encoding'), []);
    assert.deepEqual(valuesOf(got.rawHeaders, 'content-length'), [String(body.length)]);
    assert.ok(got.body.equals(body));
  });

  it('forwardPath off keeps only the query; bucket forward headers replace the stored ones', async () => {
    const id = await h.ingest(
      rawHttp('POST', '/b/fid-nopath/x/y?q=1', ['Authorization', 'Bearer from-sender', 'X-A', '1'], Buffer.from('{}')),
    );
    await h.drain(1);
    const got = receivedFor(consumer, id);
    assert.equal(got.url, '/in/hook?k=v&q=1');
    assert.deepEqual(withoutFraming(got.rawHeaders), [
      'X-A',
      '1',
      'x-hookbucket-request-id',
      id,
      'x-hookbucket-delivery-generation',
      '1',
      'x-hookbucket-attempt',
      '1',
      'Authorization',
      'Bearer for-consumer',
      'X-Env',
      'test',
    ]);
  });
});

describe("fidelity: providers' signatures verify on the forwarded bytes", () => {
  const STRIPE_SECRET = `whsec_${randomBytes(16).toString('hex')}`;
  const GITHUB_SECRET = randomBytes(16).toString('hex');
  const SW_SECRET = `whsec_${randomBytes(24).toString('base64')}`;

  interface Verdict {
    id: string;
    provider: string;
    ok: boolean;
    error?: string;
  }
  const verdicts: Verdict[] = [];

  /** Each provider's own verification, as its docs tell a consumer to do it on the raw body. */
  async function check(req: IncomingMessage, body: Buffer): Promise<string> {
    const header = (name: string) => {
      const v = req.headers[name];
      return typeof v === 'string' ? v : undefined;
    };
    const stripeSig = header('stripe-signature');
    if (stripeSig !== undefined) {
      Stripe.webhooks.constructEvent(body, stripeSig, STRIPE_SECRET);
      return 'stripe';
    }
    const hubSig = header('x-hub-signature-256');
    if (hubSig !== undefined) {
      if (!(await verify(GITHUB_SECRET, body.toString('utf8'), hubSig))) throw new Error('X-Hub-Signature-256 does not match');
      return 'github';
    }
    new Webhook(SW_SECRET).verify(body, {
      'webhook-id': header('webhook-id') ?? '',
      'webhook-timestamp': header('webhook-timestamp') ?? '',
      'webhook-signature': header('webhook-signature') ?? '',
    });
    return 'standardwebhooks';
  }

  function verifier(req: IncomingMessage, res: ServerResponse, body: Buffer): void {
    const id = String(req.headers['x-hookbucket-request-id']);
    check(req, body).then(
      (provider) => {
        verdicts.push({ id, provider, ok: true });
        res.writeHead(204).end();
      },
      (e: unknown) => {
        verdicts.push({ id, provider: '?', ok: false, error: (e as Error).message });
        res.writeHead(400).end((e as Error).message);
      },
    );
  }

  let h: Harness;
  let consumer: Consumer;
  before(async () => {
    consumer = await startConsumer(verifier);
    h = await harness();
    await h.s.store.createBucket({ name: 'signed', destination: `${consumer.url}/webhooks` });
  });
  after(async () => {
    await h.close();
    await consumer.close();
  });

  // Pretty-printed JSON with non-ASCII text: whitespace and UTF-8 bytes are part of what is signed.
  const payload = JSON.stringify(
    {
      id: 'evt_1NG8Du2eZvKYlo2CUI79vXWy',
      object: 'event',
      type: 'payment_intent.succeeded',
      data: { object: { id: 'pi_1', amount: 2000, description: 'café ☕ «déjà vu»' } },
    },
    null,
    2,
  );
  const tampered = payload.replace('"amount": 2000', '"amount": 9000');

  interface Provider {
    name: string;
    /** What the library says about a body that does not match its signature. */
    mismatch: RegExp;
    /** Signature headers for `signed`, sent with the body `sent`. */
    headers(signed: string): Promise<string[]>;
  }
  const providers: Provider[] = [
    {
      name: 'stripe',
      mismatch: /No signatures found matching the expected signature/,
      headers: async (signed) => ['Stripe-Signature', Stripe.webhooks.generateTestHeaderString({ payload: signed, secret: STRIPE_SECRET })],
    },
    {
      name: 'github',
      mismatch: /X-Hub-Signature-256 does not match/,
      headers: async (signed) => [
        'X-GitHub-Event',
        'payment',
        'X-GitHub-Delivery',
        randomUUID(),
        'X-Hub-Signature-256',
        await sign(GITHUB_SECRET, signed),
      ],
    },
    {
      name: 'standardwebhooks',
      mismatch: /No matching signature found/,
      headers: async (signed) => {
        const msgId = `msg_${randomBytes(8).toString('hex')}`;
        const at = new Date();
        return [
          'webhook-id',
          msgId,
          'webhook-timestamp',
          String(Math.floor(at.getTime() / 1000)),
          'webhook-signature',
          new Webhook(SW_SECRET).sign(msgId, at, signed),
        ];
      },
    },
  ];

  for (const p of providers) {
    it(`${p.name}: the consumer's verification passes on the forwarded request`, async () => {
      const headers = ['Content-Type', 'application/json', ...(await p.headers(payload))];
      const id = await h.ingest(rawHttp('POST', '/b/signed', headers, Buffer.from(payload, 'utf8')));
      await h.drain(1);
      assert.deepEqual(
        verdicts.find((v) => v.id === id),
        { id, provider: p.name, ok: true },
      );
      assert.ok(receivedFor(consumer, id).body.equals(Buffer.from(payload, 'utf8')));
      assert.equal((await h.s.store.getRequest(id))?.state, 'delivered');
    });

    it(`${p.name}: a tampered body fails the same verification (negative control)`, async () => {
      const headers = ['Content-Type', 'application/json', ...(await p.headers(payload))];
      const id = await h.ingest(rawHttp('POST', '/b/signed', headers, Buffer.from(tampered, 'utf8')));
      await h.drain(1);
      const v = verdicts.find((x) => x.id === id);
      assert.equal(v?.ok, false);
      assert.match(v?.error ?? '', p.mismatch, 'failed on the signature, not on a missing header');
      assert.equal((await h.s.store.getRequest(id))?.state, 'failed', 'the 400 is terminal');
    });
  }
});

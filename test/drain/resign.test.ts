import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import type { IncomingMessage } from 'node:http';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { headerValues, parseVerifyScheme } from '../../src/policy/verify.js';
import { newId } from '../../src/shared/ids.js';
import type { ProviderSettings } from '../../src/store/store.js';
import { generateSigningSecret } from '../../src/verify/sign.js';
import { startConsumer, type Consumer, type Received } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';

// Re-signed deliveries (issue 15, point 6) through the real worker, a real SQLite file and a real
// consumer on loopback that checks hookbucket's signature with the `standardwebhooks` library, as
// a consumer would. The worker's clock is set to the real time before each send: the library
// checks the timestamp against Date.now() at its default 5-minute tolerance. Verdicts and dedup
// keys are written into the request rows as ingest stores them (columns of migration
// 2026-12-07T00-provider), since this file tests the worker, not ingest.

const STRIPE_SECRET = 'whsec_stripe_test_secret';

function provider(over: Partial<ProviderSettings>): Partial<ProviderSettings> {
  return {
    verify: { scheme: parseVerifyScheme('stripe'), secrets: [STRIPE_SECRET], toleranceMs: 300_000, onInvalid: 'quarantine' },
    ...over,
  };
}

/** Every value of a header as it arrived, whatever its case. */
const all = (r: Received, name: string): string[] => headerValues(r.rawHeaders, name);

function one(r: Received, name: string): string {
  const v = all(r, name);
  assert.equal(v.length, 1, `one ${name} header, got ${JSON.stringify(v)}`);
  return v[0]!;
}

/** The consumer's check: standardwebhooks' Webhook.verify over the body as received; 204, or 401 with the library's message. */
function verifyingConsumer(secret: string, checks: Array<{ ok: boolean; error?: string; parsed?: unknown }>) {
  return (req: IncomingMessage, res: import('node:http').ServerResponse, body: Buffer) => {
    try {
      const parsed = new Webhook(secret).verify(body, req.headers as Record<string, string>);
      checks.push({ ok: true, parsed });
      res.writeHead(204).end();
    } catch (e) {
      checks.push({ ok: false, error: (e as Error).message });
      res.writeHead(401).end((e as Error).message);
    }
  };
}

describe('re-signed deliveries (--sign standard)', () => {
  let b: DrainBench;
  let consumer: Consumer;
  const signing = generateSigningSecret();
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
  });
  afterEach(async () => {
    await b.close();
    await consumer.close();
  });

  /** Marks a stored request as ingest would have: its verdict and dedup key. */
  const mark = (id: string, result: string | null, dedupKey: string | null = null) =>
    b.raw
      .prepare('update requests set verify_scheme = ?, verify_result = ?, verify_reason = ?, dedup_key = ? where id = ?')
      .run(result === null ? null : 'stripe', result, result === 'verified' ? null : result, dedupKey, id);
  const replay = (ids: string[]) =>
    b.store.createReplay({
      id: newId(),
      bucket: 's',
      requestIds: ids,
      selection: { test: true },
      destination: null,
      rate: null,
      nowMs: b.clock.now(),
    });

  it('the consumer accepts the first attempt hours after receipt, and a replay 2.5 s later with a fresh timestamp and the same webhook-id', async () => {
    await b.store.createBucket({
      name: 's',
      destination: `${consumer.url}/hooks`,
      provider: provider({
        sign: { scheme: 'standard', secrets: [signing] },
        dedup: { key: { kind: 'provider' }, windowMs: 72 * 3_600_000 },
      }),
    });
    const checks: Array<{ ok: boolean; error?: string; parsed?: unknown }> = [];
    consumer.fallback = verifyingConsumer(signing, checks);
    const event = '{"id":"evt_1PqRsT","object":"event","type":"invoice.paid"}';
    // Received three hours ago (an outage): Stripe's own signature would be too old by now.
    b.clock.set(Date.now() - 3 * 3_600_000);
    const [id] = b.ingest('s', { rawHeaders: ['Content-Type', 'application/json', 'Stripe-Signature', 't=1,v1=ab'], body: event });
    mark(id!, 'verified', 'j:evt_1PqRsT');

    b.clock.set(Date.now());
    const w = b.worker();
    await w.runOnce();
    assert.equal(b.delivery(id!).state, 'delivered');
    assert.deepEqual(checks as unknown[], [{ ok: true, parsed: JSON.parse(event) }]);
    const first = consumer.received[0]!;
    assert.ok(first.body.equals(Buffer.from(event)), 'the body bytes as stored');
    assert.equal(one(first, 'webhook-id'), 'evt_1PqRsT', "the Stripe event's id, the bucket's dedup key");
    assert.equal(one(first, 'webhook-timestamp'), String(Math.floor(b.clock.now() / 1000)), "the attempt's send time");
    assert.match(one(first, 'webhook-signature'), /^v1,[A-Za-z0-9+/]{43}=$/);
    assert.equal(one(first, 'x-hookbucket-verified'), 'stripe');
    assert.equal(one(first, 'stripe-signature'), 't=1,v1=ab', "the sender's own headers still go");

    // A replay 2.5 s later (the worker's clock ahead of the real one: the library allows 5 minutes either way).
    b.clock.advance(2_500);
    await replay([id!]);
    await w.runOnce();
    assert.equal(consumer.received.length, 2);
    const again = consumer.received[1]!;
    assert.equal(checks[1]?.ok, true, checks[1]?.error);
    assert.equal(one(again, 'webhook-id'), 'evt_1PqRsT', 'the same id on every generation');
    assert.ok(Number(one(again, 'webhook-timestamp')) >= Number(one(first, 'webhook-timestamp')) + 2, 'a fresh timestamp');
    assert.notEqual(one(again, 'webhook-signature'), one(first, 'webhook-signature'));
    assert.equal(one(again, 'x-hookbucket-delivery-generation'), '2');
  });

  it('without a dedup key the webhook-id is the request id, the same on a retry after a failure', async () => {
    await b.store.createBucket({
      name: 's',
      destination: `${consumer.url}/hooks`,
      drain: { schedule: { baseMs: 60_000, multiplier: 1, capMs: 60_000, maxAttempts: 3, jitter: 'none' } },
      provider: { sign: { scheme: 'standard', secrets: [signing] } },
    });
    const checks: Array<{ ok: boolean; error?: string }> = [];
    consumer.script({ status: 503 });
    consumer.fallback = verifyingConsumer(signing, checks);
    b.clock.set(Date.now() - 60_000);
    const [id] = b.ingest('s', { body: '{"n":1}' });
    const w = b.worker();
    await w.runOnce();
    b.clock.set(Date.now());
    await w.runOnce();
    assert.equal(b.delivery(id!).state, 'delivered');
    assert.deepEqual(
      consumer.received.map((r) => one(r, 'webhook-id')),
      [id, id],
    );
    assert.deepEqual(
      consumer.received.map((r) => one(r, 'x-hookbucket-attempt')),
      ['1', '2'],
    );
    assert.equal(checks[0]?.ok, true, checks[0]?.error);
    assert.equal(consumer.received[1]!.rawHeaders.includes('x-hookbucket-verified'), false, 'the bucket does not verify');
  });

  it('rotation: two secrets give two signatures, and a consumer holding either one accepts', async () => {
    const next = generateSigningSecret();
    await b.store.createBucket({
      name: 's',
      destination: `${consumer.url}/hooks`,
      provider: { sign: { scheme: 'standard', secrets: [signing, next] } },
    });
    b.clock.set(Date.now());
    const [id] = b.ingest('s', { body: '{"rotated":true}' });
    await b.worker().runOnce();
    assert.equal(b.delivery(id!).state, 'delivered');
    const r = consumer.received[0]!;
    assert.equal(one(r, 'webhook-signature').split(' ').length, 2);
    const headers = Object.fromEntries(['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((n) => [n, one(r, n)]));
    assert.deepEqual(new Webhook(signing).verify(r.body, headers), { rotated: true });
    assert.deepEqual(new Webhook(next).verify(r.body, headers), { rotated: true });
    assert.throws(() => new Webhook(generateSigningSecret()).verify(r.body, headers), /No matching signature/);
  });

  it('stored webhook-* arrive as x-hookbucket-original-*, and a forged x-hookbucket-verified never passes through', async () => {
    await b.store.createBucket({
      name: 's',
      destination: `${consumer.url}/hooks`,
      provider: provider({ sign: { scheme: 'standard', secrets: [signing] } }),
    });
    b.clock.set(Date.now());
    const stored = [
      'Content-Type',
      'application/json',
      'Webhook-Id',
      'msg_from_sender',
      'Webhook-Timestamp',
      '1700000000',
      'Webhook-Signature',
      'v1,c2VuZGVy',
      'X-Hookbucket-Verified',
      'forged',
      'x-hookbucket-original-webhook-id',
      'forged too',
    ];
    const [verified, unverified] = b.ingest('s', { rawHeaders: stored, body: '{"a":1}' }, { rawHeaders: stored, body: '{"a":2}' });
    mark(verified!, 'verified');
    mark(unverified!, 'unverified');
    await b.worker().runOnce();
    assert.equal(consumer.received.length, 1, 'only the verified one is sent');
    const r = consumer.received[0]!;
    assert.equal(one(r, 'x-hookbucket-original-webhook-id'), 'msg_from_sender');
    assert.equal(one(r, 'x-hookbucket-original-webhook-timestamp'), '1700000000');
    assert.equal(one(r, 'x-hookbucket-original-webhook-signature'), 'v1,c2VuZGVy');
    assert.equal(one(r, 'webhook-id'), verified, "hookbucket's, once");
    assert.equal(all(r, 'webhook-signature').length, 1);
    assert.deepEqual(all(r, 'x-hookbucket-verified'), ['stripe'], 'the forged value is gone, ours is there once');
  });

  it('a verifying bucket without --sign: x-hookbucket-verified only for verified requests, never a forged one', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/hooks`, provider: provider({}) });
    await b.store.createBucket({ name: 'open', destination: `${consumer.url}/open` });
    const forged = ['X-Hookbucket-Verified', 'stripe', 'webhook-id', 'msg_1'];
    const [verified, imported] = b.ingest('s', { rawHeaders: forged, body: '1' }, { rawHeaders: forged, body: '2' });
    const [plain] = b.ingest('open', { rawHeaders: forged, body: '3' });
    mark(verified!, 'verified');
    mark(imported!, 'unverified');
    await b.worker().runOnce();
    assert.deepEqual(
      [verified, imported, plain].map((id) => b.delivery(id!).state),
      ['delivered', 'delivered', 'delivered'],
    );
    const byBody = new Map(consumer.received.map((r) => [r.body.toString(), r]));
    assert.deepEqual(all(byBody.get('1')!, 'x-hookbucket-verified'), ['stripe']);
    assert.deepEqual(all(byBody.get('2')!, 'x-hookbucket-verified'), [], 'imported: unverified');
    assert.deepEqual(all(byBody.get('3')!, 'x-hookbucket-verified'), [], 'a bucket that does not verify');
    for (const r of consumer.received) {
      assert.deepEqual(all(r, 'webhook-id'), ['msg_1'], "not re-signed: the sender's webhook-* go as they are");
      assert.deepEqual(all(r, 'webhook-signature'), []);
    }
  });

  it('never signs what is not verified: the attempt fails visibly as not_verified, and a replay after `requests verify` is signed', async () => {
    await b.store.createBucket({
      name: 's',
      destination: `${consumer.url}/hooks`,
      provider: provider({ sign: { scheme: 'standard', secrets: [signing] } }),
    });
    const checks: Array<{ ok: boolean; error?: string }> = [];
    consumer.fallback = verifyingConsumer(signing, checks);
    b.clock.set(Date.now());
    const [imported, before, good] = b.ingest('s', { body: '{"i":1}' }, { body: '{"i":2}' }, { body: '{"i":3}' });
    mark(imported!, 'unverified');
    mark(before!, null); // stored before the bucket verified senders
    mark(good!, 'verified');
    const w = b.worker();
    await w.runOnce();
    assert.equal(consumer.received.length, 1);
    assert.equal(consumer.received[0]!.body.toString(), '{"i":3}');
    assert.equal(b.delivery(good!).state, 'delivered');
    for (const [id, what] of [
      [imported!, /its verdict is unverified \(imported from a file\)/],
      [before!, /it has no verdict/],
    ] as const) {
      const d = b.delivery(id);
      assert.equal(d.state, 'failed');
      assert.equal(d.attempts, 1);
      const [a] = b.attempts(id);
      assert.equal(a!.outcome, 'failed');
      assert.equal(a!.reason, 'not_verified');
      assert.equal(a!.error_class, 'not_verified');
      assert.equal(a!.status, null);
      assert.equal(a!.next_attempt_at, null);
      assert.match(a!.error_message, what);
      assert.match(a!.error_message, new RegExp(`requests verify ${id}`));
    }
    // A day later nothing is due: it is not tried again by itself.
    b.clock.advance(24 * 3_600_000);
    assert.equal((await w.runOnce()).started, 0);

    // `requests verify` finds it verifies now; a replay sends it, signed.
    mark(imported!, 'verified');
    b.clock.set(Date.now());
    await replay([imported!]);
    await w.runOnce();
    assert.equal(b.delivery(imported!).state, 'delivered');
    assert.equal(consumer.received.length, 2);
    assert.equal(checks[1]?.ok, true, checks[1]?.error);
  });

  it('a binary body is signed over its exact bytes: a manual HMAC matches, and the standardwebhooks JS library fails it', async () => {
    await b.store.createBucket({
      name: 's',
      destination: `${consumer.url}/hooks`,
      provider: { sign: { scheme: 'standard', secrets: [signing] } },
    });
    b.clock.set(Date.now());
    const body = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0x00, 0xff, 0xfe, 0xc3, 0x28, 0x80]);
    const [id] = b.ingest('s', { rawHeaders: ['Content-Type', 'image/png'], body });
    await b.worker().runOnce();
    assert.equal(b.delivery(id!).state, 'delivered');
    const r = consumer.received[0]!;
    assert.ok(r.body.equals(body), 'forwarded byte for byte');
    const [msgId, ts, sig] = ['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((n) => one(r, n)) as [string, string, string];
    // The Standard Webhooks algorithm, by hand: HMAC-SHA256 keyed with the base64 after whsec_, over id.timestamp.body bytes.
    const mac = createHmac('sha256', Buffer.from(signing.slice('whsec_'.length), 'base64'))
      .update(`${msgId}.${ts}.`)
      .update(r.body)
      .digest('base64');
    assert.equal(sig, `v1,${mac}`);
    // The JS library turns the payload into a string first (payload.toString(): UTF-8 with U+FFFD
    // for invalid bytes), so it hashes other bytes and refuses a correct signature.
    assert.throws(() => new Webhook(signing).verify(r.body, { 'webhook-id': msgId, 'webhook-timestamp': ts, 'webhook-signature': sig }), {
      message: 'No matching signature found',
    });
  });

  it('the standardwebhooks JS library parses the payload as JSON unless told not to', async () => {
    await b.store.createBucket({
      name: 's',
      destination: `${consumer.url}/hooks`,
      provider: { sign: { scheme: 'standard', secrets: [signing] } },
    });
    b.clock.set(Date.now());
    b.ingest('s', { rawHeaders: ['Content-Type', 'application/x-www-form-urlencoded'], body: 'a=1&b=2' });
    await b.worker().runOnce();
    const r = consumer.received[0]!;
    const headers = Object.fromEntries(['webhook-id', 'webhook-timestamp', 'webhook-signature'].map((n) => [n, one(r, n)]));
    assert.throws(() => new Webhook(signing).verify(r.body, headers), SyntaxError, 'a valid signature, then JSON.parse of a form body');
    assert.equal(new Webhook(signing).verify(r.body, headers, { jsonParse: false }), undefined);
  });
});

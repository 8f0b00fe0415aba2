/**
 * Sender verification at ingest, over a real socket into a real SQLite store: every scheme
 * verified, invalid, missing and (where the scheme signs a timestamp) expired, under both
 * `--on-invalid` answers. Signatures come from tests/helpers/provider-sign.ts (the providers' own
 * libraries where they ship one for Node, else the documented algorithm). The server's clock is a
 * ManualClock, so tolerances are judged against a time that does not move.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { DEFAULT_TOLERANCE_MS, parseVerifyScheme, schemeText } from '../../src/policy/verify.js';
import { ManualClock } from '../../src/shared/clock.js';
import type { OnInvalid } from '../../src/store/store.js';
import { VerifyStream } from '../../src/verify/verify-stream.js';
import { send } from '../helpers/ingest-request.js';
import { schemeCases } from '../helpers/provider-sign.js';
import { rawRequest } from '../helpers/raw-http.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { until } from '../helpers/until.js';

const clock = new ManualClock(Math.floor(Date.now() / 1000) * 1000);
const NOW_S = clock.now() / 1000;
const payload = JSON.stringify({ id: 'evt_1', type: 'payment_intent.succeeded', note: 'caf\u00e9 \u2713' });
const short = (scheme: string) => scheme.split(':')[0]!;

function same(a: unknown, b: unknown): boolean {
  try {
    assert.deepEqual(a, b);
    return true;
  } catch {
    return false;
  }
}

function verifySettings(scheme: string, secrets: string[], onInvalid: OnInvalid) {
  return { scheme: parseVerifyScheme(scheme), secrets, toleranceMs: DEFAULT_TOLERANCE_MS, onInvalid };
}

describe('verification at ingest', () => {
  let s: TestServer;
  before(async () => {
    s = await startTestServer({}, { clock });
    for (const c of schemeCases) {
      for (const onInvalid of ['quarantine', 'reject'] as const) {
        await s.store.createBucket({
          name: `${onInvalid[0]}-${short(c.scheme)}`,
          destination: 'http://127.0.0.1:9/consumer',
          provider: { verify: verifySettings(c.scheme, [c.secret], onInvalid) },
        });
      }
    }
  });
  after(() => s.stop());

  const idOf = (res: { json: Record<string, unknown> | undefined }) => String(res.json?.id);

  for (const c of schemeCases) {
    const name = schemeText(parseVerifyScheme(c.scheme));
    describe(c.scheme, () => {
      it('verified: stored as accepted with its verdict, answered with the ack', async () => {
        const res = await send(s.url, 'POST', `/b/r-${short(c.scheme)}`, await c.sign(payload, NOW_S, c.secret), payload);
        assert.equal(res.status, 200, res.text);
        const stored = await s.store.getRequest(idOf(res));
        assert.equal(stored?.disposition, 'accepted');
        assert.deepEqual(stored?.verdict, { scheme: name, result: 'verified', reason: 'signature_matched' });
        assert.equal(stored?.body.toString('utf8'), payload);
      });

      it('reject: invalid, missing and expired get a 401 with their code; nothing is stored', async () => {
        const bucket = `r-${short(c.scheme)}`;
        const before = (await s.store.bucketCounts(bucket)).requests;
        const invalid = await send(s.url, 'POST', `/b/${bucket}`, await c.sign(payload, NOW_S, c.other), payload);
        assert.equal(invalid.status, 401);
        assert.deepEqual(invalid.json, { error: `the ${name} signature does not verify`, code: 'signature_invalid' });
        const missing = await send(s.url, 'POST', `/b/${bucket}`, ['Content-Type', 'application/json'], payload);
        assert.equal(missing.status, 401);
        assert.equal(missing.json?.code, 'signature_missing');
        const old = await send(s.url, 'POST', `/b/${bucket}`, await c.sign(payload, NOW_S - 600, c.secret), payload);
        if (c.expires) {
          assert.equal(old.status, 401);
          assert.equal(old.json?.code, 'signature_expired');
        } else {
          assert.equal(old.status, 200, 'a scheme without a signed tolerance never expires');
        }
        const after = (await s.store.bucketCounts(bucket)).requests;
        assert.equal(after - before, c.expires ? 0 : 1);
        const want: Record<string, number> = { signature_invalid: 1, signature_missing: 1 };
        if (c.expires) want.signature_expired = 1;
        await until(async () => same((await s.store.bucketCounts(bucket)).rejections, want), 'the rejections counted by reason');
      });

      it('quarantine: invalid, missing and expired are stored as quarantined with their verdict and get the normal ack', async () => {
        const bucket = `q-${short(c.scheme)}`;
        const tries: Array<[string, string[], string, string]> = [
          ['invalid', await c.sign(payload, NOW_S, c.other), 'invalid', 'no_matching_signature'],
          ['missing', ['Content-Type', 'application/json'], 'missing', 'no_signature_header'],
        ];
        if (c.expires) tries.push(['expired', await c.sign(payload, NOW_S - 600, c.secret), 'expired', 'timestamp_outside_tolerance']);
        for (const [what, headers, result, reason] of tries) {
          const res = await send(s.url, 'POST', `/b/${bucket}`, headers, payload);
          assert.equal(res.status, 200, what);
          assert.deepEqual(Object.keys(res.json ?? {}), ['id'], `${what}: the bucket's normal ack`);
          const stored = await s.store.getRequest(idOf(res));
          assert.equal(stored?.disposition, 'quarantined', what);
          assert.deepEqual(stored?.verdict, { scheme: name, result, reason }, what);
          assert.ok(stored?.body.equals(Buffer.from(payload)), what);
        }
        const counts = await s.store.bucketCounts(bucket);
        assert.equal(counts.states.quarantined, tries.length);
        assert.deepEqual(counts.rejections, {});
      });
    });
  }

  it('any secret of the list verifies (rotation)', async () => {
    const c = schemeCases.find((x) => x.scheme === 'stripe')!;
    await s.store.createBucket({ name: 'rotating', provider: { verify: verifySettings('stripe', [c.other, c.secret], 'reject') } });
    for (const secret of [c.secret, c.other]) {
      const res = await send(s.url, 'POST', '/b/rotating', await c.sign(payload, NOW_S, secret), payload);
      assert.equal(res.status, 200);
    }
    const res = await send(s.url, 'POST', '/b/rotating', await c.sign(payload, NOW_S, 'whsec_neither'), payload);
    assert.equal(res.status, 401);
  });

  it('a tolerance of its own: a Stripe signature 2 minutes old is expired under --verify-tolerance 1m', async () => {
    const c = schemeCases.find((x) => x.scheme === 'stripe')!;
    await s.store.createBucket({
      name: 'tight',
      provider: { verify: { ...verifySettings('stripe', [c.secret], 'reject'), toleranceMs: 60_000 } },
    });
    const old = await send(s.url, 'POST', '/b/tight', await c.sign(payload, NOW_S - 120, c.secret), payload);
    assert.equal(old.json?.code, 'signature_expired');
    const fresh = await send(s.url, 'POST', '/b/tight', await c.sign(payload, NOW_S - 30, c.secret), payload);
    assert.equal(fresh.status, 200);
  });

  describe('a large body is hashed as it streams in', () => {
    const secret = 'whsec_streaming';
    let calls = 0;
    let largest = 0;
    let original: VerifyStream['update'];
    before(async () => {
      await s.store.createBucket({
        name: 'big',
        maxBody: 64 * 1024 * 1024,
        provider: { verify: verifySettings('stripe', [secret], 'reject') },
      });
      // Counting calls on the real VerifyStream the server (in this process) uses.
      original = VerifyStream.prototype.update;
      VerifyStream.prototype.update = function (this: VerifyStream, chunk: Uint8Array) {
        calls++;
        largest = Math.max(largest, chunk.length);
        original.call(this, chunk);
      };
    });
    after(() => {
      VerifyStream.prototype.update = original;
    });

    const CHUNK = 64 * 1024; // 64 KiB

    it('a chunked 16 MiB body in 256 chunks (spooled): one update per chunk, none of the whole body', async () => {
      const piece = 'a'.repeat(CHUNK);
      const count = 256;
      const body = piece.repeat(count);
      const signature = Stripe.webhooks.generateTestHeaderString({ payload: body, secret, timestamp: NOW_S });
      const head = Buffer.from(
        `POST /b/big HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nStripe-Signature: ${signature}\r\nTransfer-Encoding: chunked\r\n\r\n`,
      );
      const frames: Buffer[] = [head];
      for (let i = 0; i < count; i++) frames.push(Buffer.from(`${CHUNK.toString(16)}\r\n${piece}\r\n`));
      frames.push(Buffer.from('0\r\n\r\n'));
      calls = 0;
      largest = 0;
      const res = await rawRequest(s.url, frames, { timeoutMs: 60_000 });
      assert.equal(res.status, 200, res.body.toString());
      assert.ok(calls >= count, `${calls} updates for ${count} chunks`);
      assert.ok(largest <= CHUNK, `the largest update was ${largest} bytes`);
      const stored = await s.store.getRequest(JSON.parse(res.body.toString()).id);
      assert.equal(stored?.size, body.length);
      assert.equal(stored?.verdict?.result, 'verified');
    });

    it('an 8 MiB body with a Content-Length: updated per socket read, never in one piece', async () => {
      const body = Buffer.alloc(8 * 1024 * 1024, 'b');
      const signature = Stripe.webhooks.generateTestHeaderString({ payload: body.toString('latin1'), secret, timestamp: NOW_S });
      const head = Buffer.from(
        `POST /b/big HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\nStripe-Signature: ${signature}\r\nContent-Length: ${body.length}\r\n\r\n`,
      );
      calls = 0;
      largest = 0;
      const res = await rawRequest(s.url, [head, body], { timeoutMs: 60_000 });
      assert.equal(res.status, 200, res.body.toString());
      assert.ok(calls >= body.length / CHUNK, `${calls} updates`);
      assert.ok(largest <= CHUNK, `the largest update was ${largest} bytes`);
    });

    it('a bad signature over a streamed body is still judged at the end: invalid', async () => {
      const body = 'c'.repeat(3 * CHUNK);
      const signature = Stripe.webhooks.generateTestHeaderString({ payload: `${body}x`, secret, timestamp: NOW_S });
      const res = await send(s.url, 'POST', '/b/big', ['Stripe-Signature', signature], body);
      assert.equal(res.json?.code, 'signature_invalid');
    });
  });
});

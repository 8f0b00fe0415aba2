/** hookbucket's re-signature, checked by the consumer-side `standardwebhooks` library. */
import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { generateSigningSecret, OFF_THREAD_SIGN_BYTES, signatureHeaders, standardSignatureHeaders } from '../../src/verify/sign.js';

const headersOf = (flat: string[]): Record<string, string> => {
  const h: Record<string, string> = {};
  for (let i = 0; i < flat.length; i += 2) h[flat[i]!] = flat[i + 1]!;
  return h;
};

describe('standardSignatureHeaders', () => {
  const body = '{"id":"evt_1","type":"invoice.paid"}';
  it('passes the standardwebhooks library at its default tolerance, with the send time as timestamp', () => {
    const secret = generateSigningSecret();
    const now = Date.now();
    const h = headersOf(standardSignatureHeaders('req_019a', now, Buffer.from(body), [secret]));
    assert.equal(h['webhook-id'], 'req_019a');
    assert.equal(h['webhook-timestamp'], String(Math.floor(now / 1000)));
    assert.deepEqual(new Webhook(secret).verify(body, h), JSON.parse(body));
  });
  it('signs with every secret while one is rotated: a consumer holding either accepts', () => {
    const [oldS, newS] = [generateSigningSecret(), generateSigningSecret()];
    const h = headersOf(standardSignatureHeaders('req_2', Date.now(), Buffer.from(body), [oldS, newS]));
    assert.equal(h['webhook-signature']!.split(' ').length, 2);
    assert.doesNotThrow(() => new Webhook(oldS).verify(body, h));
    assert.doesNotThrow(() => new Webhook(newS).verify(body, h));
    assert.throws(() => new Webhook(generateSigningSecret()).verify(body, h));
  });
  it('an attempt signed an hour ago is refused by the library: the timestamp is the send time', () => {
    const secret = generateSigningSecret();
    const h = headersOf(standardSignatureHeaders('req_3', Date.now() - 3_600_000, Buffer.from(body), [secret]));
    assert.throws(() => new Webhook(secret).verify(body, h), /too old/i);
  });
  it('generated secrets are whsec_ and 32 random bytes', () => {
    const s = generateSigningSecret();
    assert.match(s, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.notEqual(generateSigningSecret(), s);
  });
});

describe('signatureHeaders (a delivery attempt)', () => {
  const secrets = [generateSigningSecret(), generateSigningSecret()];
  const at = Date.UTC(2026, 11, 7, 12, 0, 0, 999);
  for (const size of [0, 100, OFF_THREAD_SIGN_BYTES - 1, OFF_THREAD_SIGN_BYTES, 3 * OFF_THREAD_SIGN_BYTES + 5]) {
    it(`signs a ${size}-byte body as standardSignatureHeaders does (off the event loop from ${OFF_THREAD_SIGN_BYTES} bytes)`, async () => {
      const body = Buffer.alloc(size);
      for (let i = 0; i < size; i++) body[i] = (i * 131 + 7) & 0xff;
      assert.deepEqual(await signatureHeaders('evt_1', at, body, secrets), standardSignatureHeaders('evt_1', at, body, secrets));
    });
  }
  it('fails on a secret that is not whsec_ base64, large body or small', async () => {
    await assert.rejects(signatureHeaders('x', at, Buffer.alloc(10), ['whsec_not base64']), /whsec_ followed by base64/);
    await assert.rejects(signatureHeaders('x', at, Buffer.alloc(OFF_THREAD_SIGN_BYTES), ['whsec_not base64']), /whsec_ followed by base64/);
  });
});

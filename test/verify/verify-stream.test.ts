/**
 * Signatures made by the providers' own libraries where they ship one for Node (stripe,
 * @octokit/webhooks-methods, standardwebhooks), and computed from the documented algorithm where
 * they do not (Shopify, Slack, Zoom, Meta, Dropbox, X), checked by hookbucket's streaming verifier.
 */
import assert from 'node:assert/strict';
import { createHmac, randomBytes } from 'node:crypto';
import { describe, it } from 'node:test';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { parseVerifyScheme, secretKey, type VerifyScheme } from '../../src/policy/verify.js';
import { hmacPads, sameText, secretFingerprint, startVerify, VerifyStream, verifyStored } from '../../src/verify/verify-stream.js';

const NOW = Date.UTC(2026, 11, 5, 12, 0, 0);
const NOW_S = Math.floor(NOW / 1000);
const TOL = 300_000;
const body = JSON.stringify({ id: 'evt_1', type: 'payment_intent.succeeded', note: 'caf\u00e9 \u2713' });
const hmac = (alg: 'sha256' | 'sha1', key: string | Buffer, data: string) => createHmac(alg, key).update(data, 'utf8');

/** Each scheme: a correct secret, a signer for (body, timestamp seconds, secret) → raw headers. */
interface Case {
  scheme: string;
  secret: string;
  other: string;
  sign: (payload: string, ts: number, secret: string) => Promise<string[]> | string[];
  expires: boolean;
}

const swSecret = () => `whsec_${randomBytes(32).toString('base64')}`;
const cases: Case[] = [
  {
    scheme: 'stripe',
    secret: 'whsec_test_secret_one',
    other: 'whsec_test_secret_two',
    sign: (p, ts, s) => ['Stripe-Signature', Stripe.webhooks.generateTestHeaderString({ payload: p, secret: s, timestamp: ts })],
    expires: true,
  },
  {
    scheme: 'github',
    secret: 'gh-secret',
    other: 'gh-other',
    sign: async (p, _ts, s) => ['X-Hub-Signature-256', await githubSign(s, p)],
    expires: false,
  },
  {
    scheme: 'meta',
    secret: 'app-secret',
    other: 'app-other',
    sign: async (p, _ts, s) => ['X-Hub-Signature-256', await githubSign(s, p)],
    expires: false,
  },
  {
    scheme: 'shopify',
    secret: 'shpss_1',
    other: 'shpss_2',
    sign: (p, _ts, s) => ['X-Shopify-Hmac-Sha256', hmac('sha256', s, p).digest('base64')],
    expires: false,
  },
  {
    scheme: 'slack',
    secret: 'slack-signing',
    other: 'slack-other',
    sign: (p, ts, s) => [
      'X-Slack-Request-Timestamp',
      String(ts),
      'X-Slack-Signature',
      `v0=${hmac('sha256', s, `v0:${ts}:${p}`).digest('hex')}`,
    ],
    expires: true,
  },
  {
    scheme: 'standard',
    secret: swSecret(),
    other: swSecret(),
    sign: (p, ts, s) => [
      'webhook-id',
      'msg_2a',
      'webhook-timestamp',
      String(ts),
      'webhook-signature',
      new Webhook(s).sign('msg_2a', new Date(ts * 1000), p),
    ],
    expires: true,
  },
  {
    scheme: 'zoom',
    secret: 'zoom-token',
    other: 'zoom-other',
    sign: (p, ts, s) => ['x-zm-request-timestamp', String(ts), 'x-zm-signature', `v0=${hmac('sha256', s, `v0:${ts}:${p}`).digest('hex')}`],
    expires: false,
  },
  {
    scheme: 'dropbox',
    secret: 'dbx-secret',
    other: 'dbx-other',
    sign: (p, _ts, s) => ['X-Dropbox-Signature', hmac('sha256', s, p).digest('hex')],
    expires: false,
  },
  {
    scheme: 'twitter',
    secret: 'consumer-secret',
    other: 'consumer-other',
    sign: (p, _ts, s) => ['x-twitter-webhooks-signature', `sha256=${hmac('sha256', s, p).digest('base64')}`],
    expires: false,
  },
  {
    scheme: 'hmac:X-Signature:sha1:hex:sha1=',
    secret: 'generic',
    other: 'generic-2',
    sign: (p, _ts, s) => ['X-Signature', `sha1=${hmac('sha1', s, p).digest('hex')}`],
    expires: false,
  },
];

function keys(scheme: VerifyScheme, secrets: string[]): Buffer[] {
  return secrets.map((s) => secretKey(scheme, s));
}

/** Feeds the body in pieces of `piece` bytes, as ingest does while it streams. */
function streamed(scheme: VerifyScheme, secrets: string[], headers: string[], payload: string, nowMs: number, piece: number) {
  const started = startVerify(scheme, keys(scheme, secrets), headers);
  if ('verdict' in started) return started.verdict;
  const bytes = Buffer.from(payload, 'utf8');
  for (let i = 0; i < bytes.length; i += piece) started.stream.update(bytes.subarray(i, i + piece));
  return started.stream.finish(nowMs, TOL);
}

describe('every scheme verifies what its provider signs', () => {
  for (const c of cases) {
    describe(c.scheme, () => {
      const scheme = parseVerifyScheme(c.scheme);
      it('verified, the body fed in 1-, 7- and whole-size pieces', async () => {
        const headers = await c.sign(body, NOW_S, c.secret);
        for (const piece of [1, 7, body.length]) {
          const v = streamed(scheme, [c.secret], headers, body, NOW, piece);
          assert.deepEqual([v.result, v.reason], ['verified', 'signature_matched'], `piece ${piece}`);
        }
      });
      it('invalid under another secret, and verified when the list holds both (rotation)', async () => {
        const headers = await c.sign(body, NOW_S, c.secret);
        assert.equal(streamed(scheme, [c.other], headers, body, NOW, 64).result, 'invalid');
        assert.equal(streamed(scheme, [c.other, c.secret], headers, body, NOW, 64).result, 'verified');
      });
      it('invalid when one body byte changed', async () => {
        const headers = await c.sign(body, NOW_S, c.secret);
        const v = verifyStored(scheme, keys(scheme, [c.secret]), headers, Buffer.from(body.replace('evt_1', 'evt_2')), NOW, TOL);
        assert.deepEqual([v.result, v.reason], ['invalid', 'no_matching_signature']);
      });
      it(c.expires ? 'expired when signed 6 minutes before arrival' : 'never expires (no tolerance in this scheme)', async () => {
        const headers = await c.sign(body, NOW_S - 360, c.secret);
        const v = verifyStored(scheme, keys(scheme, [c.secret]), headers, Buffer.from(body), NOW, TOL);
        assert.equal(v.result, c.expires ? 'expired' : 'verified');
      });
      it('missing without its headers', () => {
        const v = verifyStored(scheme, keys(scheme, [c.secret]), ['Content-Type', 'application/json'], Buffer.from(body), NOW, TOL);
        assert.equal(v.result, 'missing');
      });
    });
  }
});

describe('HMAC from prepared pads', () => {
  // VerifyStream's own two paths (one chunk hashed at the end; several fed as they stream in)
  // against createHmac, and against the same HMAC with one bit flipped.
  // The candidate goes in as hex (compared as text) or base64 (decoded, compared as bytes).
  const judge = (
    algorithm: 'sha256' | 'sha1',
    key: Buffer,
    prefix: string,
    chunks: Buffer[],
    candidate: Buffer,
    encoding: 'hex' | 'base64',
  ) => {
    const plan = { scheme: 'test', algorithm, prefix, candidates: [candidate.toString(encoding)], encoding, timestampMs: null };
    const stream = new VerifyStream(plan, [key]);
    for (const c of chunks) stream.update(c);
    return stream.finish(NOW, TOL).result;
  };
  it('equals createHmac for keys shorter than, equal to and longer than the 64-byte block, both algorithms, one chunk or many', () => {
    for (const algorithm of ['sha256', 'sha1'] as const) {
      for (const keyLength of [0, 1, 20, 32, 63, 64, 65, 100, 200]) {
        const key = randomBytes(keyLength);
        // 70,000 bytes stream in; the rest are one chunk each, largest first, so the reused scratch
        // would leak a longer body's tail into a shorter one's HMAC if it were hashed past the body.
        for (const bodyLength of [70_000, 65_536, 2048, 64, 1, 0]) {
          const body = randomBytes(bodyLength);
          // A byte string with bytes over 0x7f (as a latin1 header value carries them): hashed as
          // those bytes; under odd keys one past the 64 chars copied char by char.
          const prefix = keyLength % 2 === 0 ? '1700000000.\u00e9\u00ff.' : `msg_${'\u00e9x'.repeat(50)}.1700000000.`;
          const expected = createHmac(algorithm, key).update(Buffer.from(prefix, 'latin1')).update(body).digest();
          const wrong = Buffer.from(expected);
          wrong[bodyLength % wrong.length]! ^= 1;
          const uneven: Buffer[] = [];
          for (let at = 0; at < body.length; at += 1 + (at % 7) * 997) uneven.push(body.subarray(at, at + 1 + (at % 7) * 997));
          for (const [how, chunks] of [
            ['one chunk', [body]],
            ['uneven chunks', uneven],
          ] as const) {
            const label = `${algorithm}, key ${keyLength} B, body ${bodyLength} B, ${how}`;
            // Both encodings over both paths, as the key and body lengths vary.
            const encoding = (keyLength + bodyLength) % 2 === 0 ? 'hex' : 'base64';
            assert.equal(judge(algorithm, key, prefix, [...chunks], expected, encoding), 'verified', `${label}, ${encoding}`);
            assert.equal(judge(algorithm, key, prefix, [...chunks], wrong, encoding), 'invalid', `${label}, ${encoding}`);
          }
        }
        // The pads are prepared once per key buffer and reused.
        assert.equal(hmacPads(algorithm, key), hmacPads(algorithm, key));
      }
    }
  });
  it('checks every key: a later key of several may be the one that matches', () => {
    const body = randomBytes(2048);
    const keys = [randomBytes(32), randomBytes(32), randomBytes(32)];
    const prefix = 'v0:1700000000:';
    for (const k of keys) {
      const candidate = createHmac('sha256', k).update(prefix).update(body).digest('hex');
      // One chunk (hashed at the end) and two (streamed): each key's digest is compared before the next one's is made.
      for (const chunks of [[body], [body.subarray(0, 1000), body.subarray(1000)]]) {
        // A SHA-1-length candidate (never compared), a wrong one, then the right one.
        const others = [randomBytes(20).toString('hex'), randomBytes(32).toString('hex')];
        const plan = {
          scheme: 'test',
          algorithm: 'sha256' as const,
          prefix,
          candidates: [...others, candidate],
          encoding: 'hex' as const,
          timestampMs: null,
        };
        const stream = new VerifyStream(plan, keys);
        for (const c of chunks) stream.update(c);
        assert.equal(stream.finish(NOW, TOL).result, 'verified', `key ${keys.indexOf(k)}, ${chunks.length} chunk(s)`);
        const wrong = new VerifyStream({ ...plan, candidates: others }, keys);
        for (const c of chunks) wrong.update(c);
        assert.equal(wrong.finish(NOW, TOL).result, 'invalid');
      }
    }
  });
});

describe('sameText: equal texts', () => {
  const table: [string, string, string, boolean][] = [
    ['equal', 'ab12', 'ab12', true],
    ['both empty', '', '', true],
    ['first char differs', 'bb12', 'ab12', false],
    ['last char differs', 'ab13', 'ab12', false],
    ['case differs', 'AB12', 'ab12', false],
    ['one is a prefix of the other', 'ab1', 'ab12', false],
    ['longer', 'ab120', 'ab12', false],
  ];
  for (const [name, a, b, want] of table) it(name, () => assert.equal(sameText(a, b), want));
});

describe('signature text', () => {
  it('upper-case hex verifies as its lower-case spelling', () => {
    const body = Buffer.from('{"id":"evt_1"}');
    const sig = createHmac('sha256', 'k').update(body).digest('hex');
    const scheme = parseVerifyScheme('github');
    for (const text of [sig, sig.toUpperCase()]) {
      const v = verifyStored(scheme, [Buffer.from('k')], ['X-Hub-Signature-256', `sha256=${text}`], body, NOW, TOL);
      assert.equal(v.result, 'verified', text);
    }
  });
  it('base64 verifies as bytes: another spelling of the same bytes (spare bits set) passes, other bytes do not', () => {
    const body = Buffer.from('{"id":"evt_1"}');
    const sig = createHmac('sha256', 'k').update(body).digest('base64');
    // 32 bytes are 43 base64 chars and '=': the last char's low 2 bits are spare (0 from an encoder), and Buffer ignores them.
    const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
    const last = alphabet.indexOf(sig[42]!);
    const spare = `${sig.slice(0, 42)}${alphabet[last | 1]}=`;
    assert.notEqual(spare, sig);
    assert.deepEqual(Buffer.from(spare, 'base64'), Buffer.from(sig, 'base64'));
    const other = `${sig.slice(0, 42)}${alphabet[last ^ 4]}=`;
    const scheme = parseVerifyScheme('shopify');
    const judge = (text: string) => verifyStored(scheme, [Buffer.from('k')], ['X-Shopify-Hmac-Sha256', text], body, NOW, TOL).result;
    assert.equal(judge(sig), 'verified');
    assert.equal(judge(spare), 'verified');
    assert.equal(judge(other), 'invalid');
  });
});

describe('binary bodies', () => {
  it('a Standard Webhooks id over ASCII is signed as its UTF-8, as the reference library signs it', () => {
    // A Node sender writes the id 'msg_é' on the wire as the latin1 byte E9, which Node reads back
    // as 'é'; the reference library signs the id's UTF-8 (C3 A9).
    const key = randomBytes(32);
    const secret = `whsec_${key.toString('base64')}`;
    const body = '{"id":"evt_1"}';
    const id = 'msg_\u00e9';
    const sig = new Webhook(secret).sign(id, new Date(NOW_S * 1000), body);
    const headers = ['webhook-id', id, 'webhook-timestamp', String(NOW_S), 'webhook-signature', sig];
    const scheme = parseVerifyScheme('standard');
    assert.equal(verifyStored(scheme, keys(scheme, [secret]), headers, Buffer.from(body), NOW, TOL).result, 'verified');
    // The same signature under the id's latin1 bytes alone is other bytes.
    const latin1 = createHmac('sha256', key)
      .update(Buffer.from(`${id}.${NOW_S}.${body}`, 'latin1'))
      .digest('base64');
    assert.equal(
      verifyStored(scheme, keys(scheme, [secret]), headers.with(5, `v1,${latin1}`), Buffer.from(body), NOW, TOL).result,
      'invalid',
    );
  });
  it('base64 candidates: one of the wrong length is skipped, and a later one may match', () => {
    const key = randomBytes(32);
    const secret = `whsec_${key.toString('base64')}`;
    const body = Buffer.from('{"id":"evt_1"}');
    const right = createHmac('sha256', key).update(`msg_1.${NOW_S}.`).update(body).digest('base64');
    const others = `v1,${randomBytes(20).toString('base64')} v1,${randomBytes(32).toString('base64')}`;
    const scheme = parseVerifyScheme('standard');
    const judge = (sigs: string) =>
      verifyStored(
        scheme,
        keys(scheme, [secret]),
        ['webhook-id', 'msg_1', 'webhook-timestamp', String(NOW_S), 'webhook-signature', sigs],
        body,
        NOW,
        TOL,
      ).result;
    assert.equal(judge(`${others} v1,${right}`), 'verified');
    assert.equal(judge(others), 'invalid');
  });
  it('a scratch grown for a longer request still carries the same key’s pads', () => {
    const key = randomBytes(32);
    const run = (prefix: string, body: Buffer) => {
      const expected = createHmac('sha256', key).update(Buffer.from(prefix, 'latin1')).update(body).digest('hex');
      const stream = new VerifyStream(
        { scheme: 'test', algorithm: 'sha256', prefix, candidates: [expected], encoding: 'hex', timestampMs: null },
        [key],
      );
      stream.update(body);
      return stream.finish(NOW, TOL).result;
    };
    assert.equal(run('1.', randomBytes(10)), 'verified');
    // One chunk of 64 KiB and a 2,000-char prefix: longer than any earlier check here, so the scratch is replaced.
    assert.equal(run('x'.repeat(2000), randomBytes(64 * 1024)), 'verified');
    assert.equal(run('1.', randomBytes(10)), 'verified');
  });
  it('are verified over their bytes, not a decoded string', () => {
    const bytes = Buffer.from([0xff, 0x00, 0xfe, 0x80, 0x0a]);
    const sig = createHmac('sha256', 'k').update(bytes).digest('hex');
    const v = verifyStored(parseVerifyScheme('github'), [Buffer.from('k')], ['X-Hub-Signature-256', `sha256=${sig}`], bytes, NOW, TOL);
    assert.equal(v.result, 'verified');
  });
});

describe('secretFingerprint', () => {
  it('is short, stable, differs between secrets, and does not contain the secret', () => {
    const a = secretFingerprint('whsec_abcdef');
    assert.match(a, /^sha256:[0-9a-f]{12}$/);
    assert.equal(secretFingerprint('whsec_abcdef'), a);
    assert.notEqual(secretFingerprint('whsec_abcdeg'), a);
    assert.ok(!a.includes('abcdef'));
  });
});

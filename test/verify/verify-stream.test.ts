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
import { hmacPads, secretFingerprint, startVerify, VerifyStream, verifyStored } from '../../src/verify/verify-stream.js';

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
  const judge = (algorithm: 'sha256' | 'sha1', key: Buffer, prefix: Buffer, chunks: Buffer[], candidate: Buffer) => {
    const plan = { scheme: 'test', algorithm, prefix, candidates: [candidate], timestampMs: null };
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
          const prefix = Buffer.from('1700000000.', 'utf8');
          const expected = createHmac(algorithm, key).update(prefix).update(body).digest();
          const wrong = Buffer.from(expected);
          wrong[bodyLength % wrong.length]! ^= 1;
          const uneven: Buffer[] = [];
          for (let at = 0; at < body.length; at += 1 + (at % 7) * 997) uneven.push(body.subarray(at, at + 1 + (at % 7) * 997));
          for (const [how, chunks] of [
            ['one chunk', [body]],
            ['uneven chunks', uneven],
          ] as const) {
            const label = `${algorithm}, key ${keyLength} B, body ${bodyLength} B, ${how}`;
            assert.equal(judge(algorithm, key, prefix, [...chunks], expected), 'verified', label);
            assert.equal(judge(algorithm, key, prefix, [...chunks], wrong), 'invalid', label);
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
    const prefix = Buffer.from('v0:1700000000:', 'utf8');
    for (const k of keys) {
      const candidate = createHmac('sha256', k).update(prefix).update(body).digest();
      // One chunk (hashed at the end) and two (streamed): each key's digest is compared before the next one's is made.
      for (const chunks of [[body], [body.subarray(0, 1000), body.subarray(1000)]]) {
        const plan = { scheme: 'test', algorithm: 'sha256' as const, prefix, candidates: [randomBytes(32), candidate], timestampMs: null };
        const stream = new VerifyStream(plan, keys);
        for (const c of chunks) stream.update(c);
        assert.equal(stream.finish(NOW, TOL).result, 'verified', `key ${keys.indexOf(k)}, ${chunks.length} chunk(s)`);
        const wrong = new VerifyStream({ ...plan, candidates: [randomBytes(32)] }, keys);
        for (const c of chunks) wrong.update(c);
        assert.equal(wrong.finish(NOW, TOL).result, 'invalid');
      }
    }
  });
});

describe('binary bodies', () => {
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

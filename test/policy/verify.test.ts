import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  judgeVerify,
  parseVerifyScheme,
  planVerify,
  schemeText,
  secretKey,
  VerifyConfigError,
  type VerifyPlan,
} from '../../src/policy/verify.js';

describe('parseVerifyScheme', () => {
  const good: [string, string][] = [
    ['stripe', 'stripe'],
    ['github', 'github'],
    ['standard', 'standard'],
    [' twitter ', 'twitter'],
    ['hmac:X-Signature:sha256:hex', 'hmac:x-signature:sha256:hex'],
    ['hmac:X-Sig:sha1:base64:sha1=', 'hmac:x-sig:sha1:base64:sha1='],
    ['hmac:x-sig:sha256:hex:v0:', 'hmac:x-sig:sha256:hex:v0:'],
  ];
  for (const [input, text] of good)
    it(`reads "${input}" back as "${text}"`, () => assert.equal(schemeText(parseVerifyScheme(input)), text));

  const bad: [string, RegExp][] = [
    ['stripe2', /unknown verify scheme/],
    ['hmac:', /expected hmac:/],
    ['hmac:x sig:sha256:hex', /expected hmac:/],
    ['hmac:x-sig:md5:hex', /sha256 or sha1/],
    ['hmac:x-sig:sha256:b32', /hex or base64/],
  ];
  for (const [input, msg] of bad)
    it(`refuses "${input}"`, () =>
      assert.throws(
        () => parseVerifyScheme(input),
        (e: unknown) => e instanceof VerifyConfigError && msg.test(e.message),
      ));
});

describe('secretKey keeps each provider format as documented', () => {
  it('Stripe: the whsec_ string itself is the key', () =>
    assert.deepEqual(secretKey({ kind: 'stripe' }, 'whsec_abc'), Buffer.from('whsec_abc', 'utf8')));
  it('Standard Webhooks: the base64 after whsec_, with or without the prefix', () => {
    const raw = Buffer.alloc(32, 7);
    assert.deepEqual(secretKey({ kind: 'standard' }, `whsec_${raw.toString('base64')}`), raw);
    assert.deepEqual(secretKey({ kind: 'standard' }, raw.toString('base64')), raw);
  });
  const badStandard: [string, RegExp][] = [
    [`whsec_${Buffer.alloc(23).toString('base64')}`, /24 to 64 bytes; this one is 23/],
    [`whsec_${Buffer.alloc(65).toString('base64')}`, /this one is 65/],
    ['whsec_not base64!', /base64/],
  ];
  for (const [s, msg] of badStandard)
    it(`Standard Webhooks refuses ${s.slice(0, 20)}…`, () => assert.throws(() => secretKey({ kind: 'standard' }, s), msg));
  it('an empty secret is refused for every scheme', () => assert.throws(() => secretKey({ kind: 'github' }, ''), /empty/));
});

const hex32 = 'ab'.repeat(32);
const b64_32 = Buffer.alloc(32, 1).toString('base64');

describe('planVerify reads the headers each scheme signs with', () => {
  const cases: {
    name: string;
    scheme: string;
    headers: string[];
    prefix?: string;
    candidates?: number;
    timestampMs?: number | null;
    verdict?: [string, string];
  }[] = [
    {
      name: 'stripe, two v1 and a v0',
      scheme: 'stripe',
      headers: ['Stripe-Signature', `t=1700000000,v1=${hex32},v0=${hex32},v1=${hex32}`],
      prefix: '1700000000.',
      candidates: 2,
      timestampMs: 1_700_000_000_000,
    },
    {
      name: 'stripe, spaces around items, an item without =, empty items and an empty v1',
      scheme: 'stripe',
      headers: ['Stripe-Signature', ` t = 1700000000 , v1=${hex32} ,junk,,v1=,`],
      prefix: '1700000000.',
      candidates: 1,
      timestampMs: 1_700_000_000_000,
    },
    {
      name: 'stripe, the header given twice',
      scheme: 'stripe',
      headers: ['Stripe-Signature', 't=1700000000', 'stripe-signature', `v1=${hex32}`],
      prefix: '1700000000.',
      candidates: 1,
      timestampMs: 1_700_000_000_000,
    },
    {
      name: 'stripe, a v1 that is not hex',
      scheme: 'stripe',
      headers: ['Stripe-Signature', `t=1700000000,v1=${hex32.slice(2)}zz`],
      verdict: ['invalid', 'malformed_signature_header'],
    },
    {
      name: 'stripe, 60,000 items without = before the real ones (read once, not rescanned per item)',
      scheme: 'stripe',
      headers: ['Stripe-Signature', `${','.repeat(30_000)}${'x,'.repeat(15_000)}t=1700000000,v1=${hex32}`],
      prefix: '1700000000.',
      candidates: 1,
      timestampMs: 1_700_000_000_000,
    },
    {
      name: 'stripe, 60,000 commas and no =',
      scheme: 'stripe',
      headers: ['Stripe-Signature', ','.repeat(60_000)],
      verdict: ['invalid', 'malformed_timestamp'],
    },
    {
      name: 'stripe without the header',
      scheme: 'stripe',
      headers: ['Content-Type', 'application/json'],
      verdict: ['missing', 'no_signature_header'],
    },
    {
      name: 'stripe without t',
      scheme: 'stripe',
      headers: ['Stripe-Signature', `v1=${hex32}`],
      verdict: ['invalid', 'malformed_timestamp'],
    },
    {
      name: 'stripe with two t',
      scheme: 'stripe',
      headers: ['Stripe-Signature', `t=1,t=2,v1=${hex32}`],
      verdict: ['invalid', 'malformed_timestamp'],
    },
    {
      name: 'stripe without v1',
      scheme: 'stripe',
      headers: ['Stripe-Signature', `t=1,v0=${hex32}`],
      verdict: ['invalid', 'malformed_signature_header'],
    },
    { name: 'github', scheme: 'github', headers: ['X-Hub-Signature-256', `sha256=${hex32}`], prefix: '', candidates: 1, timestampMs: null },
    {
      name: 'github sha1 header only',
      scheme: 'github',
      headers: ['X-Hub-Signature', `sha1=${'ab'.repeat(20)}`],
      verdict: ['missing', 'no_signature_header'],
    },
    {
      name: 'github, not hex',
      scheme: 'github',
      headers: ['x-hub-signature-256', 'sha256=zz'],
      verdict: ['invalid', 'malformed_signature_header'],
    },
    {
      name: 'github, hex then not hex',
      scheme: 'github',
      headers: ['x-hub-signature-256', `sha256=${hex32.slice(0, 62)}zz`],
      verdict: ['invalid', 'malformed_signature_header'],
    },
    {
      name: 'github, an odd number of hex digits',
      scheme: 'github',
      headers: ['x-hub-signature-256', `sha256=${hex32.slice(0, 63)}`],
      verdict: ['invalid', 'malformed_signature_header'],
    },
    {
      name: 'github, a space inside the hex',
      scheme: 'github',
      headers: ['x-hub-signature-256', `sha256=${hex32.slice(0, 32)} ${hex32.slice(32)}`],
      verdict: ['invalid', 'malformed_signature_header'],
    },
    {
      name: 'github, a character above U+00FF whose low byte is a hex digit',
      scheme: 'github',
      headers: ['x-hub-signature-256', `sha256=\u0161${hex32.slice(1)}`],
      verdict: ['invalid', 'malformed_signature_header'],
    },
    {
      name: 'github, upper-case hex',
      scheme: 'github',
      headers: ['x-hub-signature-256', `sha256=${hex32.toUpperCase()}`],
      prefix: '',
      candidates: 1,
      timestampMs: null,
    },
    { name: 'meta', scheme: 'meta', headers: ['X-Hub-Signature-256', `sha256=${hex32}`], prefix: '', candidates: 1, timestampMs: null },
    { name: 'shopify', scheme: 'shopify', headers: ['X-Shopify-Hmac-Sha256', b64_32], prefix: '', candidates: 1, timestampMs: null },
    {
      name: 'slack',
      scheme: 'slack',
      headers: ['X-Slack-Request-Timestamp', '1700000000', 'X-Slack-Signature', `v0=${hex32}`],
      prefix: 'v0:1700000000:',
      candidates: 1,
      timestampMs: 1_700_000_000_000,
    },
    {
      name: 'slack without timestamp',
      scheme: 'slack',
      headers: ['X-Slack-Signature', `v0=${hex32}`],
      verdict: ['missing', 'no_timestamp_header'],
    },
    {
      name: 'slack, timestamp not a number',
      scheme: 'slack',
      headers: ['X-Slack-Request-Timestamp', '17e8', 'X-Slack-Signature', `v0=${hex32}`],
      verdict: ['invalid', 'malformed_timestamp'],
    },
    {
      name: 'zoom: signed timestamp, no tolerance',
      scheme: 'zoom',
      headers: ['x-zm-request-timestamp', '1700000000', 'x-zm-signature', `v0=${hex32}`],
      prefix: 'v0:1700000000:',
      candidates: 1,
      timestampMs: null,
    },
    {
      name: 'standard, two signatures and an unknown version',
      scheme: 'standard',
      headers: ['webhook-id', 'msg_1', 'webhook-timestamp', '1700000000', 'webhook-signature', `v1,${b64_32} v1a,xyz v1,${b64_32}`],
      prefix: 'msg_1.1700000000.',
      candidates: 2,
      timestampMs: 1_700_000_000_000,
    },
    {
      // An id over ASCII is signed as its UTF-8: 'é' as the two bytes C3 A9.
      name: 'standard, an id over ASCII',
      scheme: 'standard',
      headers: ['webhook-id', 'msg_\u00e9', 'webhook-timestamp', '1700000000', 'webhook-signature', `v1,${b64_32}`],
      prefix: 'msg_\u00c3\u00a9.1700000000.',
      candidates: 1,
      timestampMs: 1_700_000_000_000,
    },
    {
      name: 'standard without id',
      scheme: 'standard',
      headers: ['webhook-timestamp', '1', 'webhook-signature', `v1,${b64_32}`],
      verdict: ['missing', 'no_id_header'],
    },
    {
      name: 'standard with two ids',
      scheme: 'standard',
      headers: ['webhook-id', 'a', 'webhook-id', 'b', 'webhook-timestamp', '1', 'webhook-signature', `v1,${b64_32}`],
      verdict: ['invalid', 'malformed_id'],
    },
    { name: 'dropbox', scheme: 'dropbox', headers: ['X-Dropbox-Signature', hex32], prefix: '', candidates: 1, timestampMs: null },
    {
      name: 'twitter',
      scheme: 'twitter',
      headers: ['x-twitter-webhooks-signature', `sha256=${b64_32}`],
      prefix: '',
      candidates: 1,
      timestampMs: null,
    },
    {
      name: 'hmac with a prefix',
      scheme: 'hmac:X-Sig:sha1:hex:sha1=',
      headers: ['x-sig', `sha1=${'cd'.repeat(20)}`],
      prefix: '',
      candidates: 1,
      timestampMs: null,
    },
    {
      name: 'hmac, value without the prefix',
      scheme: 'hmac:X-Sig:sha1:hex:sha1=',
      headers: ['x-sig', 'cd'.repeat(20)],
      verdict: ['invalid', 'malformed_signature_header'],
    },
  ];
  for (const c of cases) {
    it(c.name, () => {
      const planned = planVerify(parseVerifyScheme(c.scheme), c.headers);
      if (c.verdict) {
        assert.ok('verdict' in planned, 'expected a verdict from the headers alone');
        assert.deepEqual([planned.verdict.result, planned.verdict.reason], c.verdict);
        return;
      }
      assert.ok('plan' in planned, `expected a plan, got ${JSON.stringify(planned)}`);
      assert.equal(planned.plan.prefix, c.prefix);
      assert.equal(planned.plan.candidates.length, c.candidates);
      assert.equal(planned.plan.timestampMs, c.timestampMs);
    });
  }
});

describe('judgeVerify checks the signature, then the tolerance', () => {
  const plan = (timestampMs: number | null): VerifyPlan => ({
    scheme: 'stripe',
    algorithm: 'sha256',
    prefix: '',
    candidates: [],
    encoding: 'hex',
    timestampMs,
  });
  const T = 1_700_000_000_000;
  const table: [string, VerifyPlan, boolean, number, string][] = [
    ['no match is invalid, however fresh', plan(T), false, T, 'invalid no_matching_signature'],
    ['no match is invalid, not expired, when old too', plan(T), false, T + 3_600_000, 'invalid no_matching_signature'],
    ['a match inside the tolerance', plan(T), true, T + 300_000, 'verified signature_matched'],
    ['a match one ms past it', plan(T), true, T + 300_001, 'expired timestamp_outside_tolerance'],
    ['a match from the future past it', plan(T), true, T - 300_001, 'expired timestamp_outside_tolerance'],
    ['no timestamp never expires', plan(null), true, T + 86_400_000 * 365, 'verified signature_matched'],
  ];
  for (const [name, p, matched, now, want] of table) {
    it(name, () => {
      const v = judgeVerify(p, matched, now, 300_000);
      assert.equal(`${v.result} ${v.reason}`, want);
    });
  }
});

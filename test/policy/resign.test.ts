import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  keepsForwardHeader,
  originalHeaderName,
  signPlan,
  verifiedHeader,
  webhookId,
  type ResignSettings,
  type VerdictLike,
} from '../../src/policy/resign.js';

const ID = '019af3c2-7f00-7000-8000-000000000001';
const SIGN = { scheme: 'standard' as const, secrets: ['whsec_a', 'whsec_b'] };
const VERIFY = { scheme: 'stripe' };
const verdict = (result: string, scheme = 'stripe'): VerdictLike => ({ scheme, result });

describe('webhookId: stable per event, from the stored dedup key', () => {
  const cases: Array<[string, string | null, string]> = [
    ['no dedup key: the request id', null, ID],
    ['a header key, its h: tag dropped', 'h:0b6f5c2e-1f7a-11ef-8d2b-9a3f', '0b6f5c2e-1f7a-11ef-8d2b-9a3f'],
    ['a body key (Stripe event id), its j: tag dropped', 'j:evt_1PqRsT2eZvKYlo2C', 'evt_1PqRsT2eZvKYlo2C'],
    ['a key with a colon in it keeps the rest', 'j:a:b', 'a:b'],
    ['an untagged key as it is', 'msg_2x', 'msg_2x'],
    ['a key with a space is no header token: the request id', 'j:two words', ID],
    ['a key with a control byte: the request id', 'h:a\x01b', ID],
    ['a non-ASCII key: the request id', 'j:événement', ID],
    ['an empty value: the request id', 'j:', ID],
  ];
  for (const [name, key, want] of cases) it(name, () => assert.equal(webhookId(ID, key), want));
});

describe('signPlan', () => {
  const cases: Array<[string, ResignSettings, VerdictLike | null, 'plain' | 'sign' | 'refuse']> = [
    ['no --sign: plain', { verify: null, sign: null }, null, 'plain'],
    ['no --sign, verifying: plain even for an unverified request', { verify: VERIFY, sign: null }, verdict('unverified'), 'plain'],
    ['--sign without --verify: every request signed', { verify: null, sign: SIGN }, null, 'sign'],
    ['--sign --verify, verified: signed', { verify: VERIFY, sign: SIGN }, verdict('verified'), 'sign'],
    ['--sign --verify, imported unverified: refused', { verify: VERIFY, sign: SIGN }, verdict('unverified'), 'refuse'],
    ['--sign --verify, invalid (released by naming its state): refused', { verify: VERIFY, sign: SIGN }, verdict('invalid'), 'refuse'],
    ['--sign --verify, expired: refused', { verify: VERIFY, sign: SIGN }, verdict('expired'), 'refuse'],
    ['--sign --verify, missing: refused', { verify: VERIFY, sign: SIGN }, verdict('missing'), 'refuse'],
    ['--sign --verify, no verdict (stored before --verify): refused', { verify: VERIFY, sign: SIGN }, null, 'refuse'],
    ['--sign, verify since turned off, a stored invalid verdict: refused', { verify: null, sign: SIGN }, verdict('invalid'), 'refuse'],
    ['--sign, verify since turned off, a stored verified verdict: signed', { verify: null, sign: SIGN }, verdict('verified'), 'sign'],
  ];
  for (const [name, settings, v, want] of cases) {
    it(name, () => assert.equal(signPlan(settings, { id: ID, verdict: v, dedupKey: null }).kind, want));
  }
  it('a signed plan carries the id and every secret', () => {
    assert.deepEqual(signPlan({ verify: VERIFY, sign: SIGN }, { id: ID, verdict: verdict('verified'), dedupKey: 'j:evt_9' }), {
      kind: 'sign',
      id: 'evt_9',
      secrets: ['whsec_a', 'whsec_b'],
    });
  });
  it('a refusal names the verdict and the way out, with a stable reason', () => {
    const p = signPlan({ verify: VERIFY, sign: SIGN }, { id: ID, verdict: verdict('unverified'), dedupKey: null });
    assert.equal(p.kind, 'refuse');
    assert.equal(p.kind === 'refuse' && p.reason, 'not_verified');
    assert.match(p.kind === 'refuse' ? p.message : '', /verdict is unverified \(imported from a file\).*requests verify 019af3c2/);
  });
});

describe('verifiedHeader', () => {
  const cases: Array<[string, ResignSettings, VerdictLike | null, string | null]> = [
    ['verifying, verified: the scheme', { verify: VERIFY, sign: null }, verdict('verified'), 'stripe'],
    [
      'verifying, a generic scheme as its text',
      { verify: VERIFY, sign: null },
      verdict('verified', 'hmac:x-sig:sha256:hex'),
      'hmac:x-sig:sha256:hex',
    ],
    ['verifying, unverified: none', { verify: VERIFY, sign: SIGN }, verdict('unverified'), null],
    ['verifying, invalid: none', { verify: VERIFY, sign: null }, verdict('invalid'), null],
    ['verifying, no verdict: none', { verify: VERIFY, sign: null }, null, null],
    ['not verifying (any more), verified: none', { verify: null, sign: SIGN }, verdict('verified'), null],
  ];
  for (const [name, settings, v, want] of cases) it(name, () => assert.equal(verifiedHeader(settings, v), want));
});

describe('originalHeaderName: a stored webhook-* header on a re-signed attempt is renamed, never dropped', () => {
  const cases: Array<[string, string, string | null]> = [
    ['webhook-id', 'webhook-id', 'x-hookbucket-original-webhook-id'],
    ['its case kept', 'Webhook-Signature', 'x-hookbucket-original-Webhook-Signature'],
    ['any webhook-* name, not only the three signature headers', 'WEBHOOK-Attempt', 'x-hookbucket-original-WEBHOOK-Attempt'],
    ['a name only containing webhook-: not renamed', 'X-Webhook-Id', null],
    ['webhook without the dash: not renamed', 'webhookid', null],
    ['another header: not renamed', 'Stripe-Signature', null],
  ];
  for (const [name, header, want] of cases) it(name, () => assert.equal(originalHeaderName(header), want));
});

describe('keepsForwardHeader: a bucket --forward-header on a re-signed attempt', () => {
  const cases: Array<[string, boolean]> = [
    ['webhook-id', false],
    ['Webhook-Timestamp', false],
    ['WEBHOOK-SIGNATURE', false],
    // Kept: it goes out beside the stored header of its name, which is renamed (originalHeaderName).
    ['Webhook-Source', true],
    ['X-Env', true],
  ];
  for (const [name, want] of cases) it(`${name}: ${want ? 'kept' : 'left out'}`, () => assert.equal(keepsForwardHeader(name), want));
});

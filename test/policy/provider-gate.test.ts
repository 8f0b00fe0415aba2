import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import type { HandshakeName } from '../../src/policy/handshake.js';
import {
  allowHeader,
  enabledHandshakes,
  type FailedVerdict,
  graphClientStates,
  HANDSHAKE_RATE,
  methodGate,
  rejectAnswer,
  retryAfterSeconds,
} from '../../src/policy/provider-gate.js';
import { FULL_BUCKET, takeToken } from '../../src/policy/token-bucket.js';

describe('enabledHandshakes', () => {
  const table: Array<[string | null, HandshakeName[], HandshakeName[]]> = [
    [null, [], []],
    ['stripe', [], []],
    ['slack', [], ['slack']],
    ['twitter', [], ['twitter']],
    ['zoom', ['graph'], ['zoom', 'graph']],
    ['meta', ['meta', 'dropbox'], ['meta', 'dropbox']],
    [null, ['graph'], ['graph']],
    ['hmac:x-sig:sha256:hex', ['graph'], ['graph']],
  ];
  for (const [scheme, named, want] of table) {
    it(`${scheme} + [${named.join(',')}]`, () => assert.deepEqual(enabledHandshakes(scheme, named), want));
  }
});

describe('methodGate and allowHeader', () => {
  const table: Array<[string, string[] | null, HandshakeName[], string]> = [
    ['GET', null, [], 'allowed'],
    ['DELETE', null, ['meta'], 'allowed'],
    ['POST', ['POST'], [], 'allowed'],
    ['GET', ['POST'], [], 'refused'],
    ['GET', ['POST'], ['meta'], 'handshake_only'],
    ['GET', ['POST'], ['dropbox'], 'handshake_only'],
    ['GET', ['POST'], ['twitter'], 'handshake_only'],
    ['GET', ['POST'], ['slack'], 'refused'],
    ['POST', ['PUT'], ['graph'], 'handshake_only'],
    ['POST', ['PUT'], ['zoom'], 'handshake_only'],
    ['PUT', ['POST'], ['slack', 'meta'], 'refused'],
    ['put', ['PUT'], [], 'allowed'],
  ];
  for (const [method, methods, hs, want] of table) {
    it(`${method} under ${JSON.stringify(methods)} with [${hs.join(',')}]: ${want}`, () =>
      assert.equal(methodGate(method, methods, hs), want));
  }
  it('Allow lists the methods, then the handshakes’ own, once each', () => {
    assert.equal(allowHeader(['POST', 'PUT'], []), 'POST, PUT');
    assert.equal(allowHeader(['POST'], ['meta', 'slack', 'twitter']), 'POST, GET');
    assert.equal(allowHeader(['put'], ['graph']), 'PUT, POST');
  });
});

describe('rejectAnswer', () => {
  const table: Array<[FailedVerdict, string]> = [
    [{ scheme: 'stripe', result: 'invalid', reason: 'no_matching_signature' }, 'signature_invalid'],
    [{ scheme: 'stripe', result: 'invalid', reason: 'malformed_signature_header' }, 'signature_invalid'],
    [{ scheme: 'github', result: 'missing', reason: 'no_signature_header' }, 'signature_missing'],
    [{ scheme: 'slack', result: 'expired', reason: 'timestamp_outside_tolerance' }, 'signature_expired'],
    [{ scheme: 'graph', result: 'invalid', reason: 'client_state_mismatch' }, 'client_state_mismatch'],
    [{ scheme: 'graph', result: 'missing', reason: 'no_client_state' }, 'client_state_missing'],
  ];
  for (const [v, code] of table) it(`${v.scheme} ${v.result} → ${code}`, () => assert.equal(rejectAnswer(v).code, code));
});

describe('the handshake rate', () => {
  it('20 at once, then one per 100 ms; Retry-After in whole seconds', () => {
    let s = FULL_BUCKET;
    const t0 = 1_000_000;
    for (let i = 0; i < 20; i++) {
      const r = takeToken(HANDSHAKE_RATE, s, t0);
      assert.ok(r.taken, `take ${i}`);
      s = r.state;
    }
    const over = takeToken(HANDSHAKE_RATE, s, t0);
    assert.equal(over.taken, false);
    assert.equal(over.nextAvailableAtMs, t0 + 100);
    assert.equal(retryAfterSeconds(t0, over.nextAvailableAtMs), 1);
    assert.ok(takeToken(HANDSHAKE_RATE, s, t0 + 100).taken);
    assert.equal(retryAfterSeconds(t0, t0 + 2500), 3);
    assert.equal(retryAfterSeconds(t0, t0), 1);
  });
});

describe('graphClientStates', () => {
  const b = (v: string) => Buffer.from(v);
  const table: Array<[string, unknown]> = [
    ['{"value":[{"clientState":"a"},{"clientState":"b"}]}', { kind: 'states', states: ['a', 'b'] }],
    ['{"value":[{"clientState":"a"},{"id":1}]}', { kind: 'missing' }],
    ['{"value":[]}', { kind: 'missing' }],
    ['{"value":{"clientState":"a"}}', { kind: 'missing' }],
    ['{"value":[{"clientState":7}]}', { kind: 'missing' }],
    ['[{"clientState":"a"}]', { kind: 'missing' }],
    ['not json', { kind: 'missing' }],
    ['', { kind: 'missing' }],
    ['{"value":[null]}', { kind: 'missing' }],
  ];
  for (const [body, want] of table) it(JSON.stringify(body), () => assert.deepEqual(graphClientStates(b(body)), want));
});

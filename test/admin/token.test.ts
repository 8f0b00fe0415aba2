import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { issueSession, SESSION_TTL_MS, tokensEqual, verifySession } from '../../src/admin/token.js';

const TOKEN = 'a'.repeat(40);

describe('tokensEqual (constant-time after hashing both sides)', () => {
  it('is true for the same token and false for any other', () => {
    assert.equal(tokensEqual(TOKEN, TOKEN), true);
    assert.equal(tokensEqual(`${TOKEN.slice(0, -1)}b`, TOKEN), false, 'same length, last character differs');
    assert.equal(tokensEqual(`b${TOKEN.slice(1)}`, TOKEN), false, 'same length, first character differs');
    assert.equal(tokensEqual('', TOKEN), false);
    assert.equal(tokensEqual(TOKEN.toUpperCase(), TOKEN), false, 'case matters');
    assert.equal(tokensEqual('tökën-ünïcode-'.repeat(3), 'tökën-ünïcode-'.repeat(3)), true, 'UTF-8 tokens');
  });

  it('compares tokens of any lengths without throwing: timingSafeEqual, which throws on unequal lengths, sees two 32-byte digests', () => {
    for (const given of ['x', TOKEN.slice(0, 31), `${TOKEN}${TOKEN}`, 'z'.repeat(10_000)]) {
      assert.doesNotThrow(() => tokensEqual(given, TOKEN));
      assert.equal(tokensEqual(given, TOKEN), false, given.slice(0, 20));
    }
    assert.equal(tokensEqual(TOKEN, TOKEN.slice(0, 39)), false, 'a prefix of the token is not the token');
  });
});

describe('session cookies (stateless HMAC of the expiry, keyed by the token)', () => {
  const now = Date.UTC(2026, 11, 5);

  it('verifies a session issued under the same token until it expires', () => {
    const v = issueSession(TOKEN, now);
    assert.match(v, /^v1\.\d+\.[A-Za-z0-9_-]{43}$/);
    assert.equal(verifySession(TOKEN, v, now), true);
    assert.equal(verifySession(TOKEN, v, now + SESSION_TTL_MS - 1), true);
    assert.equal(verifySession(TOKEN, v, now + SESSION_TTL_MS), false, 'expired');
  });

  it('is the same value whenever the same token issues it at the same time: nothing is stored, so it survives a restart', () => {
    assert.equal(issueSession(TOKEN, now), issueSession(TOKEN, now));
  });

  it('refuses a session issued under another token (a changed token ends every session)', () => {
    assert.equal(verifySession(TOKEN, issueSession('b'.repeat(40), now), now), false);
  });

  it('refuses a session whose expiry was moved, whose MAC was changed, or that is malformed', () => {
    const v = issueSession(TOKEN, now);
    const [, exp, mac] = v.split('.') as [string, string, string];
    assert.equal(verifySession(TOKEN, `v1.${Number(exp) + SESSION_TTL_MS}.${mac}`, now), false, 'extended expiry');
    const flipped = mac.slice(0, -1) + (mac.endsWith('A') ? 'B' : 'A');
    assert.equal(verifySession(TOKEN, `v1.${exp}.${flipped}`, now), false, 'changed MAC');
    for (const bad of [
      undefined,
      '',
      'v1',
      `v2.${exp}.${mac}`,
      `v1.${exp}.${mac}x`,
      `v1.${exp}.${mac.slice(1)}`,
      `v1.-5.${mac}`,
      `v1.${exp}.${mac}.x`,
      TOKEN,
    ]) {
      assert.equal(verifySession(TOKEN, bad, now), false, String(bad));
    }
  });
});

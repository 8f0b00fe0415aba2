import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { detectHandshake, HANDSHAKES, type HandshakeName, handshakeOfScheme, hmacAnswer } from '../../src/policy/handshake.js';

const json = (v: unknown) => Buffer.from(JSON.stringify(v));
const all = [...HANDSHAKES];

describe('detectHandshake', () => {
  const table: { name: string; enabled?: HandshakeName[]; method: string; query?: string; body?: Buffer | null; want: unknown }[] = [
    {
      name: 'slack url_verification',
      method: 'POST',
      body: json({ token: 'x', challenge: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P', type: 'url_verification' }),
      want: {
        name: 'slack',
        kind: 'echo',
        token: '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P',
        needs: 'signature',
        nosniff: true,
      },
    },
    { name: 'a slack event is not a handshake', method: 'POST', body: json({ type: 'event_callback', event: {} }), want: null },
    {
      name: 'slack challenge with markup is refused',
      method: 'POST',
      body: json({ type: 'url_verification', challenge: '<script>' }),
      want: 'bad_token',
    },
    {
      name: 'meta subscribe',
      method: 'GET',
      query: 'hub.mode=subscribe&hub.verify_token=vt&hub.challenge=1158201444',
      want: { name: 'meta', kind: 'echo', token: '1158201444', needs: 'verify_token', verifyToken: 'vt', nosniff: false },
    },
    { name: 'meta without verify_token', method: 'GET', query: 'hub.mode=subscribe&hub.challenge=1', want: 'bad_token' },
    {
      name: 'meta with two challenges',
      method: 'GET',
      query: 'hub.mode=subscribe&hub.verify_token=a&hub.challenge=1&hub.challenge=2',
      want: 'bad_token',
    },
    { name: 'a GET without hub.mode is not a handshake', method: 'GET', query: 'a=1', want: null },
    {
      name: 'graph validation, URL-decoded',
      enabled: ['graph'],
      method: 'POST',
      query: 'validationToken=Validation%3A+Testing+client+application+reachability',
      body: null,
      want: { name: 'graph', kind: 'echo', token: 'Validation: Testing client application reachability', needs: 'none', nosniff: true },
    },
    { name: 'graph token with a newline', enabled: ['graph'], method: 'POST', query: 'validationToken=a%0Ab', want: 'bad_token' },
    {
      name: 'graph with a body is a notification',
      enabled: ['graph'],
      method: 'POST',
      query: 'validationToken=a',
      body: json({ value: [] }),
      want: null,
    },
    {
      name: 'graph is off unless named',
      method: 'POST',
      query: 'validationToken=a',
      enabled: ['slack', 'meta', 'zoom', 'dropbox', 'twitter'],
      want: null,
    },
    {
      name: 'zoom url_validation',
      method: 'POST',
      body: json({ event: 'endpoint.url_validation', payload: { plainToken: 'qgg8vlvZRS6UYooatFL8Aw' }, event_ts: 1 }),
      want: { name: 'zoom', kind: 'hmac', token: 'qgg8vlvZRS6UYooatFL8Aw', needs: 'signature' },
    },
    {
      name: 'zoom oracle: a plainToken shaped like a signed message',
      method: 'POST',
      body: json({ event: 'endpoint.url_validation', payload: { plainToken: 'v0:1700000000:{"event":"meeting.started"}' } }),
      want: 'bad_token',
    },
    {
      name: 'dropbox challenge',
      method: 'GET',
      query: 'challenge=abc-123_X',
      want: { name: 'dropbox', kind: 'echo', token: 'abc-123_X', needs: 'none', nosniff: true },
    },
    { name: 'dropbox challenge too long', method: 'GET', query: `challenge=${'a'.repeat(257)}`, want: 'bad_token' },
    {
      name: 'x crc',
      method: 'GET',
      query: 'crc_token=FAKE_crc_1',
      want: { name: 'twitter', kind: 'hmac', token: 'FAKE_crc_1', needs: 'none' },
    },
    {
      name: 'x crc oracle: a JSON-shaped crc_token',
      method: 'GET',
      query: `crc_token=${encodeURIComponent('{"for_user_id":"1"}')}`,
      want: 'bad_token',
    },
    { name: 'x crc oracle: empty', method: 'GET', query: 'crc_token=', want: 'bad_token' },
    { name: 'nothing enabled: nothing recognised', enabled: [], method: 'GET', query: 'crc_token=a', want: null },
    {
      name: 'a large body is never parsed',
      method: 'POST',
      body: Buffer.concat([json({ type: 'url_verification', challenge: 'a' }), Buffer.alloc(20_000, 32)]),
      want: null,
    },
  ];
  for (const c of table) {
    it(c.name, () => {
      const got = detectHandshake(c.enabled ?? all, { method: c.method, query: c.query ?? '', body: c.body ?? null });
      if (c.want === 'bad_token') assert.equal(got?.kind, 'bad_token', JSON.stringify(got));
      else assert.deepEqual(got, c.want);
    });
  }
});

describe('handshakes that come with a scheme', () => {
  const table: [string, string | null][] = [
    ['slack', 'slack'],
    ['meta', 'meta'],
    ['zoom', 'zoom'],
    ['dropbox', 'dropbox'],
    ['twitter', 'twitter'],
    ['stripe', null],
    ['github', null],
    ['standard', null],
  ];
  for (const [scheme, want] of table) it(`${scheme} → ${want}`, () => assert.equal(handshakeOfScheme(scheme), want));
});

describe('hmacAnswer', () => {
  const mac = Buffer.from('00ff10', 'hex');
  it('zoom: plainToken and the hex HMAC', () =>
    assert.deepEqual(JSON.parse(hmacAnswer('zoom', 'tok', mac).body), { plainToken: 'tok', encryptedToken: '00ff10' }));
  it('x: sha256= and the base64 HMAC', () =>
    assert.deepEqual(JSON.parse(hmacAnswer('twitter', 'tok', mac).body), { response_token: 'sha256=AP8Q' }));
});

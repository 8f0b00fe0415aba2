/**
 * URL handshakes answered inline by a real server, each sent the way its provider sends it (no
 * provider ships a Node library for these, so the signed ones are signed here from the documented
 * algorithm: Slack's and Zoom's v0 signature, Zoom's encryptedToken, X's CRC response token), plus
 * the oracle attempts the token rule must refuse. Methods (`--methods`) and Graph's clientState too.
 * The server's clock is a ManualClock: the handshake rate limit is judged at a time that stands still.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { DEFAULT_TOLERANCE_MS, parseVerifyScheme } from '../../src/policy/verify.js';
import { ManualClock } from '../../src/shared/clock.js';
import type { OnInvalid, StoredRequest } from '../../src/store/store.js';
import { send } from '../helpers/ingest-request.js';
import { slackHeaders, zoomHeaders } from '../helpers/provider-sign.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { until } from '../helpers/until.js';

const clock = new ManualClock(Math.floor(Date.now() / 1000) * 1000);
const NOW_S = clock.now() / 1000;
const SLACK = 'slack-signing-secret';
const ZOOM = 'zoom-secret-token';
const X = 'x-consumer-secret';
const META_TOKEN = 'meta-verify-token-1';
const CLIENT_STATE = 'graph-client-state-1';

const verify = (scheme: string, secret: string, onInvalid: OnInvalid = 'reject') => ({
  scheme: parseVerifyScheme(scheme),
  secrets: [secret],
  toleranceMs: DEFAULT_TOLERANCE_MS,
  onInvalid,
});

describe('URL handshakes answered inline', () => {
  let s: TestServer;
  before(async () => {
    s = await startTestServer({}, { clock });
    const d = 'http://127.0.0.1:9/consumer';
    await s.store.createBucket({ name: 'slack', destination: d, provider: { verify: verify('slack', SLACK) } });
    await s.store.createBucket({ name: 'slack-q', destination: d, provider: { verify: verify('slack', SLACK, 'quarantine') } });
    await s.store.createBucket({ name: 'zoom', destination: d, provider: { verify: verify('zoom', ZOOM) } });
    await s.store.createBucket({
      name: 'meta',
      destination: d,
      provider: { verify: verify('meta', 'app-secret'), verifyToken: META_TOKEN },
    });
    await s.store.createBucket({ name: 'meta-nt', provider: { verify: verify('meta', 'app-secret') } });
    await s.store.createBucket({ name: 'graph', destination: d, provider: { handshakes: ['graph'], graphClientState: CLIENT_STATE } });
    await s.store.createBucket({ name: 'dropbox', provider: { verify: verify('dropbox', 'dbx-secret') } });
    await s.store.createBucket({ name: 'twitter', provider: { verify: verify('twitter', X) } });
    await s.store.createBucket({ name: 'rate', provider: { handshakes: ['dropbox'] } });
    await s.store.createBucket({ name: 'posts', provider: { methods: ['POST', 'PUT'] } });
    await s.store.createBucket({
      name: 'meta-post',
      provider: { verify: verify('meta', 'app-secret'), verifyToken: META_TOKEN, methods: ['POST'] },
    });
  });
  after(() => s.stop());

  /** The requests a bucket stored, newest first (handshakes are stored in the background: wait for `n`). */
  async function stored(bucket: string, n: number): Promise<StoredRequest[]> {
    let ids: string[] = [];
    await until(async () => {
      ids = (await s.store.listRequests(bucket, {}, { limit: 100 })).requests.map((r) => r.id);
      return ids.length >= n;
    }, `${n} requests stored in ${bucket}`);
    return Promise.all(ids.map(async (id) => (await s.store.getRequest(id))!));
  }

  describe('Slack url_verification', () => {
    const challenge = '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P';
    const body = JSON.stringify({ token: 'Jhj5dZrVaK7ZwHHjRyZWjbDl', challenge, type: 'url_verification' });

    it('signed: the challenge is echoed as text/plain, then stored as a handshake with its verdict', async () => {
      const res = await send(s.url, 'POST', '/b/slack', ['Content-Type', 'application/json', ...slackHeaders(body, NOW_S, SLACK)], body);
      assert.equal(res.status, 200);
      assert.equal(res.text, challenge);
      assert.match(res.headers['content-type']!, /^text\/plain/);
      assert.equal(res.headers['x-content-type-options'], 'nosniff');
      const [req] = await stored('slack', 1);
      assert.equal(req!.disposition, 'handshake');
      assert.deepEqual(req!.verdict, { scheme: 'slack', result: 'verified', reason: 'signature_matched' });
      assert.equal(req!.body.toString(), body);
    });

    it('with a bad, missing or old signature it is not answered: judged as invalid (reject: 401)', async () => {
      const bad = await send(s.url, 'POST', '/b/slack', slackHeaders(body, NOW_S, 'not-the-secret'), body);
      assert.equal(bad.status, 401);
      assert.equal(bad.json?.code, 'signature_invalid');
      assert.ok(!bad.text.includes(challenge));
      const missing = await send(s.url, 'POST', '/b/slack', ['Content-Type', 'application/json'], body);
      assert.equal(missing.json?.code, 'signature_missing');
      const old = await send(s.url, 'POST', '/b/slack', slackHeaders(body, NOW_S - 3600, SLACK), body);
      assert.equal(old.json?.code, 'signature_expired');
    });

    it('quarantine: an unsigned challenge gets the normal ack and is stored quarantined, never echoed', async () => {
      const res = await send(s.url, 'POST', '/b/slack-q', [], body);
      assert.equal(res.status, 200);
      assert.deepEqual(Object.keys(res.json ?? {}), ['id']);
      const req = await s.store.getRequest(String(res.json?.id));
      assert.equal(req?.disposition, 'quarantined');
      assert.equal(req?.verdict?.result, 'missing');
    });

    it('oracle: a challenge shaped like a signing base string (v0:<ts>:<body>) is refused with 400, even signed', async () => {
      const inner = JSON.stringify({ type: 'event_callback', event_id: 'Ev1' });
      const oracle = JSON.stringify({ type: 'url_verification', challenge: `v0:${NOW_S}:${inner}` });
      const res = await send(s.url, 'POST', '/b/slack', slackHeaders(oracle, NOW_S, SLACK), oracle);
      assert.equal(res.status, 400);
      assert.equal(res.json?.code, 'handshake_token_invalid');
    });
  });

  describe('Zoom endpoint.url_validation', () => {
    const plainToken = 'qgg8vlvZRS6UYooatFL8Aw';
    const body = JSON.stringify({ payload: { plainToken }, event_ts: NOW_S * 1000, event: 'endpoint.url_validation' });

    it('signed: answered {plainToken, encryptedToken} with the hex HMAC-SHA256 of plainToken', async () => {
      const res = await send(s.url, 'POST', '/b/zoom', ['Content-Type', 'application/json', ...zoomHeaders(body, NOW_S, ZOOM)], body);
      assert.equal(res.status, 200);
      // Zoom's documented check: encryptedToken = hex(HMAC-SHA256(secret token, plainToken)).
      assert.deepEqual(res.json, { plainToken, encryptedToken: createHmac('sha256', ZOOM).update(plainToken).digest('hex') });
      assert.match(res.headers['content-type']!, /^application\/json/);
      const [req] = await stored('zoom', 1);
      assert.equal(req!.disposition, 'handshake');
    });

    it('unsigned or signed with another secret: not answered (401)', async () => {
      const unsigned = await send(s.url, 'POST', '/b/zoom', [], body);
      assert.equal(unsigned.json?.code, 'signature_missing');
      const wrong = await send(s.url, 'POST', '/b/zoom', zoomHeaders(body, NOW_S, 'other'), body);
      assert.equal(wrong.json?.code, 'signature_invalid');
      assert.ok(!('encryptedToken' in (wrong.json ?? {})));
    });

    it('oracle: a plainToken of v0:<ts>:<body> is refused with 400, never signed', async () => {
      const inner = JSON.stringify({ event: 'meeting.started', payload: {} });
      const oracle = JSON.stringify({ payload: { plainToken: `v0:${NOW_S}:${inner}` }, event: 'endpoint.url_validation' });
      const res = await send(s.url, 'POST', '/b/zoom', zoomHeaders(oracle, NOW_S, ZOOM), oracle);
      assert.equal(res.status, 400);
      assert.equal(res.json?.code, 'handshake_token_invalid');
      assert.ok(!res.text.includes('encryptedToken'));
    });
  });

  describe('Meta hub.challenge', () => {
    const q = (token: string, challenge = '1158201444') =>
      `/b/meta?hub.mode=subscribe&hub.verify_token=${encodeURIComponent(token)}&hub.challenge=${challenge}`;

    it('with the verify token: the challenge as text/plain, stored as a handshake', async () => {
      const res = await send(s.url, 'GET', q(META_TOKEN));
      assert.equal(res.status, 200);
      assert.equal(res.text, '1158201444');
      assert.match(res.headers['content-type']!, /^text\/plain/);
      const [req] = await stored('meta', 1);
      assert.equal(req!.disposition, 'handshake');
      assert.equal(req!.method, 'GET');
    });

    it('another token, or none set on the bucket: 403', async () => {
      for (const token of ['meta-verify-token-2', 'meta-verify-token-1x', '', 'm']) {
        const res = await send(s.url, 'GET', q(token));
        assert.equal(res.status, 403, token);
        assert.equal(res.json?.code, 'verify_token_mismatch');
        assert.ok(!res.text.includes('1158201444'));
      }
      const unset = await send(s.url, 'GET', q(META_TOKEN).replace('/b/meta?', '/b/meta-nt?'));
      assert.equal(unset.status, 403);
    });

    it('a challenge with markup: 400', async () => {
      const res = await send(s.url, 'GET', q(META_TOKEN, '%3Cscript%3E'));
      assert.equal(res.status, 400);
    });
  });

  describe('Microsoft Graph', () => {
    it('POST ?validationToken= with an empty body: 200 text/plain with the URL-decoded token', async () => {
      const token = 'Validation: Testing client application reachability for subscription Request-Id: 9c1b9d8a-6a1f';
      const res = await send(s.url, 'POST', `/b/graph?validationToken=${encodeURIComponent(token)}`, []);
      assert.equal(res.status, 200);
      assert.equal(res.text, token);
      assert.match(res.headers['content-type']!, /^text\/plain/);
      assert.equal(res.headers['x-content-type-options'], 'nosniff');
    });

    it('a token with a control character: 400', async () => {
      const res = await send(s.url, 'POST', '/b/graph?validationToken=a%0Ab', []);
      assert.equal(res.status, 400);
    });

    it('notifications: every clientState must match; a mismatch is quarantined (scheme graph)', async () => {
      const note = (clientState: string) => ({ subscriptionId: 's1', changeType: 'created', clientState, resource: 'Users/1' });
      const good = JSON.stringify({ value: [note(CLIENT_STATE), note(CLIENT_STATE)] });
      const ok = await send(s.url, 'POST', '/b/graph', ['Content-Type', 'application/json'], good);
      assert.equal(ok.status, 200);
      const okReq = await s.store.getRequest(String(ok.json?.id));
      assert.equal(okReq?.disposition, 'accepted');
      assert.deepEqual(okReq?.verdict, { scheme: 'graph', result: 'verified', reason: 'client_state_matched' });

      const mixed = JSON.stringify({ value: [note(CLIENT_STATE), note('forged')] });
      const bad = await send(s.url, 'POST', '/b/graph', ['Content-Type', 'application/json'], mixed);
      assert.equal(bad.status, 200, 'quarantined requests get the normal ack');
      const badReq = await s.store.getRequest(String(bad.json?.id));
      assert.equal(badReq?.disposition, 'quarantined');
      assert.deepEqual(badReq?.verdict, { scheme: 'graph', result: 'invalid', reason: 'client_state_mismatch' });

      const none = await send(s.url, 'POST', '/b/graph', ['Content-Type', 'application/json'], '{"hello":1}');
      const noneReq = await s.store.getRequest(String(none.json?.id));
      assert.equal(noneReq?.verdict?.result, 'missing');
    });
  });

  describe('Dropbox challenge', () => {
    it('GET ?challenge=: echoed as text/plain with nosniff', async () => {
      const res = await send(s.url, 'GET', '/b/dropbox?challenge=X8kTd7p_c-2');
      assert.equal(res.status, 200);
      assert.equal(res.text, 'X8kTd7p_c-2');
      assert.match(res.headers['content-type']!, /^text\/plain/);
      assert.equal(res.headers['x-content-type-options'], 'nosniff');
    });

    it('a challenge of HTML: 400, never reflected', async () => {
      const res = await send(s.url, 'GET', `/b/dropbox?challenge=${encodeURIComponent('<html><script>alert(1)</script>')}`);
      assert.equal(res.status, 400);
      assert.ok(!res.text.includes('<script>'));
    });
  });

  describe('X (Twitter) CRC', () => {
    it('GET ?crc_token=: {"response_token":"sha256=<base64 HMAC-SHA256 with the consumer secret>"}', async () => {
      const token = 'MjA5NjQ4NDA1Mzk3ODc3MTQ0OQ';
      const res = await send(s.url, 'GET', `/b/twitter?crc_token=${token}&nonce=abc`);
      assert.equal(res.status, 200);
      // X's documented algorithm: base64(HMAC-SHA256(consumer secret, crc_token)).
      assert.deepEqual(res.json, { response_token: `sha256=${createHmac('sha256', X).update(token).digest('base64')}` });
      assert.match(res.headers['content-type']!, /^application\/json/);
    });

    it('oracle: a JSON-shaped crc_token (a body X would sign) is refused with 400', async () => {
      const shaped = JSON.stringify({ for_user_id: '2244994945', tweet_create_events: [{ id_str: '1' }] });
      const res = await send(s.url, 'GET', `/b/twitter?crc_token=${encodeURIComponent(shaped)}`);
      assert.equal(res.status, 400);
      assert.equal(res.json?.code, 'handshake_token_invalid');
      assert.ok(!res.text.includes('response_token'));
    });
  });

  it('handshakes are rate-limited per bucket: 20 at once, then 429 with Retry-After until a token is back', async () => {
    const codes: number[] = [];
    for (let i = 0; i < 20; i++) codes.push((await send(s.url, 'GET', `/b/rate?challenge=c${i}`)).status);
    assert.deepEqual(new Set(codes), new Set([200]));
    const limited = await send(s.url, 'GET', '/b/rate?challenge=c20');
    assert.equal(limited.status, 429);
    assert.equal(limited.headers['retry-after'], '1');
    assert.equal(limited.json?.code, 'handshake_rate_limited');
    // Another bucket's handshakes are not limited by this one's.
    assert.equal((await send(s.url, 'GET', '/b/dropbox?challenge=other')).status, 200);
    clock.advance(100); // one token at 10/s
    assert.equal((await send(s.url, 'GET', '/b/rate?challenge=c21')).status, 200);
    assert.equal((await send(s.url, 'GET', '/b/rate?challenge=c22')).status, 429);
    await until(
      async () => (await s.store.bucketCounts('rate')).rejections.handshake_rate_limited === 2,
      'the rate-limited handshakes counted',
    );
  });

  describe('--methods', () => {
    it('other methods get 405 with Allow, counted by reason', async () => {
      assert.equal((await send(s.url, 'POST', '/b/posts', [], 'x')).status, 200);
      assert.equal((await send(s.url, 'PUT', '/b/posts', [], 'x')).status, 200);
      for (const m of ['GET', 'DELETE', 'PATCH']) {
        const res = await send(s.url, m, '/b/posts');
        assert.equal(res.status, 405, m);
        assert.equal(res.headers.allow, 'POST, PUT');
        assert.equal(res.json?.code, 'method_not_allowed');
      }
      await until(async () => (await s.store.bucketCounts('posts')).rejections.method_not_allowed === 3, 'the 405s counted');
      assert.equal((await s.store.bucketCounts('posts')).requests, 2);
    });

    it("the scheme's GET handshake stays allowed; any other GET is 405 with GET in Allow", async () => {
      const hs = await send(s.url, 'GET', `/b/meta-post?hub.mode=subscribe&hub.verify_token=${META_TOKEN}&hub.challenge=42`);
      assert.equal(hs.status, 200);
      assert.equal(hs.text, '42');
      const other = await send(s.url, 'GET', '/b/meta-post?x=1');
      assert.equal(other.status, 405);
      assert.equal(other.headers.allow, 'POST, GET');
    });
  });
});

describe('a handshake answer never waits for the write lock', () => {
  it('answered while another process holds the lock; stored once it is released', async () => {
    const s = await startTestServer({ lockTimeoutMs: '20s' });
    try {
      await s.store.createBucket({ name: 'dropbox', provider: { handshakes: ['dropbox'] } });
      const locker = new BetterSqlite3(s.db);
      locker.exec('BEGIN IMMEDIATE');
      const res = await send(s.url, 'GET', '/b/dropbox?challenge=while-locked');
      assert.equal(res.status, 200);
      assert.equal(res.text, 'while-locked');
      assert.equal(locker.prepare('select count(*) from requests').pluck().get(), 0, 'answered before the commit');
      locker.exec('ROLLBACK');
      locker.close();
      await until(async () => (await s.store.bucketCounts('dropbox')).states.handshake === 1, 'the handshake stored');
    } finally {
      await s.stop();
    }
  });

  it('when the background write fails (lock held past --lock-timeout), it is logged and counted by code, never unhandled', async () => {
    const s = await startTestServer({ lockTimeoutMs: '300ms' });
    const unhandled: unknown[] = [];
    const onUnhandled = (e: unknown) => unhandled.push(e);
    process.on('unhandledRejection', onUnhandled);
    try {
      await s.store.createBucket({ name: 'dropbox', provider: { handshakes: ['dropbox'] } });
      const locker = new BetterSqlite3(s.db);
      locker.exec('BEGIN IMMEDIATE');
      const res = await send(s.url, 'GET', '/b/dropbox?challenge=lost-write');
      assert.equal(res.status, 200);
      await until(async () => {
        const metric = s.metrics.registry.getSingleMetric('hookbucket_ingest_refused_total');
        const values = metric === undefined ? [] : (await metric.get()).values;
        return values.some((v) => v.labels.bucket === 'dropbox' && v.labels.reason === 'store_busy' && v.value === 1);
      }, 'the failed handshake write counted as store_busy');
      locker.exec('ROLLBACK');
      locker.close();
      await until(async () => (await s.store.bucketCounts('dropbox')).rejections.store_busy === 1, 'the count written');
      assert.equal((await s.store.bucketCounts('dropbox')).requests, 0);
      assert.deepEqual(unhandled, []);
    } finally {
      process.off('unhandledRejection', onUnhandled);
      await s.stop();
    }
  });
});

/**
 * Duplicate events through the real ingest route into a real SQLite store: ingest computes the
 * key (only for verified requests in a verifying bucket) and the store decides inside the ingest
 * commit. GitHub signatures are made by @octokit/webhooks-methods.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { DEFAULT_DEDUP_WINDOW_MS, parseDedupKey } from '../../src/policy/dedup.js';
import { DEFAULT_TOLERANCE_MS, parseVerifyScheme } from '../../src/policy/verify.js';
import { send } from '../helpers/ingest-request.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const SECRET = 'gh-webhook-secret';
const payload = JSON.stringify({ action: 'opened', number: 7, repository: { full_name: 'o/r' } });

async function githubHeaders(delivery: string, secret = SECRET): Promise<string[]> {
  return [
    'Content-Type',
    'application/json',
    'X-GitHub-Event',
    'pull_request',
    'X-GitHub-Delivery',
    delivery,
    'X-Hub-Signature-256',
    await githubSign(secret, payload),
  ];
}

describe('dedup at ingest', () => {
  let s: TestServer;
  before(async () => {
    s = await startTestServer();
    await s.store.createBucket({
      name: 'gh',
      destination: 'http://127.0.0.1:9/consumer',
      provider: {
        verify: { scheme: parseVerifyScheme('github'), secrets: [SECRET], toleranceMs: DEFAULT_TOLERANCE_MS, onInvalid: 'quarantine' },
        dedup: { key: parseDedupKey('provider'), windowMs: DEFAULT_DEDUP_WINDOW_MS },
      },
    });
    await s.store.createBucket({
      name: 'plain',
      destination: 'http://127.0.0.1:9/consumer',
      provider: { dedup: { key: parseDedupKey('json:data.id'), windowMs: 60_000 } },
    });
  });
  after(() => s.stop());

  const idOf = (r: { json: Record<string, unknown> | undefined }) => String(r.json?.id);

  it('three concurrent copies of one GitHub delivery: all answered 2xx, one accepted with a delivery, two duplicates of it', async () => {
    const headers = await githubHeaders('72d3162e-cc78-11e3-81ab-4c9367dc0958');
    const answers = await Promise.all([0, 1, 2].map(() => send(s.url, 'POST', '/b/gh', headers, payload)));
    assert.deepEqual(
      answers.map((a) => a.status),
      [200, 200, 200],
    );
    const stored = await Promise.all(answers.map(async (a) => (await s.store.getRequest(idOf(a)))!));
    const accepted = stored.filter((r) => r.disposition === 'accepted');
    const duplicates = stored.filter((r) => r.disposition === 'duplicate');
    assert.equal(accepted.length, 1);
    assert.equal(duplicates.length, 2);
    for (const d of duplicates) assert.equal(d.duplicateOf, accepted[0]!.id);
    assert.equal(accepted[0]!.dedupKey, 'h:72d3162e-cc78-11e3-81ab-4c9367dc0958');
    assert.equal((await s.store.requestHistory(accepted[0]!.id)).length, 1, 'the accepted copy has its delivery');
    for (const d of duplicates) assert.equal((await s.store.requestHistory(d.id)).length, 0, 'a duplicate has none');
  });

  it('a forged copy (bad signature) registers no key, so it cannot block the real delivery', async () => {
    const forged = await send(s.url, 'POST', '/b/gh', await githubHeaders('d-forged', 'guessed'), payload);
    assert.equal(forged.status, 200);
    const f = await s.store.getRequest(idOf(forged));
    assert.equal(f?.disposition, 'quarantined');
    assert.equal(f?.dedupKey, null);
    const real = await send(s.url, 'POST', '/b/gh', await githubHeaders('d-forged'), payload);
    const r = await s.store.getRequest(idOf(real));
    assert.equal(r?.disposition, 'accepted');
    assert.equal(r?.verdict?.result, 'verified');
  });

  it('without a verify scheme, json:<path> keys dedup; a request without the key is never a duplicate', async () => {
    const body = JSON.stringify({ data: { id: 'evt_9' } });
    const first = await send(s.url, 'POST', '/b/plain', [], body);
    const second = await send(s.url, 'POST', '/b/plain', [], body);
    assert.equal(second.status, 200);
    assert.equal((await s.store.getRequest(idOf(first)))?.disposition, 'accepted');
    const dup = await s.store.getRequest(idOf(second));
    assert.equal(dup?.disposition, 'duplicate');
    assert.equal(dup?.duplicateOf, idOf(first));
    for (let i = 0; i < 2; i++) {
      const keyless = await send(s.url, 'POST', '/b/plain', [], '{"data":{}}');
      assert.equal((await s.store.getRequest(idOf(keyless)))?.disposition, 'accepted');
    }
  });
});

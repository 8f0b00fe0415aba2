import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { type CliResult, runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const RIGHT = 'whsec_right_secret_for_the_remote_test';
const WRONG = 'whsec_mistyped_remote';

/**
 * `requests verify` through --api (POST /api/buckets/{name}/verify) with the real binary against a
 * real serve and its token-guarded admin listener: the same output and exit codes as the same
 * command with --db on the same database, and the recovery path (fix the secret, release) done
 * entirely remotely. The secrets never leave the server: it does the checking.
 */
describe('requests verify through --api', () => {
  const TOKEN = 'requests-verify-remote-token-0123456789abcdef';
  const env = { HOOKBUCKET_ADMIN_TOKEN: TOKEN, HOOKBUCKET_API: '' };
  let srv: TestServer;
  let consumer: Consumer;
  const outputs: CliResult[] = [];
  const run = async (where: 'api' | 'db', args: string[]) => {
    const r = await runCli([...(where === 'api' ? ['--api', srv.admin!.url] : ['--db', srv.db]), ...args], env);
    outputs.push(r);
    return r;
  };
  /** The same command both ways: same exit code, stdout and stderr. */
  const same = async (args: string[]) => {
    const [l, a] = [await run('db', args), await run('api', args)];
    assert.deepEqual([a.code, a.text, a.stderr], [l.code, l.text, l.stderr], args.join(' '));
    return a;
  };
  const send = async (id: string) => {
    const payload = JSON.stringify({ id, type: 'payment_intent.succeeded' });
    const header = Stripe.webhooks.generateTestHeaderString({ payload, secret: RIGHT });
    const res = await fetch(`${srv.url}/b/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'stripe-signature': header },
      body: payload,
    });
    assert.equal(res.status, 200, await res.text());
  };

  before(async () => {
    srv = await startTestServer({ adminToken: TOKEN });
    consumer = await startConsumer();
  });
  after(async () => {
    await srv?.stop();
    await consumer?.close();
  });

  it('the same output and exit codes as with --db; release after fixing the secret, all through the API', async () => {
    let r = await run('api', ['bucket', 'create', 'x', '--destination', consumer.url, '--verify', 'stripe', '--verify-secret', WRONG]);
    assert.equal(r.code, 0, r.stderr);
    r = await run('api', ['bucket', 'create', 'plain', '--destination', consumer.url]);
    assert.equal(r.code, 0, r.stderr);
    await send('evt_1');
    await send('evt_2');
    const listed = await run('api', ['requests', 'list', 'x', '--state', 'quarantined', '--json']);
    const ids = listed.json<{ requests: Array<{ id: string }> }>().requests.map((q) => q.id);
    assert.equal(ids.length, 2);

    // Under the wrong secret, re-checking changes nothing either way, so both runs see the same requests.
    r = await same(['requests', 'verify', '--bucket', 'x', '--release', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.json(), { checked: 2, verified: 0, invalid: 2, missing: 0, expired: 0, released: 0, duplicates: 0 });
    r = await same(['requests', 'verify', '--bucket', 'x', '--state', 'quarantined', '--since', '1h', '--release']);
    assert.match(
      r.text,
      /^checked 2: 0 verified, 2 invalid, 0 missing, 0 expired; 0 released from quarantine, 0 duplicates \(not delivered\)\n$/,
    );
    r = await same(['requests', 'verify', ids[1]!, ids[0]!]);
    assert.match(r.text, /^checked 2: 0 verified, 2 invalid, 0 missing, 0 expired\n$/);

    // The refusals, with the same codes and messages.
    r = await same(['requests', 'verify', '--bucket', 'plain']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /verify_not_configured/);
    r = await same(['requests', 'verify', '--bucket', 'nope']);
    assert.equal(r.code, 4);
    assert.match(r.stderr, /not_found/);
    r = await same(['requests', 'verify', ids[0]!, '00000000-0000-7000-8000-000000000000', '--release']);
    assert.equal(r.code, 4);
    assert.match(r.stderr, /request 00000000-0000-7000-8000-000000000000 not found/);
    // An unknown id among known ones changed nothing.
    const kept = (await run('db', ['requests', 'show', ids[0]!, '--json'])).json<Record<string, any>>();
    assert.equal(kept.disposition, 'quarantined');

    // The recovery, remotely: the new secret goes to the server, which re-checks and releases.
    r = await run('api', ['bucket', 'update', 'x', '--verify-secret', RIGHT]);
    assert.equal(r.code, 0, r.stderr);
    r = await run('api', ['requests', 'verify', ids[0]!, '--release', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.json(), { checked: 1, verified: 1, invalid: 0, missing: 0, expired: 0, released: 1, duplicates: 0 });
    r = await run('api', ['requests', 'verify', '--bucket', 'x', '--state', 'quarantined', '--release']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(
      r.text,
      'checked 1: 1 verified, 0 invalid, 0 missing, 0 expired; 1 released from quarantine, 0 duplicates (not delivered)\n',
    );
    for (const id of ids) {
      const shown = (await run('db', ['requests', 'show', id, '--json'])).json<Record<string, any>>();
      assert.deepEqual([shown.disposition, shown.state, shown.verification.result], ['accepted', 'pending', 'verified']);
    }
    // Nothing left to release: both ways agree again.
    r = await same(['requests', 'verify', '--bucket', 'x', '--release']);
    assert.equal(
      r.text,
      'checked 2: 2 verified, 0 invalid, 0 missing, 0 expired; 0 released from quarantine, 0 duplicates (not delivered)\n',
    );
    for (const o of outputs) assert.equal(`${o.text}${o.stderr}`.includes(RIGHT.slice(6)), false, 'an output holds the secret');
  });

  it('the route is a mutation of the admin listener: token, JSON and same origin', async () => {
    const url = `${srv.admin!.url}/api/buckets/x/verify`;
    const auth = { authorization: `Bearer ${TOKEN}` };
    let res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json' }, body: '{}' });
    assert.equal(res.status, 401);
    res = await fetch(url, { method: 'POST', headers: { ...auth, 'content-type': 'text/plain' }, body: '{}' });
    assert.equal(res.status, 415);
    assert.equal(((await res.json()) as { code: string }).code, 'unsupported_media_type');
    res = await fetch(url, {
      method: 'POST',
      headers: { ...auth, 'content-type': 'application/json', origin: 'https://evil.example' },
      body: '{}',
    });
    assert.equal(res.status, 403);
    assert.equal(((await res.json()) as { code: string }).code, 'origin_mismatch');
    res = await fetch(url, { method: 'POST', headers: { ...auth, 'content-type': 'application/json' }, body: '{}' });
    assert.equal(res.status, 200);
    assert.deepEqual(await res.json(), {
      checked: 2,
      verified: 2,
      invalid: 0,
      missing: 0,
      expired: 0,
      released: 0,
      duplicates: 0,
      next_cursor: null,
    });
  });
});

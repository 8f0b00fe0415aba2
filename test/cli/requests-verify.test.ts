import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import Stripe from 'stripe';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { tempDir } from '../helpers/temp-dir.js';
import { startServe, type ServeHandle } from '../reliability/lib/serve-process.js';

const RIGHT = 'whsec_right_secret_for_this_test';
const WRONG = 'whsec_mistyped';

/**
 * The recovery path of issue 15 through the real binary: a bucket with a mistyped Stripe secret
 * quarantines a correctly signed event (served by a real `serve`); after `bucket update
 * --verify-secret <right>`, `requests verify --bucket x --release` re-checks it, releases it, and
 * the serve's worker delivers it to a real consumer.
 */
describe('requests verify --release (real binary)', () => {
  const t = tempDir();
  const db = ['--db', t.db];
  let consumer: Consumer;
  let serve: ServeHandle;

  before(async () => {
    consumer = await startConsumer();
    const c = await runCli([...db, 'bucket', 'create', 'x', '--destination', consumer.url, '--verify', 'stripe', '--verify-secret', WRONG]);
    assert.equal(c.code, 0, c.stderr);
    const d = await runCli([
      ...db,
      'bucket',
      'create',
      'dedup',
      '--destination',
      consumer.url,
      '--verify',
      'stripe',
      '--verify-secret',
      WRONG,
      '--dedup',
      'provider',
    ]);
    assert.equal(d.code, 0, d.stderr);
    const n = await runCli([...db, 'bucket', 'create', 'plain', '--destination', consumer.url]);
    assert.equal(n.code, 0, n.stderr);
    serve = await startServe({ db: t.db });
  });
  after(async () => {
    await serve?.proc.term();
    await consumer?.close();
    t.remove();
  });

  it('quarantined under a mistyped secret, released after fixing it, then delivered', async () => {
    const payload = JSON.stringify({ id: 'evt_1', type: 'payment_intent.succeeded' });
    const header = Stripe.webhooks.generateTestHeaderString({ payload, secret: RIGHT });
    const res = await fetch(`${serve.url}/b/x`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', 'stripe-signature': header },
      body: payload,
    });
    assert.equal(res.status, 200, await res.text());
    const listed = await runCli([...db, 'requests', 'list', 'x', '--state', 'quarantined', '--json']);
    assert.equal(listed.code, 0, listed.stderr);
    const quarantined = listed.json<{ requests: Array<{ id: string }> }>().requests;
    assert.equal(quarantined.length, 1);
    const id = quarantined[0]!.id;

    // Still the wrong secret: re-checked, still invalid, nothing released (exit 0: it ran).
    const still = await runCli([...db, 'requests', 'verify', '--bucket', 'x', '--release', '--json']);
    assert.equal(still.code, 0, still.stderr);
    assert.deepEqual(still.json(), { checked: 1, verified: 0, invalid: 1, missing: 0, expired: 0, released: 0, duplicates: 0 });

    const u = await runCli([...db, 'bucket', 'update', 'x', '--verify-secret', RIGHT]);
    assert.equal(u.code, 0, u.stderr);
    // Measured from received_at, the tolerance still holds however late the re-check.
    const v = await runCli([...db, 'requests', 'verify', '--bucket', 'x', '--release', '--json']);
    assert.equal(v.code, 0, v.stderr);
    assert.deepEqual(v.json(), { checked: 1, verified: 1, invalid: 0, missing: 0, expired: 0, released: 1, duplicates: 0 });

    await consumer.waitFor(1, 20_000);
    assert.equal(consumer.received[0]!.body.toString(), payload);
    const show = await runCli([...db, 'requests', 'show', id, '--json']);
    assert.equal(show.code, 0, show.stderr);
    const r = show.json<Record<string, any>>();
    assert.equal(r.disposition, 'accepted');
    assert.equal(r.verification.result, 'verified');
    assert.equal(r.verification.scheme, 'stripe');

    // Again: verified already and accepted, so nothing more is released (no second delivery).
    const again = await runCli([...db, 'requests', 'verify', id, '--release']);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.text, /checked 1: 1 verified, 0 invalid, 0 missing, 0 expired; 0 released from quarantine, 0 duplicates/);
  });

  it('--dedup: the sender retried after the fix and the retry was delivered, so releasing the original finds a duplicate', async () => {
    const before = consumer.received.length;
    const payload = JSON.stringify({ id: 'evt_retried', type: 'invoice.paid' });
    const send = () =>
      fetch(`${serve.url}/b/dedup`, {
        method: 'POST',
        headers: {
          'content-type': 'application/json',
          'stripe-signature': Stripe.webhooks.generateTestHeaderString({ payload, secret: RIGHT }),
        },
        body: payload,
      });
    const first = await send();
    assert.equal(first.status, 200, await first.text());
    const original = first.headers.get('x-hookbucket-request-id')!;
    assert.equal((await runCli([...db, 'requests', 'show', original, '--json'])).json<Record<string, any>>().state, 'quarantined');

    const u = await runCli([...db, 'bucket', 'update', 'dedup', '--verify-secret', RIGHT]);
    assert.equal(u.code, 0, u.stderr);
    // Stripe retries the same event (same id, fresh signature): it verifies now and is delivered.
    const retry = await send();
    assert.equal(retry.status, 200, await retry.text());
    const retryId = retry.headers.get('x-hookbucket-request-id')!;
    await consumer.waitFor(before + 1, 20_000);
    assert.equal(consumer.received[before]!.body.toString(), payload);

    const v = await runCli([...db, 'requests', 'verify', '--bucket', 'dedup', '--state', 'quarantined', '--release', '--json']);
    assert.equal(v.code, 0, v.stderr);
    assert.deepEqual(v.json(), { checked: 1, verified: 1, invalid: 0, missing: 0, expired: 0, released: 0, duplicates: 1 });
    const show = await runCli([...db, 'requests', 'show', original, '--json']);
    assert.equal(show.code, 0, show.stderr);
    const r = show.json<Record<string, any>>();
    // A duplicate has no delivery: the event reached the consumer once, as the retry.
    assert.equal(r.disposition, 'duplicate');
    assert.equal(r.state, 'duplicate');
    assert.equal(r.duplicate_of, retryId);
    assert.equal(r.verification.result, 'verified');
    const pending = await runCli([...db, 'requests', 'list', 'dedup', '--state', 'pending', '--state', 'retrying', '--json']);
    assert.equal(pending.code, 0, pending.stderr);
    assert.deepEqual(pending.json<{ requests: unknown[] }>().requests, []);
  });

  it('exit 2 verify_not_configured for a bucket without --verify; exit 4 for an unknown bucket or id; usage errors', async () => {
    const plain = await runCli([...db, 'requests', 'verify', '--bucket', 'plain']);
    assert.equal(plain.code, 2, plain.stderr);
    assert.match(plain.stderr, /verify_not_configured/);
    const unknown = await runCli([...db, 'requests', 'verify', '--bucket', 'nope']);
    assert.equal(unknown.code, 4, unknown.stderr);
    const id = await runCli([...db, 'requests', 'verify', '00000000-0000-7000-8000-000000000000']);
    assert.equal(id.code, 4, id.stderr);
    const neither = await runCli([...db, 'requests', 'verify']);
    assert.equal(neither.code, 2, neither.stderr);
    const help = await runCli(['requests', 'verify', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.text, /Examples:/);
    assert.match(help.text, /--api/);
  });
});

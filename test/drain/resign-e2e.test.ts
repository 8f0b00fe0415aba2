import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';
import { headerValues } from '../../src/policy/verify.js';
import { BIN, runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer, type Received } from '../helpers/consumer.js';
import { tempDir } from '../helpers/temp-dir.js';
import { until } from '../helpers/until.js';

// End to end through the real binary (issue 15, point 6): the `stripe` library signs an event, a
// `serve` process verifies it at the bucket, its worker re-signs it, and a consumer on loopback
// checks hookbucket's signature with the `standardwebhooks` library, on the first attempt and on a
// `replay` made at least 2 s later: a fresh timestamp, the same webhook-id (the Stripe event id).

const STRIPE_SECRET = 'whsec_e2e_stripe_endpoint_secret';

const header = (r: Received, name: string): string[] => headerValues(r.rawHeaders, name);

describe('a Stripe event verified at the bucket, re-signed, checked with standardwebhooks (real binary)', () => {
  const t = tempDir('hookbucket-resign-e2e-');
  let consumer: Consumer;
  const checks: Array<{ ok: boolean; error?: string }> = [];
  let signing = '';
  before(async () => {
    consumer = await startConsumer();
    consumer.fallback = (req: IncomingMessage, res: ServerResponse, body: Buffer) => {
      try {
        new Webhook(signing).verify(body, req.headers as Record<string, string>);
        checks.push({ ok: true });
        res.writeHead(204).end();
      } catch (e) {
        checks.push({ ok: false, error: (e as Error).message });
        res.writeHead(401).end();
      }
    };
  });
  after(async () => {
    await consumer.close();
    t.remove();
  });

  it('accepts the first attempt and a replay 2 s later, with a fresh timestamp and the same id', async () => {
    const created = await runCli([
      '--db',
      t.db,
      'bucket',
      'create',
      'stripe',
      '--destination',
      `${consumer.url}/webhooks/stripe`,
      '--verify',
      'stripe',
      '--verify-secret',
      STRIPE_SECRET,
      '--dedup',
      'provider',
      '--sign',
      'standard',
      '--sign-secret',
      'generate',
      '--json',
    ]);
    assert.equal(created.code, 0, created.stderr);
    signing = created.json<{ generated_sign_secret: string }>().generated_sign_secret;
    assert.match(signing, /^whsec_/);

    const serve = spawn(process.execPath, [BIN, '--db', t.db, 'serve', '--port', '0', '--host', '127.0.0.1'], {
      stdio: ['ignore', 'ignore', 'pipe'],
      env: { ...process.env, NO_COLOR: '1', HOOKBUCKET_ADMIN_TOKEN: '', HOOKBUCKET_LOG_LEVEL: 'info' },
    });
    const exited = new Promise<number | null>((r) => serve.once('exit', (code) => r(code)));
    let stderr = '';
    serve.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    try {
      let url: string | undefined;
      await until(() => {
        for (const line of stderr.split('\n')) {
          if (!line.includes('hookbucket listening')) continue;
          url = (JSON.parse(line) as { url: string }).url;
        }
        return url !== undefined;
      }, 'serve logged its url');

      const event = JSON.stringify({ id: 'evt_1E2eResign', object: 'event', type: 'invoice.paid', data: { object: { id: 'in_1' } } });
      const stripeSignature = new Stripe('sk_test_unused').webhooks.generateTestHeaderString({ payload: event, secret: STRIPE_SECRET });
      const res = await fetch(`${url}/b/stripe`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', 'stripe-signature': stripeSignature },
        body: event,
      });
      assert.equal(res.status, 200);

      await consumer.waitFor(1);
      assert.deepEqual(checks[0], { ok: true });
      const first = consumer.received[0]!;
      assert.equal(first.body.toString(), event, 'the bytes Stripe signed');
      assert.deepEqual(header(first, 'webhook-id'), ['evt_1E2eResign']);
      assert.deepEqual(header(first, 'x-hookbucket-verified'), ['stripe']);
      assert.deepEqual(header(first, 'stripe-signature'), [stripeSignature], "Stripe's own header still goes");

      await sleep(2_100);
      const replay = await runCli(['--db', t.db, 'replay', 'stripe', '--all', '--yes', '--json']);
      assert.equal(replay.code, 0, replay.stderr);
      await consumer.waitFor(2, 30_000);
      assert.deepEqual(checks[1], { ok: true });
      const again = consumer.received[1]!;
      assert.deepEqual(header(again, 'webhook-id'), ['evt_1E2eResign'], 'the same id');
      assert.ok(Number(header(again, 'webhook-timestamp')[0]) >= Number(header(first, 'webhook-timestamp')[0]) + 2, 'a fresh timestamp');
      assert.deepEqual(header(again, 'x-hookbucket-delivery-generation'), ['2']);

      // Both generations recorded delivered. (x-hookbucket-verified and the signature on a verifying
      // bucket already say the stored verdict is `verified`: the worker signs nothing else.)
      await until(async () => {
        const r = await runCli(['--db', t.db, 'requests', 'list', 'stripe', '--state', 'delivered', '--json']);
        const rows = r.code === 0 ? r.json<{ requests: Array<{ generation: number; state: string }> }>().requests : [];
        return rows.length === 1 && rows[0]!.generation === 2;
      }, 'the replay recorded delivered');
    } finally {
      serve.kill('SIGTERM');
    }
    assert.equal(await exited, 0, stderr);
  });
});

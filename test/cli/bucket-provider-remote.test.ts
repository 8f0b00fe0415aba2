import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { secretFingerprint } from '../../src/verify/verify-stream.js';
import { type CliResult, runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

/**
 * `bucket create|update|show|list` with provider settings through --api against a real serve:
 * the secrets travel in the POST/PATCH body (token-authenticated) and never come back; the client
 * holds fingerprints only, so a change that gives no new secret leaves the server's in place.
 */

const STRIPE_1 = 'whsec_stripeFirstSecret0001';
const STRIPE_2 = 'whsec_stripeSecondSecret002';
const SIGN_1 = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const META_TOKEN = 'meta-verify-token-4711';
const SECRETS = [STRIPE_1, STRIPE_2, SIGN_1, META_TOKEN];
const fp = secretFingerprint;

describe('bucket provider settings through --api', () => {
  const TOKEN = 'bucket-provider-test-token-0123456789abcdef';
  let srv: TestServer;
  const outputs: CliResult[] = [];
  const env = { HOOKBUCKET_ADMIN_TOKEN: TOKEN, HOOKBUCKET_API: '' };
  const run = async (where: 'api' | 'db', args: string[], extra: Record<string, string> = {}) => {
    const r = await runCli([...(where === 'api' ? ['--api', srv.admin!.url] : ['--db', srv.db]), ...args], { ...env, ...extra });
    outputs.push(r);
    return r;
  };
  before(async () => {
    srv = await startTestServer({ adminToken: TOKEN });
  });
  after(async () => {
    await srv?.stop();
  });

  it('create, update and show through the API match the database; secrets travel in the body and never come back', async () => {
    let r = await run('api', [
      'bucket',
      'create',
      'remote',
      '--verify',
      'slack',
      '--verify-secret',
      STRIPE_1,
      '--handshake',
      'meta',
      '--verify-token',
      META_TOKEN,
      '--dedup',
      'provider',
      '--sign-secret',
      SIGN_1,
      '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.json().verify.secrets, [{ fingerprint: fp(STRIPE_1) }]);
    // Show: the same text and JSON either way (the url line and stuck line come from the same place).
    for (const args of [
      ['bucket', 'show', 'remote'],
      ['bucket', 'show', 'remote', '--json'],
      ['bucket', 'list', '--json'],
    ]) {
      const [l, a] = [await run('db', args), await run('api', args)];
      assert.equal(a.code, 0, a.stderr);
      assert.equal(a.text, l.text, args.join(' '));
    }
    // Only the tolerance: the server keeps the secrets it holds (the client has only fingerprints).
    r = await run('api', ['bucket', 'update', 'remote', '--verify-tolerance', '2m', '--on-invalid', 'reject', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(r.json().verify, { scheme: 'slack', secrets: [{ fingerprint: fp(STRIPE_1) }], tolerance: '2m', on_invalid: 'reject' });
    // A new list replaces the server's; generate makes the secret here and prints it once.
    r = await run('api', [
      'bucket',
      'update',
      'remote',
      '--verify-secret',
      STRIPE_2,
      '--sign-secret',
      'generate',
      '--sign-secret',
      SIGN_1,
      '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const generated = r.json().generated_sign_secret as string;
    assert.deepEqual(r.json().verify.secrets, [{ fingerprint: fp(STRIPE_2) }]);
    assert.deepEqual(r.json().sign.secrets, [{ fingerprint: fp(generated) }, { fingerprint: fp(SIGN_1) }]);
    const local = (await run('db', ['bucket', 'show', 'remote', '--json'])).json();
    assert.deepEqual([local.verify, local.sign, local.verify_token_set], [r.json().verify, r.json().sign, true]);
    // The checks hold through the API with the same codes: the server's meta token counts as set.
    r = await run('api', ['bucket', 'update', 'remote', '--no-verify-token']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error \[invalid_option\]: --handshake meta needs --verify-token/);
    r = await run('api', ['bucket', 'update', 'remote', '--verify', 'standard']);
    assert.equal(r.code, 2, 'the server re-checks the secrets it holds for the new scheme');
    assert.match(r.stderr, /^error \[invalid_secret\]: /);
    r = await run('api', ['bucket', 'update', 'remote', '--no-verify']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error \[invalid_option\]: --dedup provider: the bucket does not verify/);
    r = await run('api', [
      'bucket',
      'update',
      'remote',
      '--no-verify',
      '--no-dedup',
      '--no-sign',
      '--no-handshake',
      '--no-verify-token',
      '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    assert.deepEqual(
      [r.json().verify, r.json().dedup, r.json().sign, r.json().handshakes, r.json().verify_token_set],
      [null, null, null, [], false],
    );
    for (const o of outputs) for (const s of SECRETS) assert.equal(`${o.text}${o.stderr}`.includes(s), false, 'an output holds a secret');
    assert.equal(outputs.filter((o) => o.stdout.includes(generated)).length, 1, 'the generated secret is printed once');
  });
});

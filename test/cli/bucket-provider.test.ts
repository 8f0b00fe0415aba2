import assert from 'node:assert/strict';
import { chmodSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { Webhook } from 'standardwebhooks';
import { secretFingerprint } from '../../src/verify/verify-stream.js';
import { type CliResult, runCli, runInProcess } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * The provider settings of `bucket create|update|show|list` through the real binary (issue 15
 * points 1 and 3 to 6): each flag and its --no-* form, the secret sources (flags, file,
 * HOOKBUCKET_VERIFY_SECRET_<BUCKET>, generate), each refusal with exit 2 and its code, the same
 * through --api, and no secret (nor token) in any output, ever.
 */

const STRIPE_1 = 'whsec_stripeFirstSecret0001';
const STRIPE_2 = 'whsec_stripeSecondSecret002';
const SIGN_1 = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const SIGN_2 = 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD';
const META_TOKEN = 'meta-verify-token-4711';
const GRAPH_STATE = 'graph-client-state-0815';
const FILE_1 = 'github-secret-from-file-1';
const FILE_2 = 'github secret from file 2';
const ENV_SECRET = 'shopify-secret-from-env';
const REFUSED = 'whsec_refused!!not-base64';
/** Every secret and token a test gives: none may appear in any output. */
const SECRETS = [STRIPE_1, STRIPE_2, SIGN_1, SIGN_2, META_TOKEN, GRAPH_STATE, FILE_1, FILE_2, ENV_SECRET, REFUSED];

const fp = secretFingerprint;

describe('bucket provider settings through the real binary', () => {
  const t = tempDir();
  const db = ['--db', t.db];
  const outputs: CliResult[] = [];
  const inProcess: Array<{ code: number; stderr: string; text: string }> = [];
  const cli = async (args: string[], env: Record<string, string> = {}) => {
    const r = await runCli([...db, ...args], env);
    outputs.push(r);
    return r;
  };
  const ok = async (args: string[], env: Record<string, string> = {}) => {
    const r = await cli(args, env);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return r;
  };
  const show = async (name: string) => (await ok(['bucket', 'show', name, '--json'])).json();
  const provider = (j: Record<string, unknown>) =>
    Object.fromEntries(
      ['verify', 'handshakes', 'verify_token_set', 'graph_client_state_set', 'methods', 'dedup', 'sign'].map((k) => [k, j[k]]),
    );
  after(() => {
    t.remove();
  });

  it('a bucket without provider flags says each is off', async () => {
    await ok(['bucket', 'create', 'plain']);
    assert.deepEqual(provider(await show('plain')), {
      verify: null,
      handshakes: [],
      verify_token_set: false,
      graph_client_state_set: false,
      methods: null,
      dedup: null,
      sign: null,
    });
    const human = (await ok(['bucket', 'show', 'plain'])).text;
    assert.match(human, /^verify {12}off: every sender is taken at its word$/m);
    assert.match(human, /^handshakes {8}none$/m);
    assert.match(human, /^methods {11}any$/m);
    assert.match(human, /^dedup {13}off$/m);
    assert.match(human, /^sign {14}off$/m);
  });

  it('create with every flag: --json, show --json, list --json and the human show state each setting, secrets as fingerprints', async () => {
    const c = await ok([
      'bucket',
      'create',
      'full',
      '--verify',
      'stripe',
      '--verify-secret',
      STRIPE_1,
      '--verify-secret',
      STRIPE_2,
      '--verify-tolerance',
      '10m',
      '--on-invalid',
      'reject',
      '--handshake',
      'graph',
      '--handshake',
      'meta',
      '--verify-token',
      META_TOKEN,
      '--graph-client-state',
      GRAPH_STATE,
      '--methods',
      'post, Put,POST',
      '--dedup',
      'provider',
      '--dedup-window',
      '24h',
      '--sign',
      'standard',
      '--sign-secret',
      SIGN_1,
      '--sign-secret',
      SIGN_2,
      '--json',
    ]);
    const want = {
      verify: {
        scheme: 'stripe',
        secrets: [{ fingerprint: fp(STRIPE_1) }, { fingerprint: fp(STRIPE_2) }],
        tolerance: '10m',
        on_invalid: 'reject',
      },
      handshakes: ['graph', 'meta'],
      verify_token_set: true,
      graph_client_state_set: true,
      methods: ['POST', 'PUT'],
      dedup: { key: 'provider', window: '24h' },
      sign: { scheme: 'standard', secrets: [{ fingerprint: fp(SIGN_1) }, { fingerprint: fp(SIGN_2) }] },
    };
    assert.deepEqual(provider(c.json()), want);
    assert.deepEqual(provider(await show('full')), want);
    const listed = (await ok(['bucket', 'list', '--json'])).json().buckets.find((b: { name: string }) => b.name === 'full');
    assert.deepEqual(provider(listed), want);
    const human = (await ok(['bucket', 'show', 'full', '--reveal'])).text;
    assert.match(
      human,
      new RegExp(`^verify {12}stripe \\(2 secrets: ${fp(STRIPE_1)}, ${fp(STRIPE_2)}\\), tolerance 10m, invalid → reject$`, 'm'),
    );
    assert.match(human, /^handshakes {8}graph \(clientState checked\), meta$/m);
    assert.match(human, /^verify token {6}set \(never shown\)$/m);
    assert.match(human, /^graph state {7}set \(never shown\)/m);
    assert.match(human, /^methods {11}POST, PUT \(others get 405\)$/m);
    assert.match(human, /^dedup {13}provider \(json:id\), window 24h$/m);
    assert.match(human, new RegExp(`^sign {14}standard \\(2 secrets: ${fp(SIGN_1)}, ${fp(SIGN_2)}\\)$`, 'm'));
  });

  it("update: each list given replaces the bucket's; a setting not named stays; each --no-* removes its setting", async () => {
    await ok(['bucket', 'create', 'upd', '--verify', 'stripe', '--verify-secret', STRIPE_1, '--verify-secret', STRIPE_2]);
    // Only the tolerance: the secrets stay.
    let j = (await ok(['bucket', 'update', 'upd', '--verify-tolerance', '90s', '--json'])).json();
    assert.deepEqual(j.verify, {
      scheme: 'stripe',
      secrets: [{ fingerprint: fp(STRIPE_1) }, { fingerprint: fp(STRIPE_2) }],
      tolerance: '1m30s',
      on_invalid: 'quarantine',
    });
    // A new list replaces the old (rotation done).
    j = (await ok(['bucket', 'update', 'upd', '--verify-secret', STRIPE_2, '--json'])).json();
    assert.deepEqual(j.verify.secrets, [{ fingerprint: fp(STRIPE_2) }]);
    // Another scheme keeps the secrets, which it accepts; the tolerance stays.
    j = (await ok(['bucket', 'update', 'upd', '--verify', 'github', '--dedup', 'provider', '--json'])).json();
    assert.deepEqual(j.verify, {
      scheme: 'github',
      secrets: [{ fingerprint: fp(STRIPE_2) }],
      tolerance: '1m30s',
      on_invalid: 'quarantine',
    });
    assert.deepEqual(j.dedup, { key: 'provider', window: '72h' }, 'the default window is 72h');
    j = (await ok(['bucket', 'update', 'upd', '--dedup-window', '1h', '--methods', 'POST', '--handshake', 'dropbox', '--json'])).json();
    assert.deepEqual([j.dedup, j.methods, j.handshakes], [{ key: 'provider', window: '1h' }, ['POST'], ['dropbox']]);
    j = (await ok(['bucket', 'update', 'upd', '--no-handshake', '--handshake', 'graph', '--json'])).json();
    assert.deepEqual(j.handshakes, ['graph'], 'with --no-handshake, the handshakes given are the whole list');
    j = (await ok(['bucket', 'update', 'upd', '--no-dedup', '--no-methods', '--no-handshake', '--json'])).json();
    assert.deepEqual([j.dedup, j.methods, j.handshakes, j.verify.scheme], [null, null, [], 'github']);
    j = (await ok(['bucket', 'update', 'upd', '--sign-secret', SIGN_1, '--verify-token', META_TOKEN, '--json'])).json();
    assert.deepEqual([j.sign, j.verify_token_set], [{ scheme: 'standard', secrets: [{ fingerprint: fp(SIGN_1) }] }, true]);
    j = (await ok(['bucket', 'update', 'upd', '--no-sign', '--no-verify', '--no-verify-token', '--json'])).json();
    assert.deepEqual([j.sign, j.verify, j.verify_token_set], [null, null, false]);
  });

  it('secret sources: a file (one per line, mode 600), HOOKBUCKET_VERIFY_SECRET_<BUCKET> read only with --verify', async () => {
    const file = join(t.dir, 'github.secrets');
    writeFileSync(file, `${FILE_1}\r\n\n  ${FILE_2}  \n`, { mode: 0o600 });
    chmodSync(file, 0o600);
    let j = (await ok(['bucket', 'create', 'gh', '--verify', 'github', '--verify-secret-file', file, '--json'])).json();
    assert.deepEqual(j.verify.secrets, [{ fingerprint: fp(FILE_1) }, { fingerprint: fp(FILE_2) }]);
    // A file other users may read is refused, and nothing changes.
    chmodSync(file, 0o644);
    let r = await cli(['bucket', 'update', 'gh', '--verify-secret-file', file]);
    assert.equal(r.code, 2);
    assert.match(
      r.stderr,
      /^error \[invalid_option\]: --verify-secret-file .* is readable by other users \(mode 0644\): chmod 600 it first$/m,
    );
    r = await cli(['bucket', 'update', 'gh', '--verify-secret-file', join(t.dir, 'missing')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /error \[invalid_option\]: --verify-secret-file .*missing: ENOENT/);
    // The variable: the bucket name upper-cased, - as _.
    const env = { HOOKBUCKET_VERIFY_SECRET_SHOP_EU: ENV_SECRET };
    j = (await ok(['bucket', 'create', 'shop-eu', '--verify', 'shopify', '--json'], env)).json();
    assert.deepEqual(j.verify.secrets, [{ fingerprint: fp(ENV_SECRET) }]);
    // Not read without --verify: an update of something else leaves the secrets alone.
    await ok(['bucket', 'update', 'shop-eu', '--verify-secret', STRIPE_1]);
    j = (await ok(['bucket', 'update', 'shop-eu', '--rate', '5/s', '--json'], env)).json();
    assert.deepEqual(j.verify.secrets, [{ fingerprint: fp(STRIPE_1) }]);
    // A flag wins over the variable.
    j = (await ok(['bucket', 'update', 'shop-eu', '--verify', 'shopify', '--verify-secret', STRIPE_2, '--json'], env)).json();
    assert.deepEqual(j.verify.secrets, [{ fingerprint: fp(STRIPE_2) }]);
    assert.equal((await show('gh')).verify.secrets.length, 2, 'the refused file changed nothing');
  });

  it('--sign-secret generate prints the new secret once: on stderr, or in --json as generated_sign_secret', async () => {
    const human = await ok(['bucket', 'create', 'signed', '--sign', 'standard', '--sign-secret', 'generate']);
    const secrets = human.stderr.match(/whsec_[A-Za-z0-9+/=]+/g) ?? [];
    assert.equal(secrets.length, 1, human.stderr);
    const generated = secrets[0]!;
    assert.match(human.stderr, /generated signing secret \(shown this once/);
    assert.doesNotMatch(human.text, /whsec_/);
    assert.doesNotThrow(() => new Webhook(generated), 'the standardwebhooks library takes it');
    assert.deepEqual((await show('signed')).sign, { scheme: 'standard', secrets: [{ fingerprint: fp(generated) }] });
    // Rotation: a new one beside the old.
    const j = await ok(['bucket', 'update', 'signed', '--sign-secret', 'generate', '--sign-secret', generated, '--json']);
    const second = j.json().generated_sign_secret as string;
    assert.match(second, /^whsec_[A-Za-z0-9+/]{43}=$/);
    assert.doesNotMatch(j.stderr, /whsec_/, 'with --json, the secret is in the JSON only');
    assert.deepEqual(j.json().sign.secrets, [{ fingerprint: fp(second) }, { fingerprint: fp(generated) }]);
    assert.equal((await ok(['bucket', 'show', 'signed', '--json'])).text.includes('whsec_'), false);
  });

  it('refuses each wrong setting with exit 2 and a stable code, before anything is stored', async () => {
    const cases: Array<[string[], string, RegExp]> = [
      [['--verify', 'stripe'], 'secret_required', /--verify stripe needs a secret/],
      [['--verify', 'nope', '--verify-secret', 's'], 'usage', /unknown verify scheme "nope"/],
      [['--verify', 'hmac:x-sig:md5:hex', '--verify-secret', 's'], 'usage', /the algorithm must be sha256 or sha1/],
      [
        ['--verify', 'standard', '--verify-secret', REFUSED],
        'invalid_secret',
        /--verify-secret \(standard\): a Standard Webhooks secret is whsec_ followed by base64/,
      ],
      [['--verify', 'standard', '--verify-secret', 'whsec_c2hvcnQ='], 'invalid_secret', /24 to 64 bytes; this one is 5/],
      [
        ['--verify', 'github', '--verify-secret', 'ok', '--verify-secret', 'bad\u0001'],
        'invalid_secret',
        /--verify-secret #2 holds a control character/,
      ],
      [['--verify-secret', STRIPE_1], 'invalid_option', /the bucket does not verify: give --verify <scheme>/],
      [['--verify', 'github', '--verify-secret', 's', '--verify-tolerance', '0s'], 'usage', /whole seconds, at least 1s/],
      [['--verify', 'github', '--verify-secret', 's', '--verify-tolerance', '1500ms'], 'usage', /whole seconds/],
      [['--verify', 'github', '--verify-secret', 's', '--on-invalid', 'drop'], 'usage', /quarantine .* or reject/],
      [['--handshake', 'carrier-pigeon'], 'usage', /unknown handshake "carrier-pigeon"; use graph, meta, dropbox/],
      [['--handshake', 'twitter'], 'invalid_option', /the twitter handshake needs that scheme's secret, so it comes with --verify twitter/],
      [['--handshake', 'meta'], 'invalid_option', /--handshake meta needs --verify-token/],
      [['--verify-token', ''], 'invalid_option', /--verify-token: 1 to 1024 characters/],
      [['--graph-client-state', 'x'.repeat(129)], 'invalid_option', /--graph-client-state: 1 to 128 characters/],
      [['--methods', 'GET,bad method'], 'usage', /"bad method" is not an HTTP method/],
      [['--dedup', 'provider'], 'invalid_option', /--dedup provider: the bucket does not verify/],
      [
        ['--verify', 'zoom', '--verify-secret', 'z', '--dedup', 'provider'],
        'invalid_option',
        /zoom documents no idempotency key; use --dedup header:<name> or --dedup json:<dotted.path>/,
      ],
      [['--verify', 'meta', '--verify-secret', 'm', '--dedup', 'provider'], 'invalid_option', /meta documents no idempotency key/],
      [['--dedup', 'header:bad name'], 'usage', /header:<name> needs a valid header name/],
      [['--dedup-window', '1h'], 'invalid_option', /--dedup-window needs --dedup <key>/],
      [['--dedup', 'json:id', '--dedup-window', '31d'], 'invalid_option', /at most 30d/],
      [['--sign', 'stripe'], 'usage', /standard \(Standard Webhooks/],
      [['--sign', 'standard'], 'secret_required', /--sign standard needs a secret/],
      [['--sign-secret', REFUSED], 'invalid_secret', /--sign-secret \(standard\)/],
      [['--sign-secret', 'generate', '--sign-secret', 'generate'], 'invalid_option', /once per command/],
    ];
    // In-process (the program bin.ts runs, with its exit code): a process per case is slow on a busy machine.
    for (const [flags, code, message] of cases) {
      const p = await runInProcess([...db, 'bucket', 'create', 'refused', ...flags]);
      const r = { code: p.code, stderr: p.stderr, text: p.stdout };
      inProcess.push(r);
      assert.equal(r.code, 2, `${flags.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, new RegExp(`^error \\[${code}\\]: `), flags.join(' '));
      assert.match(r.stderr, message, flags.join(' '));
    }
    assert.equal((await cli(['bucket', 'show', 'refused'])).code, 4, 'nothing was created');
    // On update, the settings as a whole are checked: the bucket's dedup provider needs a scheme with a key.
    await ok(['bucket', 'create', 'whole', '--verify', 'stripe', '--verify-secret', STRIPE_1, '--dedup', 'provider']);
    let r = await cli(['bucket', 'update', 'whole', '--verify', 'dropbox']);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error \[invalid_option\]: --dedup provider: dropbox documents no idempotency key/);
    r = await cli(['bucket', 'update', 'whole', '--verify', 'standard']);
    assert.equal(r.code, 2, 'the current secret is re-checked for the new scheme');
    assert.match(r.stderr, /^error \[invalid_secret\]: the current secret \(standard\)/);
    r = await cli(['bucket', 'update', 'whole', '--no-verify', '--verify-tolerance', '1m']);
    assert.match(r.stderr, /^error \[invalid_option\]: --no-verify turns verification off/);
    assert.equal((await show('whole')).verify.scheme, 'stripe', 'nothing changed');
    // What is allowed but likely not meant is said on stderr.
    r = await ok(['bucket', 'update', 'whole', '--verify-tolerance', '1m', '--verify', 'github']);
    assert.match(r.stderr, /^warning: github signs no timestamp that hookbucket checks: --verify-tolerance has no effect on it$/m);
    r = await ok(['bucket', 'create', 'fb', '--verify', 'meta', '--verify-secret', 'app-secret']);
    assert.match(r.stderr, /^warning: --verify meta without --verify-token: the Meta subscription handshake is answered 403/m);
    assert.match(
      (await ok(['bucket', 'show', 'fb'])).text,
      /^handshakes {8}meta \(from --verify\)\nverify token {6}not set: the meta handshake answers 403$/m,
    );
  });

  it('no secret or token appears in any output of this file', () => {
    assert.ok(outputs.length > 30 && inProcess.length > 20);
    for (const r of [...outputs, ...inProcess]) {
      for (const s of SECRETS) {
        assert.equal(r.text.includes(s), false, `stdout holds a secret: ${r.text}`);
        assert.equal(r.stderr.includes(s), false, `stderr holds a secret: ${r.stderr}`);
      }
    }
  });
});

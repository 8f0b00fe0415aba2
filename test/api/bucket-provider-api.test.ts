import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createApiApp } from '../../src/api/api-app.js';
import { silentLogger } from '../../src/shared/logger.js';
import { secretFingerprint as fp } from '../../src/verify/verify-stream.js';
import { DIALECTS } from '../store/contract/dialects.js';
import { useStoreSet, type Ctx } from '../store/contract/harness.js';

/**
 * The provider settings of POST /buckets, PATCH /buckets/{name} and GET (issue 15): the CLI's
 * formats, null removing a setting in a PATCH, the CLI's checks and codes as 400s, and no secret
 * or token in any answer (fingerprints only), on every store dialect.
 */

type Json = Record<string, any>;

const VERIFY_1 = 'shopify-secret-one';
const VERIFY_2 = 'shopify-secret-two';
const SIGN_1 = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const TOKEN = 'meta-token-abc';
const STATE = 'graph-state-xyz';
const REFUSED = 'whsec_not base64!';
const SECRETS = [VERIFY_1, VERIFY_2, SIGN_1, TOKEN, STATE, REFUSED];

function apiOf(ctx: Ctx) {
  const app = createApiApp({ store: ctx.set.store, reads: ctx.set.store, clock: ctx.clock, logger: silentLogger });
  const texts: string[] = [];
  const call = async (method: string, path: string, body?: unknown) => {
    const init: RequestInit = { method, headers: body === undefined ? {} : { 'Content-Type': 'application/json' } };
    if (body !== undefined) init.body = JSON.stringify(body);
    const res = await app.request(path, init);
    const text = await res.text();
    texts.push(text);
    return { status: res.status, json: JSON.parse(text) as Json };
  };
  return { call, texts };
}

const provider = (j: Json) =>
  Object.fromEntries(
    ['verify', 'handshakes', 'verify_token_set', 'graph_client_state_set', 'methods', 'dedup', 'sign'].map((k) => [k, j[k]]),
  );

for (const dialect of DIALECTS) {
  describe(`admin api bucket provider settings: ${dialect.name}`, () => {
    before(async () => dialect.setUp?.());
    after(async () => dialect.tearDown?.());
    const ctx = useStoreSet(dialect);

    it('POST takes every setting in the CLI formats; GET and PATCH answer fingerprints; null removes each', async () => {
      const { call, texts } = apiOf(ctx);
      const created = await call('POST', '/buckets', {
        name: 'shop',
        verify: 'shopify',
        verify_secrets: [VERIFY_1, VERIFY_2],
        verify_tolerance: 120_000,
        on_invalid: 'reject',
        handshakes: ['graph', 'meta'],
        verify_token: TOKEN,
        graph_client_state: STATE,
        methods: 'post,put',
        dedup: 'provider',
        dedup_window: '12h',
        sign: 'standard',
        sign_secrets: [SIGN_1],
      });
      assert.equal(created.status, 201, JSON.stringify(created.json));
      const want = {
        verify: {
          scheme: 'shopify',
          secrets: [{ fingerprint: fp(VERIFY_1) }, { fingerprint: fp(VERIFY_2) }],
          tolerance: '2m',
          on_invalid: 'reject',
        },
        handshakes: ['graph', 'meta'],
        verify_token_set: true,
        graph_client_state_set: true,
        methods: ['POST', 'PUT'],
        dedup: { key: 'provider', window: '12h' },
        sign: { scheme: 'standard', secrets: [{ fingerprint: fp(SIGN_1) }] },
      };
      assert.deepEqual(provider(created.json), want);
      assert.equal(created.json.generated_sign_secret, undefined);
      assert.deepEqual(provider((await call('GET', '/buckets/shop')).json), want);
      assert.deepEqual(provider((await call('GET', '/buckets')).json.buckets[0]), want);
      // The store holds the secrets themselves (the ingest needs them).
      assert.deepEqual((await ctx.set.store.getBucket('shop'))?.provider.verify?.secrets, [VERIFY_1, VERIFY_2]);

      // A PATCH without secrets keeps them; an array of methods works as the comma list.
      let r = await call('PATCH', '/buckets/shop', { verify_tolerance: '1m', methods: ['get'] });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual([r.json.verify.secrets, r.json.verify.tolerance, r.json.methods], [want.verify.secrets, '1m', ['GET']]);
      r = await call('PATCH', '/buckets/shop', { verify: 'github', verify_secrets: [VERIFY_2] });
      assert.deepEqual(r.json.verify, {
        scheme: 'github',
        secrets: [{ fingerprint: fp(VERIFY_2) }],
        tolerance: '1m',
        on_invalid: 'reject',
      });
      // generate: the new secret in this answer only.
      r = await call('PATCH', '/buckets/shop', { sign_secrets: ['generate', SIGN_1] });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      const generated = r.json.generated_sign_secret as string;
      assert.match(generated, /^whsec_[A-Za-z0-9+/]{43}=$/);
      assert.deepEqual(r.json.sign.secrets, [{ fingerprint: fp(generated) }, { fingerprint: fp(SIGN_1) }]);
      assert.equal((await call('GET', '/buckets/shop')).json.generated_sign_secret, undefined);

      r = await call('PATCH', '/buckets/shop', {
        verify: null,
        handshakes: null,
        verify_token: null,
        graph_client_state: null,
        methods: null,
        dedup: null,
        sign: null,
      });
      assert.equal(r.status, 200, JSON.stringify(r.json));
      assert.deepEqual(provider(r.json), {
        verify: null,
        handshakes: [],
        verify_token_set: false,
        graph_client_state_set: false,
        methods: null,
        dedup: null,
        sign: null,
      });
      for (const t of texts)
        assert.equal(t.includes(generated), t.includes('generated_sign_secret'), 'the generated secret only where announced');
      for (const t of texts) for (const s of SECRETS) assert.equal(t.includes(s), false, `an answer holds a secret: ${t}`);
    });

    it('refuses what the CLI refuses, with its codes, as 400s that never echo the secret', async () => {
      const { call, texts } = apiOf(ctx);
      const cases: Array<[Json, string, RegExp]> = [
        [{ verify: 'stripe' }, 'secret_required', /--verify stripe needs a secret/],
        [{ verify: 'standard', verify_secrets: [REFUSED] }, 'invalid_secret', /a Standard Webhooks secret is whsec_ followed by base64/],
        [{ verify: 'nope', verify_secrets: ['x'] }, 'invalid_input', /body\.verify: unknown verify scheme "nope"/],
        [{ verify_secrets: ['x'] }, 'invalid_option', /the bucket does not verify/],
        [{ verify: 'github', verify_secrets: ['x'], verify_tolerance: 0 }, 'invalid_input', /body\.verify_tolerance: whole seconds/],
        [{ verify: 'github', verify_secrets: ['x'], on_invalid: 'drop' }, 'invalid_input', /body\.on_invalid/],
        [{ handshakes: ['zoom'] }, 'invalid_option', /comes with --verify zoom/],
        [{ handshakes: ['meta'] }, 'invalid_option', /needs --verify-token/],
        [{ handshakes: ['fax'] }, 'invalid_input', /unknown handshake "fax"/],
        [{ methods: 'GET,,bad method' }, 'invalid_input', /"bad method" is not an HTTP method/],
        [{ dedup: 'provider' }, 'invalid_option', /--dedup provider: the bucket does not verify/],
        [{ verify: 'twitter', verify_secrets: ['x'], dedup: 'provider' }, 'invalid_option', /twitter documents no idempotency key/],
        [{ dedup: 'json:' }, 'invalid_input', /json:<dotted.path> needs a path/],
        [{ sign: 'standard' }, 'secret_required', /--sign standard needs a secret/],
        [{ sign_secrets: [REFUSED] }, 'invalid_secret', /--sign-secret \(standard\)/],
        [{ sign_secrets: ['generate', 'generate'] }, 'invalid_option', /"generate" once per request/],
        [{ verify_token: 'a\nb' }, 'invalid_option', /--verify-token: 1 to 1024 characters without control characters/],
      ];
      for (const [body, code, message] of cases) {
        const r = await call('POST', '/buckets', { name: 'bad', ...body });
        assert.equal(r.status, 400, JSON.stringify(body));
        assert.equal(r.json.code, code, `${JSON.stringify(body)}: ${r.json.error}`);
        assert.match(r.json.error, message);
      }
      assert.equal((await call('GET', '/buckets/bad')).status, 404, 'nothing was created');
      for (const t of texts) for (const s of SECRETS) assert.equal(t.includes(s), false, `an answer holds a secret: ${t}`);
    });
  });
}

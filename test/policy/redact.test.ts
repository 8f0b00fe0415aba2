import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  isSecretKey,
  keyTokens,
  REDACTED,
  redactDbUrl,
  redactHeaders,
  redactJson,
  redactQuery,
  redactUrl,
  redactUrlsIn,
  type KeyContext,
} from '../../src/policy/redact.js';

describe('keyTokens: whole tokens split on - _ . [ ] and camelCase', () => {
  const cases: Array<[string, string[]]> = [
    ['X-Hub-Signature-256', ['x', 'hub', 'signature', '256']],
    ['hub.verify_token', ['hub', 'verify', 'token']],
    ['apiKey', ['api', 'key']],
    ['APIKey', ['api', 'key']],
    ['clientSecret', ['client', 'secret']],
    ['user[password]', ['user', 'password']],
    ['author', ['author']],
  ];
  for (const [name, tokens] of cases) it(name, () => assert.deepEqual(keyTokens(name), tokens));
});

describe('isSecretKey', () => {
  const secret: Array<[string, KeyContext]> = [
    // headers the issue found in clear, and the usual ones
    ['X-Shopify-Hmac-Sha256', 'header'],
    ['X-Paypal-Transmission-Sig', 'header'],
    ['Authentication', 'header'],
    ['X-Password', 'header'],
    ['X-Webhook-Key', 'header'],
    ['X-Amz-Signature', 'header'],
    ['Stripe-Signature', 'header'],
    ['X-Hub-Signature', 'header'],
    ['X-Hub-Signature-256', 'header'],
    ['X-Slack-Signature', 'header'],
    ['webhook-signature', 'header'],
    ['Cookie', 'header'],
    ['Set-Cookie', 'header'],
    ['Authorization', 'header'],
    ['Proxy-Authorization', 'header'],
    ['X-Api-Key', 'header'],
    ['X-Gitlab-Token', 'header'],
    ['X-Amz-Security-Token', 'header'],
    ['Key', 'header'],
    // query and form keys
    ['token', 'query'],
    ['api_key', 'query'],
    ['hub.verify_token', 'query'],
    ['sig', 'query'],
    ['X-Amz-Signature', 'query'],
    ['X-Amz-Credential', 'query'],
    ['key', 'query'],
    ['password', 'form'],
    ['user[password]', 'form'],
    // JSON keys
    ['auth', 'json'],
    ['credentials', 'json'],
    ['pwd', 'json'],
    ['access_key', 'json'],
    ['accessKeyId', 'json'],
    ['apikey', 'json'],
    ['client_secret', 'json'],
    ['privateKey', 'json'],
    ['private_key', 'json'],
    ['refresh_token', 'json'],
    ['authToken', 'json'],
    ['passphrase', 'json'],
    ['signing_secret', 'json'],
    ['session_id', 'json'],
  ];
  for (const [name, ctx] of secret) it(`${name} (${ctx}) is secret`, () => assert.equal(isSecretKey(name, ctx), true));

  const clear: Array<[string, KeyContext]> = [
    ['author', 'json'],
    ['authored_at', 'json'],
    ['authorId', 'json'],
    ['total_tokens', 'json'],
    ['private', 'json'],
    ['public_key', 'json'],
    ['key', 'json'],
    ['key_id', 'json'],
    ['Idempotency-Key', 'header'],
    ['Content-Type', 'header'],
    ['X-GitHub-Event', 'header'],
    ['X-Slack-Request-Timestamp', 'header'],
    ['signed', 'json'],
    ['passenger', 'json'],
    ['page', 'query'],
  ];
  for (const [name, ctx] of clear) it(`${name} (${ctx}) is shown`, () => assert.equal(isSecretKey(name, ctx), false));
});

describe('redactQuery: secret values replaced, the rest exactly as sent', () => {
  const cases: Array<[string, string, string]> = [
    ['query', '?token=…&api_key=…'.slice(1), `token=${REDACTED}&api_key=${REDACTED}`],
    ['kept as sent', 'a=%20x&b=1+2&flag', 'a=%20x&b=1+2&flag'],
    ['percent-encoded key compared decoded', 'api%5Fkey=x&page=2', `api%5Fkey=${REDACTED}&page=2`],
    [
      'hub.verify_token',
      'hub.mode=subscribe&hub.verify_token=abc&hub.challenge=1',
      `hub.mode=subscribe&hub.verify_token=${REDACTED}&hub.challenge=1`,
    ],
    ['X-Amz-Signature in a presigned URL', 'X-Amz-Date=1&X-Amz-Signature=ff', `X-Amz-Date=1&X-Amz-Signature=${REDACTED}`],
    ['empty', '', ''],
  ];
  for (const [name, q, expected] of cases) it(name, () => assert.equal(redactQuery(q), expected));

  it('a Slack slash command form body', () => {
    assert.equal(
      redactQuery('token=gIkuvaNzQIHg97ATvDxqgjtO&team_id=T0001&command=%2Fweather&text=94070&password=hunter2', 'form'),
      `token=${REDACTED}&team_id=T0001&command=%2Fweather&text=94070&password=${REDACTED}`,
    );
  });
});

describe('redactJson: leaves under a secret key hidden at any depth, structure kept', () => {
  it('objects and arrays under secret keys keep their shape', () => {
    const input = {
      auth: { user: 'a', pass: 'b', nested: [1, { x: true }] },
      credentials: ['k1', 'k2'],
      pwd: 'p',
      access_key: 'AKIA',
      token: null,
      commits: [{ author: { name: 'Ada', email: 'ada@example.com' }, message: 'fix' }],
      repository: { private: false, owner: { login: 'o' } },
      deep: { deeper: { client_secret: 's', id: 7 } },
    };
    assert.deepEqual(redactJson(input), {
      auth: { user: REDACTED, pass: REDACTED, nested: [REDACTED, { x: REDACTED }] },
      credentials: [REDACTED, REDACTED],
      pwd: REDACTED,
      access_key: REDACTED,
      token: null,
      commits: [{ author: { name: 'Ada', email: 'ada@example.com' }, message: 'fix' }],
      repository: { private: false, owner: { login: 'o' } },
      deep: { deeper: { client_secret: REDACTED, id: 7 } },
    });
  });
  it('scalars and top-level arrays pass', () => {
    assert.deepEqual(redactJson([1, 'a', { secret: 2 }]), [1, 'a', { secret: REDACTED }]);
    assert.equal(redactJson('x'), 'x');
  });
});

describe('redactHeaders', () => {
  it('replaces only secret values, order kept', () => {
    assert.deepEqual(
      redactHeaders([
        ['Content-Type', 'application/json'],
        ['X-Shopify-Hmac-Sha256', 'abc='],
        ['Idempotency-Key', 'k1'],
      ]),
      [
        ['Content-Type', 'application/json'],
        ['X-Shopify-Hmac-Sha256', REDACTED],
        ['Idempotency-Key', 'k1'],
      ],
    );
  });
});

describe('redactUrl: userinfo and secret query values', () => {
  const cases: Array<[string, string]> = [
    ['https://user:pass@api.example.com/hooks?token=abc&x=1', `https://${REDACTED}@api.example.com/hooks?token=${REDACTED}&x=1`],
    ['https://user@host/x', `https://${REDACTED}@host/x`],
    ['http://host:8080/a?api_key=k#frag', `http://host:8080/a?api_key=${REDACTED}#frag`],
    ['http://host/a@b?c=1', 'http://host/a@b?c=1'],
    ['http://host/plain', 'http://host/plain'],
    ['http://a:b@host', `http://${REDACTED}@host`],
  ];
  for (const [url, expected] of cases) it(url, () => assert.equal(redactUrl(url), expected));
});

describe('redactUrlsIn: URLs inside a message (commander echoes a refused --destination)', () => {
  const cases: Array<[string, string]> = [
    [
      "option '--destination <url>' argument 'http://user:s3cret@127.0.0.1/x?token=abc' is invalid.",
      `option '--destination <url>' argument 'http://${REDACTED}@127.0.0.1/x?token=${REDACTED}' is invalid.`,
    ],
    ['two: https://a:b@h/ and http://h/?api_key=k done', `two: https://${REDACTED}@h/ and http://h/?api_key=${REDACTED} done`],
    ['no url here: author=alice token', 'no url here: author=alice token'],
    ['http://host/plain', 'http://host/plain'],
  ];
  for (const [text, expected] of cases) it(text, () => assert.equal(redactUrlsIn(text), expected));
});

describe('redactQuery (form): a JSON value under a plain key has its secret leaves hidden (Slack payload=)', () => {
  const enc = (v: unknown) => encodeURIComponent(JSON.stringify(v));
  const cases: Array<[string, string]> = [
    [
      `payload=${enc({ type: 'block_actions', token: 'xoxb-1', user: { id: 'U1' } })}`,
      `payload=${enc({ type: 'block_actions', token: REDACTED, user: { id: 'U1' } })}`,
    ],
    [`payload=${enc([{ api_key: 'k' }])}&a=1`, `payload=${enc([{ api_key: REDACTED }])}&a=1`],
    [`payload=${enc({ author: 'alice' })}`, `payload=${enc({ author: 'alice' })}`],
    ['payload=%7Bnot-json&a=1', 'payload=%7Bnot-json&a=1'],
    ['payload=plain', 'payload=plain'],
  ];
  for (const [form, expected] of cases) it(form.slice(0, 60), () => assert.equal(redactQuery(form, 'form'), expected));
  it('a query string keeps JSON values as sent', () => {
    const q = `payload=${enc({ token: 'x' })}`;
    assert.equal(redactQuery(q, 'query'), q);
  });
});

describe('redactDbUrl: a database URL for logs', () => {
  const cases: Array<[string, string]> = [
    ['postgres://app:s3cret@db.internal:5432/hookbucket', 'postgres://app:[redacted]@db.internal:5432/hookbucket'],
    ['postgresql://app:p%40ss@127.0.0.1/hb?sslmode=require', 'postgresql://app:[redacted]@127.0.0.1/hb?sslmode=require'],
    ['postgres://app@db/hb', 'postgres://app@db/hb'],
    ['postgres://db/hb?user=app&password=s3cret', 'postgres://db/hb?user=app&password=[redacted]'],
    ['postgres://app:s3cret@db', 'postgres://app:[redacted]@db'],
    ['data/hookbucket.db', 'data/hookbucket.db'],
    ['/var/lib/hb/a:b@c.db', '/var/lib/hb/a:b@c.db'],
    // Unencoded `/`, `#`, `?` or `@` in the password: not a valid URL, and still hidden.
    ['postgres://app:Zx9/Qw+7@db.example:5432/hb', 'postgres://app:[redacted]@db.example:5432/hb'],
    ['postgres://app:a#b?c@db/hb', 'postgres://app:[redacted]@db/hb'],
    ['postgres://app:p@ss@db/hb', 'postgres://app:[redacted]@db/hb'],
  ];
  for (const [url, shown] of cases) it(`${url} → ${shown}`, () => assert.equal(redactDbUrl(url), shown));
});

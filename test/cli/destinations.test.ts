import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

// `hookbucket settings` and the create-time check of the destinations setting, through the real
// binary on a real SQLite file, the admin API of a real server on loopback, and the CLI with --api.

describe('destinations setting: hookbucket settings, bucket create|update --destination, replay --to', () => {
  let s: TestServer;
  const env = { HOOKBUCKET_API: '' };
  const cli = (...args: string[]) => runCli(['--db', s.db, ...args], env);
  const api = (...args: string[]) => runCli(['--api', s.admin!.url, ...args], env);
  const call = async (method: string, path: string, body?: unknown) => {
    const res = await fetch(`${s.admin!.url}/api${path}`, {
      method,
      ...(body === undefined ? {} : { headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) }),
    });
    return { status: res.status, body: (await res.json()) as any };
  };
  before(async () => {
    s = await startTestServer();
  });
  after(async () => {
    await s.stop();
  });

  it('any (the default): shown as the default; localhost destinations are accepted', async () => {
    const shown = await cli('settings', 'show', '--json');
    assert.equal(shown.code, 0, shown.stderr);
    assert.deepEqual(shown.json(), { destinations: { value: 'any', default: true, updated_at: null } });
    const text = await cli('settings', 'show');
    assert.match(text.text, /^SETTING\s+VALUE\s+SET\ndestinations\s+any\s+default\n$/);
    const created = await cli('bucket', 'create', 'local', '--destination', 'http://localhost:3000/hooks');
    assert.equal(created.code, 0, created.stderr);
  });

  it('an unknown setting or an invalid value: exit 2, invalid_input, nothing changed', async () => {
    for (const args of [
      ['destinations', 'none'],
      ['destinations', 'allow:'],
      ['destinations', 'allow:10.0.0.1/8'],
      ['destinations', 'allow:exa mple.com'],
      ['nosuch', 'public'],
    ]) {
      const r = await cli('settings', 'set', ...args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /^error \[invalid_input\]: /);
    }
    assert.equal((await cli('settings', 'show', 'nosuch')).code, 2);
    assert.equal((await cli('settings', 'show', 'destinations', '--json')).json().value, 'any');
  });

  it('public: a literal private address or a name resolving to loopback is refused (exit 2, destination_refused); a public literal and no destination are not', async () => {
    const set = await cli('settings', 'set', 'destinations', 'allow:public');
    assert.equal(set.code, 0, set.stderr);
    assert.match(set.text, /^destinations = public \(/);
    const shown = (await cli('settings', 'show', '--json')).json();
    assert.equal(shown.destinations.value, 'public');
    assert.equal(shown.destinations.default, false);
    assert.match(shown.destinations.updated_at, /^\d{4}-\d\d-\d\dT/);

    const refused: Array<[string[], RegExp]> = [
      [['bucket', 'create', 'a', '--destination', 'http://localhost:3000/hooks'], /localhost \((127\.0\.0\.1|::1)\) is a loopback address/],
      [['bucket', 'create', 'a', '--destination', 'http://127.0.0.1:3000/hooks'], /127\.0\.0\.1 is a loopback address/],
      [['bucket', 'create', 'a', '--destination', 'http://[::ffff:10.0.0.1]/'], /is a private-network address/],
      [['bucket', 'create', 'a', '--destination', 'http://169.254.169.254/latest/meta-data'], /is a cloud metadata address/],
      [['bucket', 'update', 'local', '--destination', 'http://192.168.1.10/hooks'], /192\.168\.1\.10 is a private-network address/],
      [['replay', 'local', '--all', '--yes', '--to', 'http://localhost:4000/'], /is a loopback address/],
    ];
    for (const [args, why] of refused) {
      const r = await cli(...args);
      assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /^error \[destination_refused\]: destination refused: /);
      assert.match(r.stderr, why);
      assert.match(r.stderr, /\(settings: destinations public\)/);
    }
    assert.equal((await cli('bucket', 'show', 'a')).code, 4, 'not created');
    assert.equal((await cli('bucket', 'show', 'local', '--json')).json().destination, 'http://localhost:3000/hooks', 'not changed');
    // A public literal needs no DNS; a bucket without a destination has nothing to check.
    assert.equal((await cli('bucket', 'create', 'pub', '--destination', 'http://93.184.216.34/hooks')).code, 0);
    assert.equal((await cli('bucket', 'create', 'store-only')).code, 0);
  });

  it('the admin API and the CLI through --api: GET/PUT /api/settings/destinations, and 400 destination_refused', async () => {
    const put = await call('PUT', '/settings/destinations', { value: 'public' });
    assert.equal(put.status, 200);
    assert.equal(put.body.value, 'public');
    assert.equal((await call('GET', '/settings')).body.destinations.value, 'public');
    assert.equal((await call('GET', '/settings/destinations')).body.value, 'public');
    const bad = await call('PUT', '/settings/destinations', { value: 'allow:nope nope' });
    assert.equal(bad.status, 400);
    assert.equal(bad.body.code, 'invalid_input');
    assert.equal((await call('PUT', '/settings/nosuch', { value: 'public' })).status, 400);

    const created = await call('POST', '/buckets', { name: 'viaapi', destination: 'http://localhost:3000/' });
    assert.equal(created.status, 400);
    assert.equal(created.body.code, 'destination_refused');
    const patched = await call('PATCH', '/buckets/local', { destination: 'http://10.1.2.3/' });
    assert.equal(patched.status, 400);
    assert.equal(patched.body.code, 'destination_refused');
    const replayed = await call('POST', '/buckets/local/replays', { all: true, confirm: true, to: 'http://127.0.0.1:9/' });
    assert.equal(replayed.status, 400);
    assert.equal(replayed.body.code, 'destination_refused');

    const viaCli = await api('bucket', 'create', 'viacli', '--destination', 'http://localhost:3000/');
    assert.equal(viaCli.code, 2);
    assert.match(viaCli.stderr, /^error \[destination_refused\]: /);
    // The allow-list through --api: the listed loopback addresses are accepted again.
    const set = await api('settings', 'set', 'destinations', 'allow:127.0.0.0/8,::1', '--json');
    assert.equal(set.code, 0, set.stderr);
    assert.equal(set.json().value, 'allow:127.0.0.0/8,::1');
    assert.equal((await api('settings', 'show', '--json')).json().destinations.value, 'allow:127.0.0.0/8,::1');
    const ok = await api('bucket', 'create', 'viacli', '--destination', 'http://localhost:3000/');
    assert.equal(ok.code, 0, ok.stderr);
    const notListed = await cli('bucket', 'create', 'elsewhere', '--destination', 'http://93.184.216.34/');
    assert.equal(notListed.code, 2);
    assert.match(notListed.stderr, /93\.184\.216\.34 is not on the allow-list \(settings: destinations allow:127\.0\.0\.0\/8,::1\)/);

    assert.equal((await cli('settings', 'set', 'destinations', 'any')).code, 0);
    assert.equal((await cli('bucket', 'create', 'elsewhere', '--destination', 'http://10.0.0.1/')).code, 0);
  });

  it('settings --help shows the syntax with examples', async () => {
    const help = await cli('settings', '--help');
    assert.equal(help.code, 0);
    assert.match(help.text, /hookbucket settings set destinations allow:public,10\.0\.0\.0\/8,consumer\.internal/);
    assert.match(help.text, /IPv4-mapped/);
  });
});

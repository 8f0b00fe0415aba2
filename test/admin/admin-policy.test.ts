import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { checkAdminListener, isLoopbackAddress, loadConfig } from '../../src/config/config.js';
import { hostAllowList, isAllowedHost } from '../../src/policy/admin-host.js';
import { delayFor, PeerDelays } from '../../src/policy/peer-delay.js';

describe('the admin Host allow-list (DNS rebinding)', () => {
  it('accepts localhost, the loopback literals and the bound address, with no port or the bound port only', () => {
    const list = hostAllowList({ bindHost: '127.0.0.1', port: 8788, extraNames: [] });
    const table: Array<[string | undefined, boolean]> = [
      ['127.0.0.1', true],
      ['127.0.0.1:8788', true],
      ['localhost:8788', true],
      ['LOCALHOST:8788', true],
      ['[::1]:8788', true],
      ['[::1]', true],
      ['127.0.0.1:8787', false],
      ['localhost:80', false],
      ['evil.example', false],
      ['evil.example:8788', false],
      ['localhost.:8788', false],
      ['127.0.0.2:8788', false],
      ['localhost.evil.example', false],
      ['', false],
      [undefined, false],
      ['127.0.0.1:', false],
    ];
    for (const [host, ok] of table) assert.equal(isAllowedHost(host, list), ok, String(host));
  });

  it('adds --admin-host-name values: a name with or without the port, a name:port exactly', () => {
    const list = hostAllowList({ bindHost: '10.0.0.5', port: 8788, extraNames: ['Admin.Example.com', 'proxy.example.com:8443'] });
    const table: Array<[string, boolean]> = [
      ['10.0.0.5:8788', true],
      ['admin.example.com', true],
      ['admin.example.com:8788', true],
      ['admin.example.com:9999', false],
      ['proxy.example.com:8443', true],
      ['proxy.example.com', false],
      ['proxy.example.com:8788', false],
      ['example.com', false],
    ];
    for (const [host, ok] of table) assert.equal(isAllowedHost(host, list), ok, host);
  });

  it('on a wildcard bind takes the interface addresses passed in, not 0.0.0.0', () => {
    const list = hostAllowList({
      bindHost: '0.0.0.0',
      port: 8788,
      extraNames: [],
      interfaceAddresses: ['192.168.1.20', 'fe80::1%eth0', '::1'],
    });
    assert.equal(isAllowedHost('192.168.1.20:8788', list), true);
    assert.equal(isAllowedHost('[fe80::1]:8788', list), true);
    assert.equal(isAllowedHost('0.0.0.0:8788', list), false);
    assert.equal(isAllowedHost('192.168.1.21:8788', list), false);
  });

  it('before the port is known accepts names without a port only', () => {
    const list = hostAllowList({ bindHost: '127.0.0.1', port: undefined, extraNames: [] });
    assert.equal(isAllowedHost('localhost', list), true);
    assert.equal(isAllowedHost('localhost:8788', list), false);
  });
});

describe('PeerDelays: repeated failures from one peer wait longer, in bounded memory', () => {
  it('answers the first failure at once, then waits 250 ms doubling to 5 s', () => {
    assert.deepEqual(
      [1, 2, 3, 4, 5, 6, 7, 8, 100].map((n) => delayFor(n, { baseMs: 250, maxMs: 5000 })),
      [0, 250, 500, 1000, 2000, 4000, 5000, 5000, 5000],
    );
    const d = new PeerDelays();
    assert.deepEqual(
      [0, 1, 2, 3].map((t) => d.fail('10.0.0.1', t)),
      [0, 250, 500, 1000],
    );
    assert.equal(d.fail('10.0.0.2', 4), 0, 'another peer starts afresh');
  });

  it('forgets a peer on success and after a quiet period', () => {
    const d = new PeerDelays({ forgetAfterMs: 60_000 });
    d.fail('p', 0);
    d.fail('p', 1);
    assert.equal(d.penalized('p', 2), true);
    d.succeed('p');
    assert.equal(d.penalized('p', 2), false);
    assert.equal(d.fail('p', 3), 0);
    assert.equal(d.fail('p', 4), 250);
    assert.equal(d.penalized('p', 60_004), false);
    assert.equal(d.fail('p', 60_004), 0, 'a failure after the quiet period is a first one again');
  });

  it('remembers at most maxPeers, forgetting the one whose last failure is oldest', () => {
    const d = new PeerDelays({ maxPeers: 3 });
    for (const [i, p] of ['a', 'b', 'c'].entries()) d.fail(p, i);
    d.fail('a', 10); // a is now the most recent
    d.fail('d', 11); // evicts b
    assert.equal(d.size, 3);
    assert.equal(d.penalized('b', 12), false);
    assert.equal(d.penalized('a', 12), true);
    for (let i = 0; i < 10_000; i++) d.fail(`peer-${i}`, 100 + i);
    assert.equal(d.size, 3);
  });
});

describe('admin listener settings', () => {
  it('defaults: on, 127.0.0.1:8788, no token, no extra names', () => {
    const c = loadConfig({}, {});
    assert.equal(c.admin, true);
    assert.equal(c.adminPort, 8788);
    assert.equal(c.adminHost, '127.0.0.1');
    assert.equal(c.adminToken, '');
    assert.deepEqual(c.adminHostNames, []);
  });

  it('reads HOOKBUCKET_ADMIN_* from the environment and flags, with the usual precedence', () => {
    const c = loadConfig(
      { HOOKBUCKET_ADMIN_PORT: '9001', HOOKBUCKET_ADMIN_HOST_NAMES: 'a.example, B.example:8443', HOOKBUCKET_ADMIN: 'false' },
      {},
      { adminHost: '::1' },
    );
    assert.equal(c.adminPort, 9001);
    assert.equal(c.adminHost, '::1');
    assert.equal(c.admin, false);
    assert.deepEqual(c.adminHostNames, ['a.example', 'b.example:8443']);
    assert.throws(() => loadConfig({ HOOKBUCKET_ADMIN_PORT: '70000' }, {}), /HOOKBUCKET_ADMIN_PORT/);
    assert.throws(() => loadConfig({}, {}, { adminHostNames: 'ok.example,bad name' }), /--admin-host-names.*bad name/);
  });

  it('isLoopbackAddress: 127/8, ::1 and localhost only', () => {
    for (const h of ['127.0.0.1', '127.1.2.3', '::1', '[::1]', 'localhost', 'LOCALHOST', '::ffff:127.0.0.1'])
      assert.equal(isLoopbackAddress(h), true, h);
    for (const h of ['0.0.0.0', '::', '10.0.0.1', '128.0.0.1', 'myhost', '127.0.0.1.evil.example', '::ffff:10.0.0.1'])
      assert.equal(isLoopbackAddress(h), false, h);
  });

  it('checkAdminListener refuses a non-loopback admin host without a token (usage, exit 2), saying why', () => {
    const err = (() => {
      try {
        checkAdminListener(loadConfig({}, {}, { adminHost: '0.0.0.0' }));
      } catch (e) {
        return e as { code: string; exitCode: number; message: string };
      }
      return undefined;
    })();
    assert.equal(err?.code, 'usage');
    assert.equal(err?.exitCode, 2);
    assert.match(err!.message, /without HOOKBUCKET_ADMIN_TOKEN/);
    assert.doesNotThrow(() => checkAdminListener(loadConfig({ HOOKBUCKET_ADMIN_TOKEN: 't'.repeat(32) }, {}, { adminHost: '0.0.0.0' })));
    assert.doesNotThrow(
      () => checkAdminListener(loadConfig({}, {}, { adminHost: '0.0.0.0', admin: false })),
      '--no-admin: nothing to check',
    );
    assert.doesNotThrow(() => checkAdminListener(loadConfig({}, {}, { adminHost: '::1' })));
  });

  it('checkAdminListener refuses a token with spaces or beyond printable ASCII, which no client could present', () => {
    for (const token of [` ${'t'.repeat(40)}`, `${'t'.repeat(40)}\n`, `${'t'.repeat(20)} ${'t'.repeat(20)}`, `${'t'.repeat(40)}é`]) {
      assert.throws(
        () => checkAdminListener(loadConfig({ HOOKBUCKET_ADMIN_TOKEN: token }, {})),
        /printable ASCII without spaces/,
        JSON.stringify(token),
      );
    }
  });

  it('takes an --admin-host in brackets as the bare IPv6 address', () => {
    assert.equal(loadConfig({}, {}, { adminHost: '[::1]' }).adminHost, '::1');
  });

  it('checkAdminListener refuses a token shorter than 32 characters (exit 2) without printing it', () => {
    const short = 's3cr3t-'.repeat(5).slice(0, 31);
    assert.throws(
      () => checkAdminListener(loadConfig({ HOOKBUCKET_ADMIN_TOKEN: short }, {})),
      (e: { code: string; exitCode: number; message: string }) =>
        e.code === 'invalid_option' && e.exitCode === 2 && /31 characters/.test(e.message) && !e.message.includes(short),
    );
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import {
  addressKind,
  ANY_DESTINATION,
  formatDestinationPolicy,
  judgeAddress,
  judgeAddresses,
  parseDestinationPolicy,
  parseIp,
  parseNetwork,
  PUBLIC_DESTINATIONS,
  type DestinationPolicy,
} from '../../src/policy/destination-policy.js';

function policy(text: string): DestinationPolicy {
  const p = parseDestinationPolicy(text);
  if ('error' in p) throw new Error(p.error);
  return p;
}

describe('parseIp', () => {
  const cases: Array<[string, string | undefined]> = [
    ['127.0.0.1', '4:2130706433'],
    ['0.0.0.0', '4:0'],
    ['255.255.255.255', '4:4294967295'],
    ['256.0.0.1', undefined],
    ['01.2.3.4', undefined],
    ['1.2.3', undefined],
    ['1.2.3.4.5', undefined],
    ['::', '6:0'],
    ['::1', '6:1'],
    ['[::1]', '6:1'],
    ['fe80::1%eth0', `6:${(0xfe80n << 112n) | 1n}`],
    ['::ffff:127.0.0.1', `6:${(0xffffn << 32n) | 2130706433n}`],
    ['::ffff:7f00:1', `6:${(0xffffn << 32n) | 2130706433n}`],
    ['::1.2.3.4', `6:${16909060n}`],
    ['1:2:3:4:5:6:7:8', `6:${0x00010002000300040005000600070008n}`],
    ['1:2:3:4:5:6:1.2.3.4', `6:${(0x000100020003000400050006n << 32n) | 16909060n}`],
    ['1::', `6:${1n << 112n}`],
    ['1:2:3:4:5:6:7:8:9', undefined],
    ['1::2::3', undefined],
    [':1', undefined],
    ['12345::', undefined],
    ['localhost', undefined],
    ['', undefined],
  ];
  for (const [text, want] of cases) {
    it(`${JSON.stringify(text)} → ${want ?? 'not an address'}`, () => {
      const ip = parseIp(text);
      assert.equal(ip === undefined ? undefined : `${ip.version}:${ip.value}`, want);
    });
  }
});

describe('addressKind: every special-purpose block of the issue, and public neighbours', () => {
  const cases: Array<[string, string]> = [
    ['0.0.0.0', 'unspecified'],
    ['0.1.2.3', 'unspecified'],
    ['127.0.0.1', 'loopback'],
    ['127.255.255.254', 'loopback'],
    ['10.0.0.1', 'private'],
    ['10.255.255.255', 'private'],
    ['11.0.0.1', 'public'],
    ['172.16.0.1', 'private'],
    ['172.31.255.255', 'private'],
    ['172.32.0.1', 'public'],
    ['172.15.255.255', 'public'],
    ['192.168.1.1', 'private'],
    ['192.169.0.1', 'public'],
    ['169.254.1.1', 'link_local'],
    ['169.254.169.254', 'metadata'],
    ['100.64.0.1', 'cgnat'],
    ['100.127.255.255', 'cgnat'],
    ['100.128.0.1', 'public'],
    ['100.63.255.255', 'public'],
    ['224.0.0.1', 'multicast'],
    ['239.255.255.255', 'multicast'],
    ['255.255.255.255', 'broadcast'],
    ['240.0.0.1', 'reserved'],
    ['192.0.2.1', 'reserved'],
    ['198.18.0.1', 'reserved'],
    ['198.51.100.7', 'reserved'],
    ['203.0.113.9', 'reserved'],
    ['8.8.8.8', 'public'],
    ['93.184.216.34', 'public'],
    ['::', 'unspecified'],
    ['::1', 'loopback'],
    ['fe80::1', 'link_local'],
    ['febf:ffff::1', 'link_local'],
    ['fc00::1', 'unique_local'],
    ['fd12:3456::1', 'unique_local'],
    ['fd00:ec2::254', 'metadata'],
    ['ff02::1', 'multicast'],
    ['2001:db8::1', 'reserved'],
    ['2002:7f00:1::', 'reserved'],
    ['2001:0:4136:e378::1', 'reserved'],
    ['::2', 'reserved'],
    ['4000::1', 'reserved'],
    ['2606:4700:4700::1111', 'public'],
    ['2001:4860:4860::8888', 'public'],
    // IPv4-mapped: the embedded IPv4 address decides.
    ['::ffff:127.0.0.1', 'loopback'],
    ['::ffff:10.1.2.3', 'private'],
    ['::ffff:169.254.169.254', 'metadata'],
    ['::ffff:8.8.8.8', 'public'],
    ['::ffff:0.0.0.0', 'unspecified'],
    // NAT64 well-known prefix: the embedded IPv4 address decides; local-use NAT64 is private.
    ['64:ff9b::7f00:1', 'loopback'],
    ['64:ff9b::808:808', 'public'],
    ['64:ff9b:1::a00:1', 'private'],
  ];
  for (const [address, kind] of cases) {
    it(`${address} is ${kind}`, () => assert.equal(addressKind(parseIp(address)!), kind));
  }
});

describe('judgeAddress', () => {
  const cases: Array<[string, string, string | undefined, true | string]> = [
    // setting, address, host name (undefined: an IP literal), → allowed or the refusal reason
    ['any', '127.0.0.1', undefined, true],
    ['any', '169.254.169.254', undefined, true],
    ['any', 'not-an-ip', undefined, true],
    ['public', '8.8.8.8', undefined, true],
    ['public', '127.0.0.1', 'localhost', 'loopback'],
    ['public', '::1', 'localhost', 'loopback'],
    ['public', '::ffff:127.0.0.1', undefined, 'loopback'],
    ['public', '10.0.0.5', undefined, 'private'],
    ['public', '169.254.169.254', undefined, 'metadata'],
    ['public', 'fd00:ec2::254', undefined, 'metadata'],
    ['public', '100.64.1.1', undefined, 'cgnat'],
    ['public', 'nonsense', undefined, 'reserved'],
    // An allow-list without public: only what is listed.
    ['allow:10.0.0.0/8', '10.1.2.3', undefined, true],
    ['allow:10.0.0.0/8', '::ffff:10.1.2.3', undefined, true],
    ['allow:10.0.0.0/8', '11.0.0.1', undefined, 'not_listed'],
    ['allow:10.0.0.0/8', '8.8.8.8', undefined, 'not_listed'],
    ['allow:10.0.0.0/8', '127.0.0.1', undefined, 'loopback'],
    ['allow:127.0.0.1', '127.0.0.1', undefined, true],
    ['allow:127.0.0.1', '127.0.0.2', undefined, 'loopback'],
    ['allow:fd00::/8', 'fd12::1', undefined, true],
    ['allow:fd00::/8', 'fc00::1', undefined, 'unique_local'],
    // A listed name allows what it resolves to, but never a metadata address.
    ['allow:consumer.internal', '10.9.8.7', 'consumer.internal', true],
    ['allow:consumer.internal', '10.9.8.7', 'CONSUMER.internal.', true],
    ['allow:consumer.internal', '10.9.8.7', 'other.internal', 'private'],
    ['allow:consumer.internal', '8.8.8.8', 'other.example', 'not_listed'],
    ['allow:consumer.internal', '169.254.169.254', 'consumer.internal', 'metadata'],
    ['allow:*.svc.internal', '10.0.0.1', 'a.svc.internal', true],
    ['allow:*.svc.internal', '10.0.0.1', 'svc.internal', 'private'],
    ['allow:*.svc.internal', '10.0.0.1', 'xsvc.internal', 'private'],
    // A listed CIDR that contains the metadata address allows it (said explicitly).
    ['allow:169.254.169.254/32', '169.254.169.254', undefined, true],
    // public plus a list.
    ['allow:public,10.0.0.0/8', '8.8.8.8', undefined, true],
    ['allow:public,10.0.0.0/8', '10.0.0.1', undefined, true],
    ['allow:public,10.0.0.0/8', '192.168.0.1', undefined, 'private'],
  ];
  for (const [setting, address, host, want] of cases) {
    it(`${setting}: ${host ?? ''} ${address} → ${want === true ? 'allowed' : want}`, () => {
      const j = judgeAddress(address, policy(setting), host);
      assert.equal(j.allowed ? true : j.reason, want);
      if (!j.allowed) assert.match(j.message, /^destination refused: .* \(settings: destinations /);
    });
  }

  it('judgeAddresses refuses when any address is refused (DNS picks which one is used)', () => {
    assert.deepEqual(judgeAddresses(['8.8.8.8', '1.1.1.1'], PUBLIC_DESTINATIONS, 'x.example'), { allowed: true });
    const j = judgeAddresses(['8.8.8.8', '127.0.0.1'], PUBLIC_DESTINATIONS, 'x.example');
    assert.equal(j.allowed ? 'allowed' : j.reason, 'loopback');
    assert.equal(
      j.allowed ? '' : j.message,
      'destination refused: x.example (127.0.0.1) is a loopback address (settings: destinations public)',
    );
    assert.deepEqual(judgeAddresses(['127.0.0.1'], ANY_DESTINATION), { allowed: true });
  });
});

describe('parseDestinationPolicy and formatDestinationPolicy', () => {
  const round: Array<[string, string]> = [
    ['any', 'any'],
    [' ANY ', 'any'],
    ['public', 'public'],
    ['allow:public', 'public'],
    ['allow:10.0.0.0/8, consumer.internal', 'allow:10.0.0.0/8,consumer.internal'],
    ['allow:consumer.internal,public,10.0.0.0/8', 'allow:public,10.0.0.0/8,consumer.internal'],
    ['allow:FD00:0:0::/8,*.Svc.Internal.', 'allow:fd00::/8,*.svc.internal'],
    ['allow:192.168.1.10', 'allow:192.168.1.10'],
    ['allow:::ffff:10.0.0.0/104', 'allow:::ffff:a00:0/104'],
    ['allow:2001:db8:0:0:1:0:0:1', 'allow:2001:db8::1:0:0:1'],
  ];
  for (const [text, formatted] of round) {
    it(`${JSON.stringify(text)} → ${formatted}`, () => {
      const p = policy(text);
      assert.equal(formatDestinationPolicy(p), formatted);
      assert.deepEqual(policy(formatted), p);
    });
  }

  const bad = [
    '',
    'none',
    'allow:',
    'allow: , ',
    'allow:10.0.0.1/8',
    'allow:10.0.0.0/33',
    'allow:300.1.1.1',
    'allow:exa mple.com',
    'allow:a..b',
    'allow:fe80::/129',
    'public,10.0.0.0/8',
  ];
  for (const text of bad) {
    it(`${JSON.stringify(text)} is refused with a message`, () => {
      const p = parseDestinationPolicy(text);
      assert.ok('error' in p, JSON.stringify(p));
    });
  }

  it('parseNetwork: host bits must be zero; one address is a full-length prefix', () => {
    assert.deepEqual(parseNetwork('10.0.0.0/8'), { version: 4, value: 10n << 24n, prefix: 8 });
    assert.equal(parseNetwork('10.0.0.1/8'), undefined);
    assert.deepEqual(parseNetwork('::1'), { version: 6, value: 1n, prefix: 128 });
    assert.deepEqual(parseNetwork('0.0.0.0/0'), { version: 4, value: 0n, prefix: 0 });
  });
});

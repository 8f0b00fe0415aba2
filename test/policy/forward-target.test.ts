import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { forwardTarget } from '../../src/policy/forward-target.js';

describe('forwardTarget: destination, then the sub-path without dot-segments, then the raw queries joined with &', () => {
  const cases: Array<[string, string, string | null, boolean, string, string]> = [
    // destination, stored sub-path, stored query, forwardPath → origin, path
    ['http://127.0.0.1:9/hook', '/x', 'a=1', true, 'http://127.0.0.1:9', '/hook/x?a=1'],
    ['http://127.0.0.1:9', '/x', null, true, 'http://127.0.0.1:9', '/x'],
    ['http://127.0.0.1:9', '', null, true, 'http://127.0.0.1:9', '/'],
    ['http://127.0.0.1:9/hook', '', null, true, 'http://127.0.0.1:9', '/hook'],
    ['http://127.0.0.1:9/hook', '/', null, true, 'http://127.0.0.1:9', '/hook/'],
    ['http://127.0.0.1:9/hook/', '/x', null, true, 'http://127.0.0.1:9', '/hook/x'],
    ['http://127.0.0.1:9/hook/', '', null, true, 'http://127.0.0.1:9', '/hook/'],
    ['http://127.0.0.1:9/hook?k=v', '/x', 'a=1&a=2', true, 'http://127.0.0.1:9', '/hook/x?k=v&a=1&a=2'],
    ['http://127.0.0.1:9/hook?k=v', '/x', null, true, 'http://127.0.0.1:9', '/hook/x?k=v'],
    ['http://127.0.0.1:9/hook?k=v', '/x', '', true, 'http://127.0.0.1:9', '/hook/x?k=v'],
    // A bare `?` was received and stored as the empty query: it goes on as received.
    ['http://127.0.0.1:9/hook', '/x', '', true, 'http://127.0.0.1:9', '/hook/x?'],
    // The sub-path loses its dot-segments and empty segments (src/policy/forward-path.ts); the query is untouched.
    ['http://127.0.0.1:9/hook', '/x/%2e%2e/y', 'p=%2e%2e&b=%20', true, 'http://127.0.0.1:9', '/hook/y?p=%2e%2e&b=%20'],
    [
      'http://127.0.0.1:9/webhooks/stripe',
      '/../../admin/delete-all',
      null,
      true,
      'http://127.0.0.1:9',
      '/webhooks/stripe/admin/delete-all',
    ],
    ['http://127.0.0.1:9/', '//evil.example/x', 'q=/../', true, 'http://127.0.0.1:9', '/evil.example/x?q=/../'],
    ['http://127.0.0.1:9/hook', '/a%2Fb//c', null, true, 'http://127.0.0.1:9', '/hook/a%2Fb/c'],
    ['http://127.0.0.1:9/hook', '/x/y', 'a=1', false, 'http://127.0.0.1:9', '/hook?a=1'],
    ['http://127.0.0.1:9/hook?k=v', '/x/y', 'a=1', false, 'http://127.0.0.1:9', '/hook?k=v&a=1'],
    ['http://127.0.0.1:9/hook', '/x/y', null, false, 'http://127.0.0.1:9', '/hook'],
    ['https://example.com:443/in', '/x', null, true, 'https://example.com', '/in/x'],
  ];
  for (const [destination, subPath, query, forwardPath, origin, path] of cases) {
    it(`${destination} + ${JSON.stringify(subPath)} + ${JSON.stringify(query)}${forwardPath ? '' : ' (forwardPath off)'} → ${path}`, () =>
      assert.deepEqual(forwardTarget(destination, subPath, query, forwardPath), { origin, path }));
  }
  const raw: Array<[string, string, string | null, boolean, string]> = [
    // destination, stored sub-path, stored query, forwardPath → path, with rawPath (--forward-raw-path)
    ['http://127.0.0.1:9/hook', '/x/%2e%2e/y', 'p=1', true, '/hook/x/%2e%2e/y?p=1'],
    ['http://127.0.0.1:9/', '//evil.example/x', null, true, '//evil.example/x'],
    ['http://127.0.0.1:9/hook/', '/../x', null, true, '/hook/../x'],
    ['http://127.0.0.1:9/hook', '/../x', 'a=1', false, '/hook?a=1'],
  ];
  for (const [destination, subPath, query, forwardPath, path] of raw) {
    it(`raw path: ${destination} + ${JSON.stringify(subPath)}${forwardPath ? '' : ' (forwardPath off: nothing appended)'} → ${path}`, () =>
      assert.deepEqual(forwardTarget(destination, subPath, query, forwardPath, true), { origin: 'http://127.0.0.1:9', path }));
  }
});

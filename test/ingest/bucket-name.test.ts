import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { isValidBucketName, parseIngestTarget } from '../../src/ingest/bucket-name.js';
import { headerBytes, InflightBudget, unsupportedTransferEncoding } from '../../src/ingest/limits.js';

describe('bucket names', () => {
  const cases: Array<[string, boolean]> = [
    ['stripe', true],
    ['a', true],
    ['0-a_b', true],
    ['a'.repeat(63), true],
    ['a'.repeat(64), false],
    ['-a', false],
    ['A', false],
    ['..%2F', false],
    ['%00', false],
    ['', false],
  ];
  for (const [name, ok] of cases) it(`${JSON.stringify(name.slice(0, 20))} → ${ok}`, () => assert.equal(isValidBucketName(name), ok));
});

describe('parseIngestTarget', () => {
  const cases: Array<[string, ReturnType<typeof parseIngestTarget>]> = [
    ['/b/stripe', { bucket: 'stripe', path: '', query: null }],
    ['/b/stripe/', { bucket: 'stripe', path: '/', query: null }],
    ['/b/stripe?', { bucket: 'stripe', path: '', query: '' }],
    ['/b/gh/x/%2e%2e/y?a=1&a=2', { bucket: 'gh', path: '/x/%2e%2e/y', query: 'a=1&a=2' }],
    ['/b/gh/a%2Fb//c', { bucket: 'gh', path: '/a%2Fb//c', query: null }],
    ['http://example.com/b/gh/z?q', { bucket: 'gh', path: '/z', query: 'q' }],
    ['/b/..%2F', undefined],
    ['/b/%00', undefined],
    ['/b/', undefined],
    ['/x/stripe', undefined],
    [`/b/${'a'.repeat(10_000)}`, undefined],
  ];
  for (const [target, want] of cases) {
    it(target.slice(0, 40), () => assert.deepEqual(parseIngestTarget(target), want));
  }
});

describe('limits', () => {
  it('counts header bytes as on the wire', () => {
    assert.equal(headerBytes(['A', 'b', 'Cd', 'ef']), 1 + 1 + 4 + 2 + 2 + 4);
  });
  it('finds transfer codings other than chunked', () => {
    assert.equal(unsupportedTransferEncoding(['Transfer-Encoding', 'chunked']), undefined);
    assert.equal(unsupportedTransferEncoding(['transfer-encoding', ' Chunked ']), undefined);
    assert.equal(unsupportedTransferEncoding(['Transfer-Encoding', 'gzip, chunked']), 'gzip, chunked');
    assert.equal(unsupportedTransferEncoding(['Content-Type', 'x']), undefined);
  });
  it('bounds bytes in flight', () => {
    const b = new InflightBudget(10);
    assert.equal(b.tryReserve(6), true);
    assert.equal(b.tryReserve(5), false);
    b.release(6);
    assert.equal(b.tryReserve(10), true);
    assert.equal(b.used, 10);
  });
});

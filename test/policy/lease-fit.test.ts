import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { effectiveLease, stuckBuckets, stuckText, timeoutFits, timeoutRefusal } from '../../src/policy/lease-fit.js';

const worker = (leaseMs: number | null, alive = true) => ({ roles: ['receiver', 'worker'], leaseMs, alive });
const receiver = { roles: ['receiver'], leaseMs: null, alive: true };

describe('lease fit', () => {
  it('the lease that applies: the shortest alive worker lease, else the default', () => {
    const cases: Array<[string, Parameters<typeof effectiveLease>[0], ReturnType<typeof effectiveLease>]> = [
      ['nothing registered', [], { leaseMs: 60_000, source: 'default' }],
      ['a receiver alone', [receiver], { leaseMs: 60_000, source: 'default' }],
      ['a dead worker only', [worker(5_000, false)], { leaseMs: 60_000, source: 'default' }],
      ['one worker, longer than the default', [worker(300_000)], { leaseMs: 300_000, source: 'worker' }],
      ['two workers: the shorter binds', [worker(300_000), worker(90_000), receiver], { leaseMs: 90_000, source: 'worker' }],
      ['a dead shorter one does not count', [worker(300_000), worker(1_000, false)], { leaseMs: 300_000, source: 'worker' }],
      ['a worker row without a lease', [worker(null)], { leaseMs: 60_000, source: 'default' }],
    ];
    for (const [name, processes, want] of cases) assert.deepEqual(effectiveLease(processes, 60_000), want, name);
  });

  it('a timeout fits only when strictly shorter than the lease', () => {
    for (const [timeout, lease, fits] of [
      [10_000, 60_000, true],
      [59_999, 60_000, true],
      [60_000, 60_000, false],
      [120_000, 60_000, false],
    ] as const) {
      assert.equal(timeoutFits(timeout, lease), fits, `${timeout} under ${lease}`);
      assert.equal(timeoutRefusal(timeout, { leaseMs: lease, source: 'default' }) === undefined, fits);
    }
  });

  it('stuck buckets: those whose timeout does not fit, never one being deleted', () => {
    const b = (name: string, timeoutMs: number, deletingAt: number | null = null) => ({ name, deletingAt, drain: { timeoutMs } });
    const lease = { leaseMs: 60_000, source: 'worker' as const };
    assert.deepEqual(stuckBuckets([b('a', 10_000), b('b', 60_000), b('c', 120_000, 5), b('d', 120_000)], lease), [
      { bucket: 'b', timeoutMs: 60_000, leaseMs: 60_000, source: 'worker' },
      { bucket: 'd', timeoutMs: 120_000, leaseMs: 60_000, source: 'worker' },
    ]);
  });

  it('the messages name the lease, where it comes from, and both ways out', () => {
    const refusal = timeoutRefusal(120_000, { leaseMs: 60_000, source: 'default' });
    assert.match(
      refusal ?? '',
      /^--timeout 2m must be shorter than the lease 1m \(HOOKBUCKET_LEASE or its default; no worker is running\)/,
    );
    assert.match(refusal ?? '', /--lease, HOOKBUCKET_LEASE/);
    assert.match(timeoutRefusal(120_000, { leaseMs: 90_000, source: 'worker' }) ?? '', /the running worker's lease 1m30s/);
    const text = stuckText({ bucket: 'slow', timeoutMs: 120_000, leaseMs: 60_000, source: 'worker' });
    assert.match(text, /^bucket slow: attempt timeout 2m is not shorter than the running worker's lease 1m; its deliveries wait/);
    assert.match(text, /hookbucket bucket update slow --timeout <d>/);
    assert.match(text, /--lease \/ HOOKBUCKET_LEASE/);
  });
});

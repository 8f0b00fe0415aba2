import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { forward } from '../../src/drain/forward.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';

// A stored request that undici refuses to send (UND_ERR_INVALID_ARG: it validates method, path and
// header bytes before connecting) is `failed` after one attempt, with undici's message on the
// attempt row, not retried 14 times as a network error. The rows are written straight into the
// SQLite file through ingest's batch writer, as rows stored before import checked header bytes.

describe('a stored request the HTTP client refuses to send', () => {
  let b: DrainBench;
  let consumer: Consumer;
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
  });
  afterEach(async () => {
    await b.close();
    await consumer.close();
  });

  it("forward() returns it as `unsendable` with undici's code, and nothing reaches the consumer", async () => {
    const res = await forward(b.agent, {
      target: { origin: consumer.url, path: '/hooks' },
      method: 'POST',
      headers: ['X-Bad', 'a\x1bb'],
      body: Buffer.from('x'),
      timeoutMs: 5000,
    });
    assert.equal(res.kind, 'error');
    assert.equal(res.kind === 'error' && res.errorClass, 'unsendable');
    assert.equal(res.kind === 'error' && res.code, 'UND_ERR_INVALID_ARG');
    assert.equal(consumer.received.length, 0);
  });

  it('ends `failed` after one attempt with the reason as evidence, while the request beside it is delivered', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/hooks`, drain: {} });
    const [bad] = b.ingest('s', { rawHeaders: ['Content-Type', 'text/plain', 'X-Bad', 'a\x01b'] });
    const [good] = b.ingest('s', { rawHeaders: ['Content-Type', 'text/plain'] });
    const w = b.worker();
    await w.runOnce();

    const d = b.delivery(bad!);
    assert.equal(d.state, 'failed');
    assert.equal(d.attempts, 1);
    const attempts = b.attempts(bad!);
    assert.equal(attempts.length, 1);
    assert.equal(attempts[0]!.error_class, 'unsendable');
    assert.equal(attempts[0]!.outcome, 'failed');
    assert.equal(attempts[0]!.reason, 'error_unsendable');
    assert.match(attempts[0]!.error_message, /^UND_ERR_INVALID_ARG: invalid X-Bad header$/);
    assert.equal(attempts[0]!.next_attempt_at, null);

    assert.equal(b.delivery(good!).state, 'delivered');
    assert.equal(consumer.received.length, 1, 'only the good request went out');

    // A day later nothing is due: the refused request is not tried again.
    b.clock.advance(24 * 60 * 60 * 1000);
    assert.equal((await w.runOnce()).started, 0);
    assert.equal(b.attempts(bad!).length, 1);
  });
});

import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { describe, it } from 'node:test';
import { PG_SKIP_REASON } from '../helpers/pg-database.js';
import { arrivals, pgServer, startCluster, waitFor, wasActive } from './harness.js';

// A bucket's --concurrency bounds its attempts in flight across every worker on the database, as
// the consumer sees them: 3 workers, a consumer that holds each request 100 ms, 60 requests due
// at once. On a single-worker lease (one active, the others standing by) this holds trivially;
// with all three claiming (PostgreSQL since the pacer rows) it is the proof.

const BUCKET = 'conc';
const CONCURRENCY = 4;
const REQUESTS = 60;
const HOLD_MS = 100;

describe('concurrency across workers on PostgreSQL (the real binary)', { skip: pgServer === undefined ? PG_SKIP_REASON : false }, () => {
  it(`never more than --concurrency ${CONCURRENCY} requests at the consumer at once, with 3 workers`, { timeout: 90_000 }, async (t) => {
    const t0 = Date.now();
    let inFlight = 0;
    let peak = 0;
    const c = await startCluster((_req: IncomingMessage, res: ServerResponse) => {
      inFlight++;
      peak = Math.max(peak, inFlight);
      setTimeout(() => {
        inFlight--;
        res.writeHead(200).end('ok');
      }, HOLD_MS);
    });
    try {
      await c.cli(
        'bucket',
        'create',
        BUCKET,
        '--destination',
        `${c.consumer.url}/hook`,
        '--concurrency',
        String(CONCURRENCY),
        '--timeout',
        '2s',
      );
      await c.cli('bucket', 'pause', BUCKET);
      await Promise.all([c.startReceivers(1), c.startWorkers(3, ['--lease', '5s'])]);
      const acks = await c.send(BUCKET, REQUESTS, 5);
      const ids = new Set(acks.flatMap((a) => (a.id === undefined ? [] : [a.id])));
      assert.equal(ids.size, REQUESTS, 'every request acknowledged');
      await c.cli('bucket', 'resume', BUCKET);
      const done = await waitFor(async () => (inFlight === 0 && (await c.unsettled(BUCKET)) === 0 ? true : undefined), 30_000, 50);
      assert.equal(done, true, `not settled within 30 s: ${await c.unsettled(BUCKET)} unsettled`);
      const seen = new Set(arrivals(c.consumer).map((a) => a.requestId));
      assert.deepEqual(
        [...ids].filter((id) => !seen.has(id)),
        [],
        'every acknowledged request reached the consumer',
      );
      const active = c.workers.filter(wasActive).length;
      t.diagnostic(
        `peak ${peak} in flight at the consumer (bound ${CONCURRENCY}); ${c.consumer.received.length} arrivals; ${active} worker(s) active; ${Date.now() - t0} ms`,
      );
      assert.ok(peak <= CONCURRENCY, `${peak} requests in flight at the consumer at once, bound ${CONCURRENCY}`);
      // The bound was reached, so the test exercised it.
      assert.equal(peak, CONCURRENCY, `the consumer saw at most ${peak} at once: the limit was never reached`);
    } finally {
      await c.close();
    }
  });
});

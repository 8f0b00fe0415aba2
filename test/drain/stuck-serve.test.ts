import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { startServer } from '../../src/main.js';
import { systemClock } from '../../src/shared/clock.js';
import { createLogger } from '../../src/shared/logger.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { tempDir } from '../helpers/temp-dir.js';
import { until } from '../helpers/until.js';

/** A logger whose JSON lines are kept for the test to read. */
function capturingLogger() {
  const lines: Array<Record<string, unknown>> = [];
  const stream = new Writable({
    write(chunk, _enc, done) {
      for (const l of String(chunk).split('\n')) if (l.trim()) lines.push(JSON.parse(l) as Record<string, unknown>);
      done();
    },
  });
  return { logger: createLogger('warn', stream), lines };
}

const config = (db: string, flags: Record<string, string | boolean | number> = {}) =>
  loadConfig({}, {}, { db, port: 0, host: '127.0.0.1', minFreeDisk: '0', logLevel: 'warn', worker: true, admin: false, ...flags });

describe('serve with a bucket whose timeout the lease does not cover (issue 16.3)', () => {
  const t = tempDir();
  let consumer: Consumer;
  let store: SqliteStore;
  before(async () => {
    consumer = await startConsumer();
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
    // Written straight to the store, as an older version (or a longer HOOKBUCKET_LEASE) left it.
    await store.createBucket({ name: 'slow', destination: `${consumer.url}/slow`, drain: { timeoutMs: 120_000 } });
    await store.createBucket({ name: 'fine', destination: `${consumer.url}/fine` });
  });
  after(async () => {
    await store.close();
    await consumer.close();
    t.remove();
  });

  it('starts ingest, delivers the other buckets, holds only that one, and warns at start and again each interval', async () => {
    const { logger, lines } = capturingLogger();
    const running = await startServer(config(t.db, { leaseMs: '60s' }), { clock: systemClock, logger, stuckWarnMs: 50 });
    const stuckWarnings = () => lines.filter((l) => l.bucket === 'slow' && l.stuck === true);
    try {
      // Said before startServer returned: at start.
      assert.ok(stuckWarnings().length >= 1, JSON.stringify(lines));
      const w = stuckWarnings()[0]!;
      assert.equal(w.level, 40, 'warn');
      assert.equal(w.timeout_ms, 120_000);
      assert.equal(w.lease_ms, 60_000);
      assert.match(
        String(w.msg),
        /^bucket slow: attempt timeout 2m is not shorter than the running worker's lease 1m; its deliveries wait/,
      );

      const slow = await fetch(`${running.url}/b/slow`, { method: 'POST', body: 'held' });
      assert.equal(slow.status, 200, 'ingest stores for the stuck bucket');
      const { id: slowId } = (await slow.json()) as { id: string };
      const fine = await fetch(`${running.url}/b/fine`, { method: 'POST', body: 'sent' });
      assert.equal(fine.status, 200);
      const { id: fineId } = (await fine.json()) as { id: string };
      await until(async () => (await store.getRequest(fineId))?.state === 'delivered', 'fine delivered');
      // And once more every interval while it stays stuck.
      const seen = stuckWarnings().length;
      await until(() => stuckWarnings().length >= seen + 2, 'repeated warnings');
      assert.equal((await store.getRequest(slowId))?.state, 'pending', 'the stuck bucket is held');
      assert.deepEqual(
        consumer.received.map((r) => r.url),
        ['/fine'],
      );
    } finally {
      await running.close(2000);
    }
  });
});

describe("serve's stop honours --shutdown-grace beyond the HTTP grace", () => {
  const t = tempDir();
  let consumer: Consumer;
  let store: SqliteStore;
  before(async () => {
    consumer = await startConsumer();
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
    await store.createBucket({ name: 'slowconsumer', destination: `${consumer.url}/in` });
  });
  after(async () => {
    await store.close();
    await consumer.close();
    t.remove();
  });

  it('an in-flight delivery gets the whole --shutdown-grace, not the HTTP grace', async () => {
    // The consumer answers only after the stop has begun: the attempt is in flight throughout.
    let answer: (() => void) | undefined;
    consumer.script((_req, res) => {
      answer = () => {
        res.writeHead(200);
        res.end('ok');
      };
    });
    const { logger } = capturingLogger();
    const running = await startServer(config(t.db, { shutdownGraceMs: '30s' }), { clock: systemClock, logger });
    const res = await fetch(`${running.url}/b/slowconsumer`, { method: 'POST', body: 'x' });
    const { id } = (await res.json()) as { id: string };
    await consumer.waitFor(1);
    // HTTP grace 0: the old stop capped the worker at min(HTTP grace, --shutdown-grace) and released it.
    const stopped = running.close({ httpGraceMs: 0 });
    await until(async () => (await store.getRequest(id))?.state === 'delivering', 'in flight');
    // Answer once the stop has reached the worker (the HTTP side closes at once): a stop that gave
    // the worker no grace would have released the attempt by then.
    await new Promise((r) => setTimeout(r, 300));
    answer!();
    await stopped;
    const r = await store.getRequest(id);
    assert.equal(r?.state, 'delivered', 'recorded within the grace, not released');
  });
});

/**
 * The drain store alone, without a network: claim and complete every stored delivery of a bucket
 * in batches, the way the worker does (completions ride in the next claim's transaction), and
 * print the CPU and wall time per delivery. Used to see what the store costs the drain loop.
 *
 *   npm run build && node dist/bench/drain-store.js [--requests 5000] [--batch 10] [--rounds 3]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import os from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { loadConfig } from '../src/config/config.js';
import { systemClock } from '../src/shared/clock.js';
import { newId } from '../src/shared/ids.js';
import { createLogger } from '../src/shared/logger.js';
import { SqliteDrainStore } from '../src/store/sqlite/sqlite-drain.js';
import { SqliteIngest } from '../src/store/sqlite/sqlite-ingest.js';
import { SqliteStore } from '../src/store/sqlite/sqlite-store.js';
import type { AttemptResult, ClaimedAttempt } from '../src/store/store.js';

const { values } = parseArgs({
  options: {
    requests: { type: 'string', default: '5000' },
    batch: { type: 'string', default: '10' },
    rounds: { type: 'string', default: '3' },
  },
});
const N = Number(values.requests);
const BATCH = Number(values.batch);
const ROUNDS = Number(values.rounds);
const logger = createLogger('silent');
const body = JSON.stringify({ id: 'evt', data: 'x'.repeat(2000) });

async function round(r: number): Promise<{ cpuUs: number; wallMs: number; delivered: number }> {
  const dir = await mkdtemp(join(os.tmpdir(), 'hookbucket-drain-store-'));
  const db = join(dir, 'bench.db');
  try {
    const holder = await SqliteStore.open({ path: db, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
    const bucket = await holder.createBucket({ name: 'b', destination: 'http://127.0.0.1:9/hook' });
    const sink = await SqliteIngest.start({ config: loadConfig({}, {}, { db, minFreeDisk: '0', logLevel: 'silent' }), logger });
    const t0 = Date.now() - N;
    for (let i = 0; i < N; i += 500) {
      const batch: Promise<void>[] = [];
      for (let j = i; j < Math.min(N, i + 500); j++) {
        const headers = ['Host', 'example', 'Content-Type', 'application/json', 'User-Agent', 'sender/1.0', 'X-Event', `e${j}`];
        batch.push(
          sink.submit(
            {
              id: newId(),
              bucket: 'b',
              receivedAt: t0 + j,
              method: 'POST',
              path: '/events',
              query: null,
              rawHeaders: headers,
              body: Buffer.from(body),
              peer: '127.0.0.1',
            },
            { createDelivery: true },
          ),
        );
      }
      await Promise.all(batch);
    }
    await sink.close();
    const store = await SqliteDrainStore.open({ path: db, checkpoints: true });
    let done: AttemptResult[] = [];
    let delivered = 0;
    const c0 = process.cpuUsage();
    const w0 = performance.now();
    for (;;) {
      const now = Date.now();
      const { claimed }: { claimed: ClaimedAttempt[] } = await store.claim(
        bucket,
        { complete: done, nowMs: now, limit: BATCH, leaseUntilMs: now + 60_000 },
        {},
      );
      delivered += done.length;
      if (claimed.length === 0) break;
      done = claimed.map((c) => ({
        attemptId: c.attemptId,
        deliveryId: c.deliveryId,
        finishedAt: now + 1,
        durationMs: 1,
        status: 200,
        errorClass: null,
        errorMessage: null,
        responseHeaders: ['content-type', 'text/plain', 'content-length', '2'],
        responseBody: Buffer.from('ok'),
        responseTruncated: false,
        outcome: 'delivered',
        reason: 'status_2xx',
        nextAttemptAt: null,
        nextWhy: null,
      }));
    }
    const cpu = process.cpuUsage(c0);
    const wallMs = performance.now() - w0;
    await store.close();
    await holder.close();
    console.log(
      `round ${r}: ${delivered} delivered, ${((cpu.user + cpu.system) / delivered).toFixed(1)} µs CPU and ${((wallMs * 1000) / delivered).toFixed(1)} µs wall per delivery`,
    );
    return { cpuUs: (cpu.user + cpu.system) / delivered, wallMs, delivered };
  } finally {
    await rm(dir, { recursive: true, force: true });
  }
}

const results = [];
for (let r = 1; r <= ROUNDS; r++) results.push(await round(r));
const med = results.map((x) => x.cpuUs).sort((a, b) => a - b)[Math.floor(results.length / 2)]!;
console.log(`median: ${med.toFixed(1)} µs CPU per delivery (batch ${BATCH}, ${N} requests)`);

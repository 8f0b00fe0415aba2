import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { loadConfig, type Config } from '../../src/config/config.js';
import { ManualClock } from '../../src/shared/clock.js';
import { newId } from '../../src/shared/ids.js';
import { silentLogger } from '../../src/shared/logger.js';
import { openStore } from '../../src/store/open-store.js';
import type { DrainStore, ImportItem, IngestSink, Store } from '../../src/store/store.js';
import { captured, idAt, result } from '../store/contract/harness.js';
import { createTestDatabase, pgTestServer } from '../helpers/pg-database.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * A real database with the three faces of the store on it, for the admin reader's tests: SQLite
 * in a temp folder, or a throwaway PostgreSQL database when HOOKBUCKET_TEST_PG is set.
 */

export const T0 = Date.UTC(2026, 5, 1, 12);
const DEST = 'http://127.0.0.1:9/in';

export interface Fixture {
  dialect: 'sqlite' | 'postgres';
  config: Config;
  /** The stores' clock, and the reader's: before the real time, so a reader on the system clock reads other figures. */
  clock: ManualClock;
  /** useCallerClock for the reader (PostgreSQL, as the main store was opened). */
  useCallerClock: boolean;
  store: Store;
  drain: DrainStore;
  sink: IngestSink;
  close(): Promise<void>;
}

function testConfig(db: string): Config {
  return loadConfig(
    {},
    {},
    { db, port: 0, host: '127.0.0.1', durability: 'normal', minFreeDisk: '0', lockTimeoutMs: '5s', logLevel: 'silent', worker: false },
  );
}

export const DIALECT_NAMES: ReadonlyArray<'sqlite' | 'postgres'> = pgTestServer() === undefined ? ['sqlite'] : ['sqlite', 'postgres'];

export async function openFixture(dialect: 'sqlite' | 'postgres'): Promise<Fixture> {
  const clock = new ManualClock(T0 + 10 * 60_000);
  let location: { db: string; remove(): Promise<void> };
  if (dialect === 'sqlite') {
    const t = tempDir('hookbucket-reads-');
    location = { db: t.db, remove: async () => t.remove() };
  } else {
    const d = await createTestDatabase(pgTestServer()!);
    location = { db: d.url, remove: () => d.drop() };
  }
  const config = testConfig(location.db);
  const useCallerClock = dialect === 'postgres';
  const openers = openStore(config, { clock, useCallerClock });
  const store = await openers.store();
  const drain = await openers.drainStore({ checkpoints: false });
  const sink = await openers.ingestSink({ logger: silentLogger });
  return {
    dialect,
    config,
    clock,
    useCallerClock,
    store,
    drain,
    sink,
    async close() {
      try {
        await sink.close();
        await Promise.allSettled([drain.close(), store.close()]);
      } finally {
        await location.remove();
      }
    },
  };
}

/** Every byte value, then some: a body that is not text. */
export const BINARY = Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), Buffer.from([0, 0, 0xff, 0xfe, 0x0d, 0x0a])]);

export interface Seeded {
  /** Request ids in `alpha`, oldest first. */
  alpha: string[];
  /** A request stored with the BINARY body, and one with a 100 KiB random one. */
  binaryId: string;
  largeId: string;
  largeBody: Buffer;
  replayId: string;
}

/**
 * A small deployment: `alpha` with a destination (requests delivered, retried with binary response
 * excerpts, replayed), `beta` paused, refusals, a worker lease and a registered process.
 */
export async function seed(f: Fixture): Promise<Seeded> {
  const { store, drain, sink } = f;
  await store.createBucket({ name: 'alpha', destination: DEST });
  await store.createBucket({ name: 'beta', destination: null, ackStatus: 202 });
  const largeBody = randomBytes(100 * 1024);
  const alphaReqs = [
    captured('alpha', T0, { body: BINARY, rawHeaders: ['Content-Type', 'application/octet-stream', 'X-Dup', 'a', 'x-dup', 'b'] }),
    // A copy: the SQLite sink hands a body's memory to its writer thread (transfer), emptying it here.
    captured('alpha', T0 + 1, { body: Buffer.from(largeBody), path: '/hooks/big', query: 'a=1&a=2' }),
    captured('alpha', T0 + 2, { body: '', method: 'PUT', rawTrailers: ['X-Trailer', 'done'] }),
    ...Array.from({ length: 12 }, (_, i) => captured('alpha', T0 + 3 + i, { body: `{"n":${i},"needle":${i % 3 === 0}}`, path: `/p/${i}` })),
  ];
  // Refusals are buffered and written with the next batch: these go with the requests below.
  sink.countRejection('alpha', 'too_large');
  sink.countRejection('', 'unknown_bucket');
  sink.countRejection('', 'unknown_bucket');
  await Promise.all(alphaReqs.map((r) => sink.submit(r, { createDelivery: true })));
  await Promise.all(
    Array.from({ length: 5 }, (_, i) => sink.submit(captured('beta', T0 + 20 + i, { body: `beta ${i}` }), { createDelivery: true })),
  );

  // Attempts: the first six delivered, the next three answered 500 and retried later, with binary excerpts.
  const bucket = (await drain.listBuckets()).find((b) => b.name === 'alpha');
  assert.ok(bucket);
  const at = T0 + 60_000;
  const claimed = await drain.claim(bucket, { nowMs: at, limit: 9, leaseUntilMs: at + 60_000 }, {});
  assert.equal(claimed.claimed.length, 9);
  await drain.complete(
    claimed.claimed.map((a, i) =>
      i < 6
        ? result(a, at + 10 + i, 'delivered', { body: Buffer.from([0xde, 0xad, 0xbe, 0xef, i]) })
        : result(a, at + 20 + i, 'retry', { status: 500, nextAttemptAt: at + 3_600_000, body: BINARY.subarray(0, 64) }),
    ),
  );
  // One left delivering: a live lease, counted in processes()' inflight.
  const third = await drain.claim(bucket, { nowMs: at + 100, limit: 1, leaseUntilMs: at + 600_000, workerId: 'worker-1' }, {});
  assert.equal(third.claimed.length, 1);

  const alpha = alphaReqs.map((r) => r.id);
  const replayId = newId();
  await store.createReplay({
    id: replayId,
    bucket: 'alpha',
    requestIds: alpha.slice(0, 4),
    selection: { ids: alpha.slice(0, 4) },
    destination: null,
    rate: null,
    nowMs: at + 200,
  });
  await store.pauseBucket('beta');
  await drain.acquireWorkerLease('worker-1', '{"host":"test"}', f.clock.now(), 60 * 60_000);
  await drain.heartbeat(
    { id: 'worker-1', roles: ['worker'], host: 'test', pid: 42, info: '{}', leaseMs: 60_000 },
    f.clock.now(),
    60 * 60_000,
  );
  await store.heartbeat(
    { id: 'receiver-1', roles: ['receiver'], host: 'test', pid: 43, info: '{"url":"x"}', leaseMs: null },
    f.clock.now(),
    60 * 60_000,
  );
  return { alpha, binaryId: alpha[0]!, largeId: alpha[1]!, largeBody, replayId };
}

/**
 * Stores `n` requests of `bodyBytes` each in `bucket` (created here, without a destination) through
 * the store's importer, in batches: enough rows that a body search for absent bytes reads for a while.
 */
export async function seedMany(store: Store, bucket: string, n: number, bodyBytes: number): Promise<void> {
  const b = await store.createBucket({ name: bucket, destination: null, maxBody: Math.max(bodyBytes, 1024) });
  const importer = await store.openImporter();
  try {
    const body = randomBytes(bodyBytes);
    const BATCH = 500;
    for (let done = 0; done < n; done += BATCH) {
      const items: ImportItem[] = Array.from({ length: Math.min(BATCH, n - done) }, () => ({
        method: 'POST',
        path: '',
        query: null,
        rawHeaders: ['Content-Type', 'application/octet-stream'],
        body,
      }));
      await importer.write({ name: b.name, createdAt: b.createdAt }, items, { createDelivery: false });
    }
  } finally {
    await importer.close();
  }
}

export { captured, idAt };

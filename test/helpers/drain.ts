import type { Agent } from 'undici';
import { createDeliveryAgent } from '../../src/drain/forward.js';
import { DrainWorker, type DrainWorkerDeps } from '../../src/drain/worker.js';
import { ManualClock } from '../../src/shared/clock.js';
import { newId } from '../../src/shared/ids.js';
import { silentLogger } from '../../src/shared/logger.js';
import { createBatchWriter } from '../../src/store/sqlite/ingest-batch.js';
import { openSqlite, type SqliteDb } from '../../src/store/sqlite/open.js';
import { SqliteDrainStore } from '../../src/store/sqlite/sqlite-drain.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { tempDir } from './temp-dir.js';

export interface StoredInput {
  method?: string;
  path?: string;
  query?: string | null;
  rawHeaders?: string[];
  body?: Buffer | string;
}

/**
 * A drain test bench: a real SQLite file, the store the CLI uses (buckets), the drain store, a raw
 * connection for assertions, and a manual clock. Requests are stored through the same batch writer
 * ingest uses, so rows have exactly ingest's shape.
 */
export interface DrainBench {
  clock: ManualClock;
  store: SqliteStore;
  drain: SqliteDrainStore;
  raw: SqliteDb;
  db: string;
  agent: Agent;
  /** Stores requests as ingest would, with a delivery when the bucket has a destination; returns their ids. */
  ingest(bucket: string, ...reqs: StoredInput[]): string[];
  worker(deps?: Partial<DrainWorkerDeps>): DrainWorker;
  delivery(requestId: string): Record<string, any>;
  attempts(requestId: string): Array<Record<string, any>>;
  close(): Promise<void>;
}

export async function drainBench(): Promise<DrainBench> {
  const t = tempDir();
  const clock = new ManualClock(Date.UTC(2026, 11, 2, 12));
  const store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock });
  const drain = await SqliteDrainStore.open({ path: t.db });
  const raw = openSqlite(t.db, { durability: 'normal', busyTimeoutMs: 5000 });
  const write = createBatchWriter(raw);
  const agent = createDeliveryAgent();
  const workers: DrainWorker[] = [];
  let seq = 0;
  return {
    clock,
    store,
    drain,
    raw,
    db: t.db,
    agent,
    ingest(bucket, ...reqs) {
      const hasDestination = (raw.prepare('select destination from buckets where name = ?').pluck().get(bucket) ?? null) !== null;
      const items = reqs.map((r) => {
        const body = typeof r.body === 'string' ? Buffer.from(r.body) : (r.body ?? Buffer.from('{"n":1}'));
        return {
          seq: ++seq,
          id: newId(),
          bucket,
          receivedAt: clock.now(),
          method: r.method ?? 'POST',
          path: r.path ?? '',
          query: r.query ?? null,
          rawHeaders: r.rawHeaders ?? ['Content-Type', 'application/json'],
          body: new Uint8Array(body),
          peer: '127.0.0.1',
          createDelivery: hasDestination,
          deadline: Date.now() + 5000,
        };
      });
      write(items, []);
      return items.map((i) => i.id);
    },
    worker(deps = {}) {
      const w = new DrainWorker({
        store: drain,
        dispatcher: agent,
        clock,
        logger: silentLogger,
        random: () => 0.5,
        leaseMs: 60_000,
        ...deps,
      });
      workers.push(w);
      return w;
    },
    delivery(requestId) {
      return raw.prepare('select * from deliveries where request_id = ? order by generation desc limit 1').get(requestId) as Record<
        string,
        any
      >;
    },
    attempts(requestId) {
      return raw.prepare('select * from attempts where request_id = ? order by started_at, number').all(requestId) as Array<
        Record<string, any>
      >;
    },
    async close() {
      for (const w of workers) await w.stop(0);
      await agent.close();
      await drain.close();
      await store.close();
      raw.close();
      t.remove();
    },
  };
}

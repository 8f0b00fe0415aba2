import { loadConfig, type Flags } from '../../src/config/config.js';
import { startServer, type RunningServer } from '../../src/main.js';
import { type Clock, systemClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { tempDir } from './temp-dir.js';

export interface TestServer extends RunningServer {
  db: string;
  dir: string;
  /** A second connection to the same file, as another process would have. */
  store: SqliteStore;
  stop(): Promise<void>;
}

/**
 * A real server on 127.0.0.1 port 0 with a real SQLite file in a temp folder. The disk floor is 0
 * so tests never depend on the free space of the machine that runs them. The drain worker is off
 * unless a test asks for it (`{ worker: true }`), so ingest tests see deliveries as stored. The admin listener takes a free port (admin port 0).
 * `clock`: a ManualClock for tests that need time to stand still (tolerances, rate limits).
 */
export async function startTestServer(flags: Flags = {}, opts: { clock?: Clock } = {}): Promise<TestServer> {
  const t = tempDir();
  const config = loadConfig(
    {},
    {},
    { db: t.db, port: 0, host: '127.0.0.1', minFreeDisk: '0', logLevel: 'silent', worker: false, adminPort: 0, ...flags },
  );
  const running = await startServer(config, { clock: opts.clock ?? systemClock, logger: silentLogger });
  const store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
  return {
    ...running,
    db: t.db,
    dir: t.dir,
    store,
    async stop() {
      await running.close(2000);
      await store.close();
      t.remove();
    },
  };
}

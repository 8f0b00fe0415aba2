import { copyFileSync } from 'node:fs';
import { loadConfig, type Config } from '../../../src/config/config.js';
import type { Clock } from '../../../src/shared/clock.js';
import { silentLogger } from '../../../src/shared/logger.js';
import { openStore } from '../../../src/store/open-store.js';
import { SqliteStore } from '../../../src/store/sqlite/sqlite-store.js';
import type { DrainStore, IngestSink, Store } from '../../../src/store/store.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases } from '../../helpers/pg-database.js';
import { tempDir } from '../../helpers/temp-dir.js';

/**
 * The dialects the store contract suite (store-contract.test.ts) runs against, in the manner of
 * Kysely's `for (const dialect of DIALECTS)` tests. Each `open()` gives a fresh, empty, migrated
 * database with the three faces of the store on it.
 */

/** What `openStore()` gives: the CLI/API store, the drain worker's store and ingest's sink. */
export interface StoreSet {
  store: Store;
  drain: DrainStore;
  sink: IngestSink;
  /**
   * Another CLI/API store on the same database, as another process would open it (its changes are
   * "another connection's" for this set's caches). Closed by close().
   */
  another(): Promise<Store>;
  /** Another drain store on the same database, as a second worker process would open it. Closed by close(). */
  anotherDrain(): Promise<DrainStore>;
  /** Closes everything and removes the database. */
  close(): Promise<void>;
}

export interface Dialect {
  name: string;
  /** `clock` is the stores' clock (bucket times, the tail's look-back); drain calls take nowMs. */
  open(deps: { clock: Clock }): Promise<StoreSet>;
  /** Once before the dialect's tests (the PostgreSQL half sweeps stale test databases). */
  setUp?(): Promise<void>;
  /** Once after them. */
  tearDown?(): Promise<void>;
}

/**
 * Settings the stores read, through the same loader as the CLI (settings added later get their
 * defaults): short waits, durability normal (a test needs no fsync per commit), no disk floor.
 */
function testConfig(db: string): Config {
  return loadConfig(
    {},
    {},
    { db, port: 0, host: '127.0.0.1', durability: 'normal', minFreeDisk: '0', lockTimeoutMs: '5s', logLevel: 'silent', worker: false },
  );
}

/** Closes every part, even when one fails, and reports the first failure. */
async function closeAll(parts: Array<() => Promise<void>>): Promise<void> {
  const results = await Promise.allSettled(parts.map((close) => close()));
  const failed = results.find((r): r is PromiseRejectedResult => r.status === 'rejected');
  if (failed) throw failed.reason;
}

/**
 * SQLite: each set gets a copy of one database migrated once per run (a fresh file migrated from
 * nothing costs about 120 ms, a copy about 1 ms); the stores then open it as any existing file.
 */
let sqliteTemplate: { file: string; remove(): void } | undefined;

async function migratedTemplate(clock: Clock): Promise<string> {
  if (!sqliteTemplate) {
    const t = tempDir('hookbucket-contract-template-');
    const store = await SqliteStore.open({ path: t.db, durability: 'normal', busyTimeoutMs: 5000, clock });
    // The last connection to close checkpoints the WAL into the file and removes it: one file to copy.
    await store.close();
    sqliteTemplate = { file: t.db, remove: t.remove };
  }
  return sqliteTemplate.file;
}

const sqlite: Dialect = {
  name: 'sqlite',
  async tearDown() {
    sqliteTemplate?.remove();
    sqliteTemplate = undefined;
  },
  async open({ clock }) {
    const t = tempDir('hookbucket-contract-');
    copyFileSync(await migratedTemplate(clock), t.db);
    const openers = openStore(testConfig(t.db), { clock });
    const open = () => openers.store();
    const store = await open();
    const drain = await openers.drainStore({ checkpoints: false });
    const sink = await openers.ingestSink({ logger: silentLogger });
    const others: Array<Store | DrainStore> = [];
    return {
      store,
      drain,
      sink,
      async another() {
        const other = await open();
        others.push(other);
        return other;
      },
      async anotherDrain() {
        const other = await openers.drainStore({ checkpoints: false });
        others.push(other);
        return other;
      },
      async close() {
        try {
          // The sink first: it flushes what it holds into the database the stores still have open.
          await sink.close();
          await closeAll([() => drain.close(), () => store.close(), ...others.map((o) => () => o.close())]);
        } finally {
          t.remove();
        }
      },
    };
  },
};

/**
 * The PostgreSQL half: opens the store set on a database URL through openStore() (it runs only
 * when HOOKBUCKET_TEST_PG is set).
 */
async function openPostgresSet(url: string, deps: { clock: Clock; config: Config }): Promise<StoreSet> {
  const openers = openStore({ ...deps.config, db: url }, { clock: deps.clock, useCallerClock: true });
  const opened: Array<{ close(): Promise<void> }> = [];
  const track = async <T extends { close(): Promise<void> }>(p: Promise<T>): Promise<T> => {
    const part = await p;
    opened.push(part);
    return part;
  };
  try {
    const store = await track(openers.store());
    const drain = await track(openers.drainStore({ checkpoints: false }));
    const sink = await openers.ingestSink({ logger: silentLogger });
    return {
      store,
      drain,
      sink,
      another: () => track(openers.store()),
      anotherDrain: () => track(openers.drainStore({ checkpoints: false })),
      async close() {
        // The sink first: it flushes what it holds.
        await sink.close();
        await closeAll(opened.map((part) => () => part.close()));
      },
    };
  } catch (e) {
    await closeAll(opened.map((part) => () => part.close())).catch(() => undefined);
    throw e;
  }
}

function postgres(server: string): Dialect {
  return {
    name: 'postgres',
    async setUp() {
      await sweepStaleTestDatabases(server);
    },
    async open({ clock }) {
      const database = await createTestDatabase(server);
      let set: StoreSet;
      try {
        set = await openPostgresSet(database.url, { clock, config: testConfig(database.url) });
      } catch (e) {
        await database.drop();
        throw e;
      }
      return {
        ...set,
        async close() {
          try {
            await set.close();
          } finally {
            await database.drop();
          }
        },
      };
    },
  };
}

const pgServer = pgTestServer();

/** Every dialect this run tests. */
export const DIALECTS: readonly Dialect[] = pgServer === undefined ? [sqlite] : [sqlite, postgres(pgServer)];

/** Dialects left out of this run, with the one line that says why. */
export const SKIPPED_DIALECTS: ReadonlyArray<{ name: string; reason: string }> =
  pgServer === undefined ? [{ name: 'postgres', reason: PG_SKIP_REASON }] : [];

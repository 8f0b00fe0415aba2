import type { Command } from 'commander';
import { loadConfig, type Config, type Flags } from '../config/config.js';
import { systemClock } from '../shared/clock.js';
import { openStore } from '../store/open-store.js';
import type { Store } from '../store/store.js';
import type { CliIo } from './io.js';

/** Resolves configuration for a command: its own flags plus the global --db, --db-pool and --spool-dir. */
export function configFor(cmd: Command, io: CliIo, flags: Flags = {}): Config {
  const globals = cmd.optsWithGlobals<{ db?: string; dbPool?: number; spoolDir?: string }>();
  return loadConfig(io.env, io.dotenv, {
    ...flags,
    ...(globals.db !== undefined ? { db: globals.db } : {}),
    ...(globals.dbPool !== undefined ? { dbPool: globals.dbPool } : {}),
    ...(globals.spoolDir !== undefined ? { spoolDir: globals.spoolDir } : {}),
  });
}

/**
 * How long a CLI command waits for the write lock: 10 s, against ingest's `--lock-timeout` (2 s).
 * SQLite's busy handler is not fair (a waiter sleeps and retries; a writer that commits and begins
 * again often wins), so under ingest and drain load an operator's command can wait several of
 * ingest's 2 s windows. A person at a terminal can wait where a webhook sender cannot.
 */
export const CLI_LOCK_WAIT_MS = 10_000; // 10s

/** Opens the database (creating and migrating it when missing) for one command, and closes it after. */
export async function withStore<T>(cmd: Command, io: CliIo, fn: (store: Store) => Promise<T>): Promise<T> {
  const config = configFor(cmd, io);
  const store = await openStore(config, { clock: systemClock }).store({ lockWaitMs: CLI_LOCK_WAIT_MS });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

import type { Command } from 'commander';
import { loadConfig, type Config, type Flags } from '../config/config.js';
import { systemClock } from '../shared/clock.js';
import { SqliteStore } from '../store/sqlite/sqlite-store.js';
import type { Store } from '../store/store.js';
import type { CliIo } from './io.js';

/** Resolves configuration for a command: its own flags plus the global --db. */
export function configFor(cmd: Command, io: CliIo, flags: Flags = {}): Config {
  const globals = cmd.optsWithGlobals<{ db?: string }>();
  return loadConfig(io.env, io.dotenv, { ...flags, ...(globals.db !== undefined ? { db: globals.db } : {}) });
}

/** Opens the database (creating and migrating it when missing) for one command, and closes it after. */
export async function withStore<T>(cmd: Command, io: CliIo, fn: (store: Store) => Promise<T>): Promise<T> {
  const config = configFor(cmd, io);
  const store = await SqliteStore.open({
    path: config.db,
    durability: config.durability,
    busyTimeoutMs: config.lockTimeoutMs,
    clock: systemClock,
  });
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

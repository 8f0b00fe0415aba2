import { mkdirSync } from 'node:fs';
import { dirname } from 'node:path';
import BetterSqlite3 from 'better-sqlite3';
import type { Durability } from '../../config/config.js';

export type SqliteDb = BetterSqlite3.Database;

export interface OpenOptions {
  durability: Durability;
  /** busy_timeout in ms: how long a write waits for the lock held by another connection. */
  busyTimeoutMs: number;
}

/** WAL files are truncated to this size when SQLite resets them, so the WAL stays bounded. */
export const JOURNAL_SIZE_LIMIT = 64 * 1024 * 1024; // 64 MiB

/**
 * Opens a connection with the project's pragmas. Order matters: auto_vacuum only takes effect on a
 * file that has no tables yet, and must be set before journal_mode=WAL writes the header, so it
 * comes first (otherwise it silently stays 0).
 */
export function openSqlite(path: string, options: OpenOptions): SqliteDb {
  if (path !== ':memory:') mkdirSync(dirname(path), { recursive: true });
  const db = new BetterSqlite3(path, { timeout: options.busyTimeoutMs });
  // Setting auto_vacuum runs a write transaction (it rewrites a header field), so only a file that
  // does not have it yet pays for one: on an existing file, opening takes no write lock, and the
  // writer and checkpoint threads (busy_timeout 0) cannot fail with SQLITE_BUSY while another
  // connection writes (a restart after kill -9 did, about 1 start in 15: reliability case 1).
  if (db.pragma('auto_vacuum', { simple: true }) !== 2) db.pragma('auto_vacuum = INCREMENTAL');
  db.pragma('journal_mode = WAL');
  db.pragma(`synchronous = ${options.durability === 'full' ? 'FULL' : 'NORMAL'}`);
  db.pragma(`journal_size_limit = ${JOURNAL_SIZE_LIMIT}`);
  db.pragma('temp_store = MEMORY');
  return db;
}

/**
 * Opens an existing database read-only, with no pragma that writes: journal_mode WAL is a property
 * of the file (set by the read-write opener), and in WAL mode a reader neither waits for the
 * writer nor holds it up, apart from keeping the frames it reads from being checkpointed over.
 */
export function openSqliteReadOnly(path: string, busyTimeoutMs: number): SqliteDb {
  const db = new BetterSqlite3(path, { readonly: true, fileMustExist: true, timeout: busyTimeoutMs });
  db.pragma('temp_store = MEMORY');
  return db;
}

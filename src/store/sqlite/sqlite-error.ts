/**
 * better-sqlite3 throws SqliteError with `code` set to SQLite's extended result code name
 * (SQLITE_FULL, SQLITE_BUSY_SNAPSHOT, …). Pure, with no driver import, so that the neutral
 * storage-error.ts can ask it without loading better-sqlite3.
 */
import type { StorageErrorCode } from '../storage-error.js';

/** SQLite result codes that mean the storage itself cannot take writes (disk full, I/O, read-only). */
export function sqliteStorageErrorCode(e: unknown): StorageErrorCode | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  if (typeof code !== 'string' || !code.startsWith('SQLITE_')) return undefined;
  if (code === 'SQLITE_FULL') return 'storage_full';
  if (code.startsWith('SQLITE_BUSY') || code.startsWith('SQLITE_LOCKED')) return 'store_busy';
  return 'storage_error';
}

/**
 * Which driver errors mean the storage cannot take writes, as the stable codes ingest answers 503
 * with and the CLI prints: `storage_full` (disk full), `store_busy` (a lock not granted in time)
 * and `storage_error` (I/O, read-only, corruption). Dialect-neutral: it asks each dialect's
 * classifier in turn, and each recognises only its own driver's errors (SQLite's SQLITE_* codes,
 * PostgreSQL's SQLSTATEs and the pg driver's connection errors). Classifiers are pure and import
 * no driver.
 */
import { AppError } from '../shared/errors.js';
import { pgStorageErrorCode } from './postgres/pg-error.js';
import { sqliteStorageErrorCode } from './sqlite/sqlite-error.js';

export type StorageErrorCode = 'storage_full' | 'store_busy' | 'storage_error';

/** One dialect's mapping: undefined for an error that is not its driver's storage error. */
export type StorageErrorClassifier = (e: unknown) => StorageErrorCode | undefined;

const CLASSIFIERS: readonly StorageErrorClassifier[] = [sqliteStorageErrorCode, pgStorageErrorCode];

/** The storage error code for a driver error of any dialect; undefined for anything else. */
export function storageErrorCode(e: unknown): StorageErrorCode | undefined {
  // A store's own error that already carries one of these codes (a lookup that timed out).
  if (e instanceof AppError && (e.code === 'storage_full' || e.code === 'store_busy' || e.code === 'storage_error')) return e.code;
  for (const classify of CLASSIFIERS) {
    const code = classify(e);
    if (code !== undefined) return code;
  }
  return undefined;
}

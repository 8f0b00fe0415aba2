/**
 * `hookbucket backup`: what the command asks of a dialect and what it gets back. Dialect-neutral;
 * SQLite's copy is `sqlite/sqlite-backup.ts`, and PostgreSQL refuses (pg_dump is the tool there).
 */

export interface BackupOptions {
  /** Replace an existing file at the target path. */
  force: boolean;
  /** How long the copy's read transaction may wait to start (SQLite: busy timeout). */
  busyTimeoutMs: number;
  /** Called a few times a second while copying, then once when the check starts. */
  onProgress?: (p: BackupProgress) => void;
  /** Aborting stops the copy and removes the partial file; the promise rejects with the signal's reason. */
  signal?: AbortSignal;
  /** Milliseconds since the epoch (the duration reported). */
  nowMs: () => number;
}

export interface BackupProgress {
  phase: 'copy' | 'check';
  /** Bytes written to the copy so far. */
  bytes: number;
  /** What the copy will be about, from the database file's size (a copy leaves free pages out). */
  estimateBytes: number;
}

export interface BackupResult {
  /** Absolute path of the finished copy. */
  path: string;
  bytes: number;
  durationMs: number;
  /** PRAGMA integrity_check on the copy; a copy that fails it is removed and the backup fails. */
  integrity: 'ok';
  /** The last migration applied in the copy (null for a database never migrated). */
  migration: string | null;
}

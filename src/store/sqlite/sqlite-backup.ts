/**
 * A consistent copy of a live SQLite database, for `hookbucket backup`.
 *
 * VACUUM INTO, not the online backup API: a paged backup restarts whenever another connection
 * writes, so under steady ingest it may never finish. VACUUM INTO copies in one read transaction on
 * a read-only connection: the copy is the database as of that transaction's start, every request
 * acknowledged before it included, and in WAL mode ingest and the worker keep writing meanwhile (the
 * WAL grows until the copy ends, because checkpoints cannot pass its snapshot).
 *
 * The copy is written under a temporary name in the target's folder, checked with
 * PRAGMA integrity_check, made 0600 (it holds every stored request, credentials included), synced
 * (SQLite does not sync a VACUUM INTO file), then renamed into place and the folder synced.
 */
import { fork } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { closeSync, existsSync, fsyncSync, openSync, realpathSync, statSync } from 'node:fs';
import { chmod, rename, rm, stat } from 'node:fs/promises';
import { basename, dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { AppError } from '../../shared/errors.js';
import type { BackupOptions, BackupResult } from '../backup.js';
import { sqliteStorageErrorCode } from './sqlite-error.js';

export interface BackupChildInit {
  source: string;
  temp: string;
  busyTimeoutMs: number;
}

export type BackupChildMessage =
  | { type: 'copied' }
  | { type: 'done'; integrity: string[]; migration: string | null }
  | { type: 'failed'; code: string | undefined; message: string };

/** How often the copy's size is read for progress. */
const PROGRESS_EVERY_MS = 200;
/** integrity_check lines quoted in the error when the copy fails it. */
const INTEGRITY_LINES_SHOWN = 5;

const sizeOf = (path: string) => {
  try {
    return statSync(path).size;
  } catch {
    return 0;
  }
};

function syncPath(path: string, flags: string): void {
  const fd = openSync(path, flags);
  try {
    fsyncSync(fd);
  } finally {
    closeSync(fd);
  }
}

/** Refusals that need no database: where the copy would go. */
function checkTarget(source: string, target: string, force: boolean): void {
  if (existsSync(target) && realpathSync(target) === realpathSync(source))
    throw new AppError('usage', `${target} is the database itself: name another file for the backup`);
  for (const side of ['-wal', '-shm', '-journal'])
    if (existsSync(target + side))
      throw new AppError(
        'target_exists',
        `${target + side} exists: ${target} looks like a database in use; stop what uses it, or choose another file (--force does not replace a live database)`,
      );
  if (existsSync(target)) {
    if (statSync(target).isDirectory())
      throw new AppError('usage', `${target} is a folder: name a file, e.g. ${join(target, 'hookbucket.db')}`);
    if (!force) throw new AppError('target_exists', `${target} exists; pass --force to replace it, or choose another file`);
  }
  const dir = dirname(target);
  if (!existsSync(dir) || !statSync(dir).isDirectory()) throw new AppError('not_found', `folder ${dir} does not exist`);
}

export async function backupSqlite(db: string, file: string, options: BackupOptions): Promise<BackupResult> {
  const startedAt = options.nowMs();
  const source = resolve(db);
  const target = resolve(file);
  if (!existsSync(source)) throw new AppError('not_found', `database ${db} not found (--db or HOOKBUCKET_DB)`);
  checkTarget(source, target, options.force);
  options.signal?.throwIfAborted();
  const temp = join(dirname(target), `.${basename(target)}.partial-${randomBytes(6).toString('hex')}`);
  const estimateBytes = sizeOf(source);
  let renamed = false;
  try {
    // Made empty and private first (VACUUM INTO accepts an empty file): the copy holds every stored
    // credential, and created by VACUUM INTO itself it would be readable under the umask (often
    // 0644) for as long as the copy and its check take.
    closeSync(openSync(temp, 'wx', 0o600));
    const outcome = await runChild({ source, temp, busyTimeoutMs: options.busyTimeoutMs }, estimateBytes, options);
    if (outcome.integrity.length !== 1 || outcome.integrity[0] !== 'ok') {
      const shown = outcome.integrity.slice(0, INTEGRITY_LINES_SHOWN).join('; ');
      throw new AppError(
        'backup_failed',
        `the copy failed PRAGMA integrity_check (${shown}${outcome.integrity.length > INTEGRITY_LINES_SHOWN ? '; …' : ''}); it was removed. Check the database itself with: sqlite3 ${source} 'PRAGMA integrity_check'`,
      );
    }
    options.signal?.throwIfAborted();
    await chmod(temp, 0o600);
    syncPath(temp, 'r+');
    await rename(temp, target);
    renamed = true;
    syncPath(dirname(target), 'r');
    const bytes = (await stat(target)).size;
    return { path: target, bytes, durationMs: options.nowMs() - startedAt, integrity: 'ok', migration: outcome.migration };
  } finally {
    if (!renamed) for (const f of [temp, `${temp}-journal`]) await rm(f, { force: true });
  }
}

function runChild(
  init: BackupChildInit,
  estimateBytes: number,
  options: BackupOptions,
): Promise<{ integrity: string[]; migration: string | null }> {
  return new Promise((resolvePromise, reject) => {
    const child = fork(fileURLToPath(new URL('./backup-child.js', import.meta.url)), [JSON.stringify(init)], {
      stdio: ['ignore', 'ignore', 'inherit', 'ipc'],
    });
    let result: { integrity: string[]; migration: string | null } | undefined;
    let failure: Error | undefined;
    let phase: 'copy' | 'check' = 'copy';
    const timer = setInterval(() => {
      if (phase === 'copy') options.onProgress?.({ phase, bytes: sizeOf(init.temp), estimateBytes });
    }, PROGRESS_EVERY_MS);
    // Stopped: SIGKILL ends the copy where it is (the database is only read, so nothing of it is
    // left half-done); the caller removes the partial file once the child has exited.
    const onAbort = () => {
      failure = options.signal?.reason as Error;
      child.kill('SIGKILL');
    };
    options.signal?.addEventListener('abort', onAbort, { once: true });
    child.on('message', (m: BackupChildMessage) => {
      if (m.type === 'copied') {
        phase = 'check';
        const bytes = sizeOf(init.temp);
        options.onProgress?.({ phase, bytes, estimateBytes: Math.max(estimateBytes, bytes) });
      } else if (m.type === 'done') result = { integrity: m.integrity, migration: m.migration };
      else {
        const code = sqliteStorageErrorCode({ code: m.code }) ?? 'storage_error';
        failure ??= new AppError(code, `backup failed: ${m.message}${m.code ? ` (${m.code})` : ''}`);
      }
    });
    child.once('error', (e) => {
      failure ??= e;
    });
    child.once('close', (code, signal) => {
      clearInterval(timer);
      options.signal?.removeEventListener('abort', onAbort);
      if (failure) reject(failure);
      else if (result) resolvePromise(result);
      else reject(new AppError('storage_error', `the backup process stopped (${signal ?? `exit ${code}`}) before it finished`));
    });
  });
}

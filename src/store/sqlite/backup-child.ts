/**
 * `hookbucket backup` in a child process of its own: VACUUM INTO from a read-only connection (one
 * read transaction, so the copy is one consistent snapshot, and writers in WAL mode never wait for
 * it), then PRAGMA integrity_check and the migration version on the copy. A process, not a worker
 * thread, so that the command shows progress meanwhile and stops the copy at once on Ctrl-C or
 * SIGTERM (SIGKILL to the child): a thread cannot be stopped inside SQLite's VACUUM, and
 * terminating one there crashed the whole process (V8 fatal error, measured).
 */
import BetterSqlite3 from 'better-sqlite3';
import { MIGRATION_TABLE } from '../migrate-data/data-end.js';
import type { BackupChildInit, BackupChildMessage } from './sqlite-backup.js';

// Ctrl-C reaches the whole process group: the command decides (it ends this process and removes
// the partial copy), so that the copy's end is never mistaken for a failure.
process.on('SIGINT', () => undefined);
const init = JSON.parse(process.argv[2] ?? '{}') as BackupChildInit;
// Sent over the IPC channel fork() opened; the channel closes after the last message, so the
// process ends by itself once its work is done.
const post = (m: BackupChildMessage, last = false) => process.send?.(m, undefined, {}, () => (last ? process.disconnect?.() : undefined));

try {
  const source = new BetterSqlite3(init.source, { readonly: true, fileMustExist: true, timeout: init.busyTimeoutMs });
  try {
    source.prepare('VACUUM INTO ?').run(init.temp);
  } finally {
    source.close();
  }
  post({ type: 'copied' });
  const copy = new BetterSqlite3(init.temp, { readonly: true, fileMustExist: true });
  try {
    const integrity = (copy.pragma('integrity_check') as Array<{ integrity_check: string }>).map((r) => r.integrity_check);
    const hasTable =
      (copy.prepare("select count(*) from sqlite_master where type = 'table' and name = ?").pluck().get(MIGRATION_TABLE) as number) > 0;
    const migration = hasTable ? (copy.prepare(`select max(name) from "${MIGRATION_TABLE}"`).pluck().get() as string | null) : null;
    post({ type: 'done', integrity, migration }, true);
  } finally {
    copy.close();
  }
} catch (e) {
  const err = e as { code?: unknown; message?: unknown };
  post(
    {
      type: 'failed',
      code: typeof err.code === 'string' ? err.code : undefined,
      message: typeof err.message === 'string' ? err.message : String(e),
    },
    true,
  );
}

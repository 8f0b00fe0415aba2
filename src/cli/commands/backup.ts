import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { systemClock } from '../../shared/clock.js';
import { formatDuration } from '../../shared/format-duration.js';
import type { BackupResult } from '../../store/backup.js';
import { backupDatabase } from '../../store/open-store.js';
import { CLI_LOCK_WAIT_MS, configFor } from '../context.js';
import { interruptOf, print, printErr, printJson, type CliIo } from '../io.js';
import { Interrupted } from '../interrupt.js';
import { createProgress } from '../progress.js';

interface BackupOpts {
  force?: boolean;
  json?: boolean;
}

/** Progress shows only for a copy that takes longer than this, so a small one prints just its result. */
const PROGRESS_AFTER_MS = 500;

/** Stable JSON shape (docs/cli.md "backup"). */
export function backupJson(r: BackupResult, database: string) {
  return {
    path: r.path,
    database,
    bytes: r.bytes,
    duration_ms: r.durationMs,
    integrity: r.integrity,
    migration: r.migration,
  };
}

export function makeBackupCommand(io: CliIo): Command {
  return new Command('backup')
    .description('copy the SQLite database to a file while serve keeps running, and check the copy (PRAGMA integrity_check)')
    .argument('<file>', 'where the copy goes (a new file; see --force)')
    .option('--force', 'replace the file if it exists (never a database in use: one with -wal or -shm beside it)')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
The copy is one consistent snapshot (SQLite's VACUUM INTO on a read-only connection): every request
acknowledged before the backup started is in it, and ingest and deliveries go on meanwhile. It is
written under a temporary name beside <file>, checked, made mode 0600 and renamed into place, so
<file> is either a complete, checked copy or absent. The copy holds every stored request, credentials
included: keep it as safe as the database. PostgreSQL: use pg_dump.

Restore: stop serve (and any worker), replace the database file with the copy, remove the old
database's -wal and -shm files, then start serve (docs/deploy.md "Backups").

Examples:
  $ hookbucket backup /var/backups/hookbucket/hb-$(date +%F).db
  $ hookbucket --db /var/lib/hookbucket/hookbucket.db backup /mnt/backup/hb.db --force --json`,
    )
    .action(async (file: string, opts: BackupOpts, cmd: Command) => {
      const config = configFor(cmd, io);
      const progress = createProgress(io);
      // Ctrl-C or SIGTERM: the child is killed and the partial copy removed (the store's abort
      // path), then the command exits 130 or 143 (interrupt.ts).
      const held = interruptOf(io).hold();
      const startedAt = systemClock.now();
      let result: BackupResult;
      try {
        result = await backupDatabase(config.db, file, {
          force: opts.force === true,
          busyTimeoutMs: CLI_LOCK_WAIT_MS,
          nowMs: () => systemClock.now(),
          signal: held.signal,
          onProgress: (p) => {
            if (systemClock.now() - startedAt < PROGRESS_AFTER_MS) return;
            if (p.phase === 'copy')
              progress.update(
                Math.min(p.bytes, p.estimateBytes),
                p.estimateBytes,
                `copied ${formatSize(p.bytes)} of about ${formatSize(p.estimateBytes)}`,
              );
            else progress.update(p.estimateBytes, p.estimateBytes, `copied ${formatSize(p.bytes)}; checking the copy (integrity_check)`);
          },
        });
      } catch (e) {
        progress.stop();
        if (held.signal.aborted) {
          const by = held.signal.reason instanceof Interrupted ? ` by ${held.signal.reason.signal}` : '';
          printErr(io, `backup stopped${by}; the partial copy was removed and ${file} was not written`);
          throw held.signal.reason;
        }
        throw e;
      } finally {
        held.release();
      }
      progress.stop();
      if (opts.json) return printJson(io, backupJson(result, config.db));
      print(
        io,
        `backed up ${config.db} to ${result.path}: ${formatSize(result.bytes)} in ${formatDuration(result.durationMs)}, integrity ok, migration ${result.migration ?? 'none'}`,
      );
    });
}

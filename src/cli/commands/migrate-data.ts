import { Command, InvalidArgumentError, Option } from 'commander';
import { formatSize, isBareNumber, noUnitMessage, parseSize } from '../../config/units.js';
import { formatDuration } from '../../shared/format-duration.js';
import { ExitCode, ExitWith } from '../../shared/errors.js';
import { runMigrateData, type RunMigrateDataResult } from '../../store/migrate-data/run.js';
import { interruptOf, iso, print, printErr, printJson, table, type CliIo } from '../io.js';
import { integerArg } from '../parsers.js';
import { createProgress } from '../progress.js';

/** Rows per page: one target transaction each. */
const DEFAULT_BATCH_ROWS = 500;
/** Body bytes per page (a page holds one row at least, whatever its size). */
const DEFAULT_BATCH_BYTES = 8 * 1024 * 1024; // 8 MiB

function batchBytesArg(value: string): number {
  if (isBareNumber(value)) throw new InvalidArgumentError(noUnitMessage(value, 'size'));
  const n = parseSize(value);
  if (n === undefined || n < 1) throw new InvalidArgumentError('a size like 8MiB or 512kb');
  return n;
}

interface Opts {
  from: string;
  to: string;
  append?: boolean;
  force?: boolean;
  batchRows?: number;
  batchBytes?: number;
  json?: boolean;
  stopAfterBatches?: number;
}

export function makeMigrateDataCommand(io: CliIo): Command {
  return (
    new Command('migrate-data')
      .description('copy a whole deployment to another database (SQLite file or PostgreSQL URL, either way), then verify it')
      .requiredOption('--from <path|url>', 'the database to copy: a SQLite file, or a postgres:// or postgresql:// URL (read only)')
      .requiredOption(
        '--to <path|url>',
        'the database to copy into (migrated to the latest schema first; a SQLite file is created when missing)',
      )
      .option('--append', 'copy into a target that holds other buckets or requests already (colliding ids are refused)')
      .option(
        '--force',
        'copy although a live worker or receiver holds the source or the target (what it changes meanwhile may fail the verify)',
      )
      .option('--batch-rows <n>', `rows per transaction (default ${DEFAULT_BATCH_ROWS})`, integerArg(1, 10_000))
      .option(
        '--batch-bytes <size>',
        `body bytes per transaction, past its first row (default ${formatSize(DEFAULT_BATCH_BYTES)})`,
        batchBytesArg,
      )
      .option('--json', 'print a JSON summary { ok, from, to, resumed, run_at, tables: [...], bodies, leases_recovered, elapsed_ms }')
      // Tests: an interruption at a known point (the run then exits 1, and resumes when run again).
      .addOption(new Option('--stop-after-batches <n>').argParser(integerArg(1, 1_000_000)).hideHelp())
      .addHelpText(
        'after',
        `
Copies buckets, replays, requests (bodies byte-exact), deliveries, attempts, rejection counts,
pacer rows and metadata, parents first, in pages of --batch-rows rows and --batch-bytes body bytes,
each page one transaction in the target. The source is only read; it must be idle: a live worker
or receiver on it or on the target (its heartbeat, or the worker lease) is refused unless --force.
Stop serve and workers on it first.

A delivery in flight (state delivering) is copied as lease recovery would leave it: its open
attempt closed as lease_expired, the delivery retrying and due at the run's start.

The target records a run marker in its meta table. Run the same command again after an
interruption and it resumes after the last committed page; run it after a finished run and it
verifies again. A first run refuses a target holding buckets or requests unless --append.

At the end every source row is looked up in the target and compared, and every body's sha256 is
recomputed from the target's bytes. Exit codes: 0 verified, 1 refused or failed (error [code]),
2 usage, 3 the verify found a difference.

Examples:
  $ hookbucket migrate-data --from data/hookbucket.db --to postgres://hookbucket@db.internal/hookbucket
  $ hookbucket migrate-data --from postgres://hookbucket@db.internal/hookbucket --to backup.db --json
  $ hookbucket migrate-data --from staging.db --to data/hookbucket.db --append`,
      )
      .action(async (opts: Opts) => {
        const started = Date.now();
        // Ctrl-C or SIGTERM: the copy stops after the page in flight (each page is one transaction
        // in the target) and says how to resume; registered before the bar, so it prints after the
        // bar is down (interrupt.ts).
        const interrupt = interruptOf(io);
        const held = interrupt.hold();
        const unregister = interrupt.onInterrupt(() =>
          printErr(
            io,
            'interrupted: the pages copied so far stay committed in the target; run the same command again to resume after the last one',
          ),
        );
        const progress = createProgress(io);
        let result: RunMigrateDataResult;
        try {
          result = await runMigrateData({
            from: opts.from,
            to: opts.to,
            append: opts.append === true,
            force: opts.force === true,
            batchRows: opts.batchRows ?? DEFAULT_BATCH_ROWS,
            batchBytes: opts.batchBytes ?? DEFAULT_BATCH_BYTES,
            ...(opts.stopAfterBatches !== undefined ? { stopAfterBatches: opts.stopAfterBatches } : {}),
            onProgress: (p) => {
              // Called between pages, after one has committed: where --stop-after-batches stops too.
              if (held.signal.aborted) throw held.signal.reason;
              progress.update(p.done, p.total, `${p.phase === 'copy' ? 'copying' : 'verifying'} ${p.table} (${p.done}/${p.total} rows)`);
            },
          });
        } finally {
          unregister();
          held.release();
          progress.stop();
        }
        const elapsedMs = Date.now() - started;
        if (opts.json) {
          printJson(io, {
            ok: result.ok,
            from: result.from,
            to: result.to,
            resumed: result.resumed,
            run_at: result.runAt,
            tables: result.tables,
            bodies: result.bodies,
            leases_recovered: result.leasesRecovered,
            elapsed_ms: elapsedMs,
          });
        } else {
          const ends = `${result.from.location} (${result.from.dialect}) → ${result.to.location} (${result.to.dialect})`;
          const copied = result.tables.reduce((n, t) => n + t.copied, 0);
          const since = `the run of ${iso(result.runAt)}`;
          print(
            io,
            !result.resumed
              ? `copied ${ends} in ${formatDuration(elapsedMs)}`
              : copied > 0
                ? `resumed ${since}: copied the rest of ${ends} in ${formatDuration(elapsedMs)}`
                : `nothing left to copy of ${ends} (${since}); verified again in ${formatDuration(elapsedMs)}`,
          );
          print(
            io,
            table(
              ['TABLE', 'SOURCE', 'COPIED NOW', 'IN TARGET', 'MISSING', 'DIFFERENT'],
              result.tables.map((t) => [t.table, t.source, t.copied, t.found, t.missing, t.mismatched]),
            ),
          );
          print(io, `bodies: ${result.bodies.checked} sha256 recomputed from the target, ${result.bodies.mismatched} differ`);
          if (result.leasesRecovered > 0)
            print(
              io,
              `in flight: ${result.leasesRecovered} deliver${result.leasesRecovered === 1 ? 'y' : 'ies'} copied as lease-expired, due again`,
            );
          print(io, result.ok ? 'verify: ok' : 'verify: FAILED');
        }
        if (!result.ok) {
          for (const e of result.bodies.examples) printErr(io, `body differs: ${e}`);
          throw new ExitWith(ExitCode.checkFailed);
        }
      })
  );
}

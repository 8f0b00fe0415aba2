import { Command, CommanderError } from 'commander';
import { ExitCode, ExitWith, isAppError } from '../shared/errors.js';
import { storageErrorCode } from '../store/storage-error.js';
import { VERSION } from '../shared/version.js';
import { makeBackupCommand } from './commands/backup.js';
import { makeBucketCommand } from './commands/bucket.js';
import { makeHealthCommand } from './commands/health.js';
import { makeMigrateDataCommand } from './commands/migrate-data.js';
import { makePruneCommand } from './commands/prune.js';
import { makeReplayCommand } from './commands/replay.js';
import { makeReplaysCommand } from './commands/replays.js';
import { makeRequestsCommand } from './commands/requests.js';
import { makeScheduleCommand } from './commands/schedule.js';
import { makeServeCommand } from './commands/serve.js';
import { makeSimulateCommand } from './commands/simulate.js';
import { makeStatsCommand } from './commands/stats.js';
import { makeSettingsCommand } from './commands/settings.js';
import { makeWorkerCommand } from './commands/worker.js';
import { redactUrlsIn } from '../policy/redact.js';
import { escapeTerminal } from '../policy/terminal-text.js';
import { interruptOf, terminalSafe, type CliIo } from './io.js';
import { Interrupted, signalExitCode } from './interrupt.js';
import { integerArg } from './parsers.js';
import { checkRemote } from './context.js';

export function buildProgram(io: CliIo): Command {
  const program = new Command('hookbucket')
    .description('An inbound webhook bucket: store every request byte-exact, acknowledge in milliseconds.')
    .version(VERSION)
    .option(
      '--db <path|url>',
      'SQLite database file, or a postgres:// or postgresql:// URL (env HOOKBUCKET_DB, default data/hookbucket.db)',
    )
    .option('--db-pool <n>', 'connections at most in the PostgreSQL pool (env HOOKBUCKET_DB_POOL, default 10)', integerArg(1, 1000))
    .option(
      '--spool-dir <dir>',
      'folder for bodies spooled while they arrive and import copies (env HOOKBUCKET_SPOOL_DIR, default <db>-spool, data/spool for a URL)',
    )
    .option(
      '--api <url>',
      'run the command on a remote server through its admin API instead of a database here, e.g. http://127.0.0.1:8788 (env HOOKBUCKET_API; token from HOOKBUCKET_ADMIN_TOKEN); not with --db',
    )
    .addHelpText(
      'after',
      `
Examples:
  $ hookbucket serve
  $ hookbucket bucket create stripe --destination http://localhost:3000/hooks
  $ curl -X POST --data-binary @event.json http://localhost:8787/b/stripe
  $ hookbucket requests list stripe
  $ hookbucket requests show <id> --raw
  $ hookbucket health stripe --fail-on "success_rate < 0.99 || exhausted > 0"
  $ HOOKBUCKET_ADMIN_TOKEN=… hookbucket --api http://10.0.0.5:8788 requests list stripe

--api runs bucket, requests list|show|export, replay, replays, settings, stats and health against a server's
admin listener (docs/api.md "The CLI against a remote server"); serve, worker, prune, migrate-data,
backup and requests import need the database itself.

Exit codes: 0 ok, 1 runtime failure, 2 usage error, 3 check failed, 4 not found,
130 interrupted by Ctrl-C (SIGINT), 143 stopped by SIGTERM.`,
    );
  program.addCommand(makeServeCommand(io));
  program.addCommand(makeWorkerCommand(io));
  program.addCommand(makeBucketCommand(io));
  program.addCommand(makeRequestsCommand(io));
  program.addCommand(makeReplayCommand(io));
  program.addCommand(makeReplaysCommand(io));
  program.addCommand(makeStatsCommand(io));
  program.addCommand(makeHealthCommand(io));
  program.addCommand(makePruneCommand(io));
  program.addCommand(makeScheduleCommand(io));
  program.addCommand(makeSimulateCommand(io));
  program.addCommand(makeMigrateDataCommand(io));
  program.addCommand(makeBackupCommand(io));
  program.addCommand(makeSettingsCommand(io));
  applySettings(program, io);
  // --api with --db, and --api given to a command that needs the database: refused before it runs.
  program.hook('preAction', (_program, action) => checkRemote(action, io));
  return program;
}

/** Under every command that takes a duration or a size: how to write one (no silent units). */
export const UNITS_HELP = `
Durations take a unit: 500ms, 10s, 5m, 2h, 7d, or combined like 1m30s; a number without a unit is
refused (write 10s or 10ms), 0 needs none. Sizes take one too: 512KiB, 25MiB, 1GiB (binary), 512kb,
25mb (decimal), or bytes as 1048576B.`;

/** Commands made by factories do not inherit settings, so apply them to the whole tree. */
function applySettings(cmd: Command, io: CliIo): void {
  if (cmd.options.some((o) => /<(duration|size|interval)>/.test(o.flags))) cmd.addHelpText('after', UNITS_HELP);
  cmd
    .exitOverride()
    .showHelpAfterError('(add --help for usage and examples)')
    .configureOutput({
      // Commander echoes argv in its errors ("unknown option '…'"): the same guard as print.
      writeOut: (s) => io.stdout.write(terminalSafe(s)),
      writeErr: (s) => io.stderr.write(terminalSafe(s)),
      // Commander's own usage errors get the stable code our other errors carry: `error [usage]: …`.
      // They echo the refused argument, so a --destination with credentials is redacted here too.
      outputError: (s, write) => write(redactUrlsIn(s.replace(/^error: /, 'error [usage]: '))),
    });
  for (const sub of cmd.commands) applySettings(sub, io);
}

/** Runs the CLI and returns its exit code; never calls process.exit itself. */
export async function runCli(argv: string[], io: CliIo): Promise<number> {
  const program = buildProgram(io);
  const interrupt = interruptOf(io);
  try {
    await program.parseAsync(argv);
    // A command that stops on Ctrl-C (tail) returns normally; the exit code still says why it stopped.
    return interrupt.interrupted ? signalExitCode(interrupt.interrupted) : ExitCode.ok;
  } catch (e) {
    // Stopped by SIGINT or SIGTERM: whatever the unwinding threw (an abort, a closed stream) is no
    // error of its own; what to say was said as the signal arrived (interrupt.ts).
    if (interrupt.interrupted) return signalExitCode(interrupt.interrupted);
    if (e instanceof Interrupted) return e.exitCode;
    if (e instanceof CommanderError) {
      // Commander exits 1 on usage errors; ours is 2. Help and version are 0.
      return e.exitCode === 0 ? ExitCode.ok : ExitCode.usage;
    }
    if (e instanceof ExitWith) return e.exitCode;
    if (isAppError(e)) {
      // A message can echo a hostile bucket name, path or header: escaped in full (errorText).
      io.stderr.write(`error [${e.code}]: ${errorText(redactUrlsIn(e.message))}\n`);
      return e.exitCode;
    }
    const err = e instanceof Error ? e : new Error(String(e));
    const code = (err as { code?: unknown }).code;
    // SQLite's own errors (a lock held past the CLI's wait, a full disk) get their stable code.
    const storage = storageErrorCode(e);
    if (storage) {
      const hint = storage === 'store_busy' ? '; another connection held the write lock past the wait: try again' : '';
      io.stderr.write(
        `error [${storage}]: ${errorText(redactUrlsIn(`${err.message}${typeof code === 'string' ? ` (${code})` : ''}`))}${hint}\n`,
      );
      return ExitCode.failure;
    }
    // A driver error may echo the connection URL: its password never reaches the terminal.
    io.stderr.write(`error [internal]: ${errorText(redactUrlsIn(`${err.message}${typeof code === 'string' ? ` (${code})` : ''}`))}\n`);
    return ExitCode.failure;
  }
}

/**
 * An error message for the terminal: every control character escaped, `\` included. LF stays only
 * before an indented line (a message's own detail, such as health's expression with a caret under
 * it); any other LF shows as `\x0a`, so an echoed argument cannot forge a line of its own, such as a
 * second `error [...]`.
 */
export function errorText(message: string): string {
  return escapeTerminal(message, { newline: true }).replace(/\n(?! {2})/g, '\\x0a');
}

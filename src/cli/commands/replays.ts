import { Command } from 'commander';
import { formatDuration } from '../../config/units.js';
import { isSettled, pace, replayExitCode } from '../../replay/replay.js';
import { systemClock } from '../../shared/clock.js';
import { AppError, ExitCode, ExitWith } from '../../shared/errors.js';
import type { Replay, ReplayProgress, Store } from '../../store/store.js';
import { progressJson, replayJson } from '../../replay/replay-json.js';
import { withStore } from '../context.js';
import { durationMsArg } from '../drain-options.js';
import { redactDbUrl, redactUrl } from '../../policy/redact.js';
import { interruptOf, iso, print, printErr, printJson, table, type CliIo } from '../io.js';
import { sleepUnlessInterrupted } from '../interrupt.js';
import { bucketNameArg, limitArg } from '../parsers.js';
import { createProgress } from '../progress.js';

/** How often `--wait` reads the replay's counts. */
const POLL_MS = 250;

export { progressJson, replayJson };

function summary(p: ReplayProgress): string {
  const parts = [`${p.delivered} delivered`];
  if (p.failed) parts.push(`${p.failed} failed`);
  if (p.exhausted) parts.push(`${p.exhausted} exhausted`);
  if (p.superseded) parts.push(`${p.superseded} superseded by a later replay`);
  const remaining = p.total - p.settled;
  if (remaining) parts.push(`${remaining} remaining${p.held ? ` (${p.held} held: the bucket is paused)` : ''}`);
  return `${parts.join(', ')} of ${p.total}`;
}

/** A word as a POSIX shell reads it back: as it is when plain, else single-quoted. */
function shellWord(word: string): string {
  return /^[\w@%+=:,./-]+$/.test(word) ? word : `'${word.replace(/'/g, `'\\''`)}'`;
}

/**
 * The command that follows a replay again, with the --db or --api this command was given (so it
 * can be pasted as it is; a password in either shows redacted).
 */
export function followCommand(cmd: Command, id: string): string {
  const g = cmd.optsWithGlobals<{ db?: string; api?: string }>();
  const where =
    g.api !== undefined ? ` --api ${shellWord(redactUrl(g.api))}` : g.db !== undefined ? ` --db ${shellWord(redactDbUrl(g.db))}` : '';
  return `hookbucket${where} replays wait ${id}`;
}

/** Whether a worker beats in the workers table, or (a worker of an earlier version) holds the single-worker lease. */
async function anyWorkerAlive(store: Store, nowMs: number): Promise<boolean> {
  if ((await store.processes(nowMs)).some((p) => p.alive && p.roles.includes('worker'))) return true;
  return (await store.activeWorker(nowMs)) !== undefined;
}

/**
 * Follows a replay until every delivery has settled or `timeoutMs` passes, with a progress bar on
 * a TTY. Returns the exit code: 0 all delivered, 3 otherwise (README "Exit codes").
 *
 * Ctrl-C or SIGTERM stops only the waiting: the bar is taken down (cursor and line wrap back), a
 * note on stderr says that the replay keeps running and gives `follow`, the command that follows
 * it again, and the process exits 130 or 143 (interrupt.ts).
 */
export async function waitForReplay(
  io: CliIo,
  store: Store,
  replay: Replay,
  opts: { timeoutMs?: number; json?: boolean; follow: string },
): Promise<number> {
  const interrupt = interruptOf(io);
  const held = interrupt.hold();
  // Registered before the bar, so it runs after the bar is down (newest first): on a line of its own.
  const unregister = interrupt.onInterrupt(() =>
    printErr(
      io,
      `interrupted: stopped waiting, but replay ${replay.id} keeps running (the worker goes on delivering it); follow it again with: ${opts.follow}`,
    ),
  );
  try {
    return await follow(io, store, replay, opts, held.signal);
  } finally {
    unregister();
    held.release();
  }
}

async function follow(
  io: CliIo,
  store: Store,
  replay: Replay,
  opts: { timeoutMs?: number; json?: boolean },
  signal: AbortSignal,
): Promise<number> {
  const start = systemClock.now();
  const first = await store.replayProgress(replay.id);
  if (!isSettled(first) && !(await anyWorkerAlive(store, start))) {
    io.stderr.write(
      'warning: no drain worker is active on this database; start `hookbucket serve` or `hookbucket worker`, or this waits for nothing\n',
    );
  }
  const bar = createProgress(io);
  let p = first;
  let timedOut = false;
  let warnedHeld = false;
  try {
    while (!isSettled(p)) {
      const now = systemClock.now();
      if (opts.timeoutMs !== undefined && now - start >= opts.timeoutMs) {
        timedOut = true;
        break;
      }
      const { perSecond, etaMs } = pace(p, first.settled, start, now);
      const held = p.held > 0 ? `, ${p.held} held (bucket paused: hookbucket bucket resume ${replay.bucket})` : '';
      bar.update(
        p.settled,
        p.total,
        `${p.delivered} delivered, ${p.failed + p.exhausted} failed, ${p.total - p.settled} remaining${held} | ${perSecond.toFixed(1)}/s | ETA ${etaMs === null ? '?' : formatDuration(etaMs)}`,
      );
      if (p.held > 0 && !warnedHeld && !io.stderr.isTTY) {
        warnedHeld = true;
        io.stderr.write(
          `bucket ${replay.bucket} is paused: ${p.held} replay deliveries are held until hookbucket bucket resume ${replay.bucket}\n`,
        );
      }
      await sleepUnlessInterrupted(POLL_MS, signal);
      p = await store.replayProgress(replay.id);
    }
  } finally {
    bar.stop();
  }
  const code = replayExitCode(p, timedOut);
  if (opts.json) printJson(io, { ...replayJson(replay, p), timed_out: timedOut, settled: isSettled(p) });
  else print(io, `replay ${replay.id}: ${summary(p)}${timedOut ? ` (timed out after ${formatDuration(opts.timeoutMs!)})` : ''}`);
  return code;
}

/** `hookbucket replays list|wait`: replays as objects, separate from `replay <bucket>` (a bucket may be named `wait`). */
export function makeReplaysCommand(io: CliIo): Command {
  const replays = new Command('replays')
    .description('list replays and follow one to the end')
    .addHelpText('after', '\nExamples:\n  $ hookbucket replays list\n  $ hookbucket replays wait 019ae0c4-… --timeout 10m');

  replays.addCommand(
    new Command('list')
      .description('replays, newest first, with their progress')
      .option('--bucket <name>', 'only this bucket', bucketNameArg)
      .option('--limit <n>', 'how many (default 20)', limitArg)
      .option('--json', 'print JSON: { replays: [...] }')
      .addHelpText('after', '\nExamples:\n  $ hookbucket replays list\n  $ hookbucket replays list --bucket stripe --json')
      .action(async (opts: { bucket?: string; limit?: number; json?: boolean }, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const list = await store.listReplays({ limit: opts.limit ?? 20, ...(opts.bucket ? { bucket: opts.bucket } : {}) });
          const withProgress = await Promise.all(list.map(async (r) => ({ r, p: await store.replayProgress(r.id) })));
          if (opts.json) return printJson(io, { replays: withProgress.map(({ r, p }) => replayJson(r, p)) });
          if (list.length === 0) return print(io, 'no replays yet: hookbucket replay <bucket> --state exhausted,failed');
          print(
            io,
            table(
              ['ID', 'CREATED', 'BUCKET', 'TO', 'TOTAL', 'DELIVERED', 'FAILED', 'REMAINING'],
              withProgress.map(({ r, p }) => [
                r.id,
                iso(r.createdAt),
                r.bucket,
                r.destination === null ? '(bucket)' : redactUrl(r.destination),
                r.total,
                p.delivered,
                p.failed + p.exhausted,
                p.total - p.settled,
              ]),
            ),
          );
        }),
      ),
  );

  replays.addCommand(
    new Command('wait')
      .description('follow a replay until every delivery has settled; exit 0 all delivered, 3 otherwise or on timeout')
      .argument('<replay-id>', 'the id `replay` printed')
      .option('--timeout <duration>', 'give up waiting after this long (exit 3); default: wait until settled', durationMsArg)
      .option('--json', 'print the final counts as JSON')
      .addHelpText(
        'after',
        '\nExamples:\n  $ hookbucket replays wait 019ae0c4-…\n  $ hookbucket replays wait 019ae0c4-… --timeout 5m --json',
      )
      .action(async (id: string, opts: { timeout?: number; json?: boolean }, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const r = await store.getReplay(id);
          if (!r) throw new AppError('not_found', `replay ${id} not found`);
          const code = await waitForReplay(io, store, r, {
            ...(opts.timeout !== undefined ? { timeoutMs: opts.timeout } : {}),
            json: opts.json === true,
            follow: followCommand(cmd, r.id),
          });
          if (code !== ExitCode.ok) throw new ExitWith(code);
        }),
      ),
  );
  return replays;
}

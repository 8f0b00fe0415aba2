import { Command } from 'commander';
import { formatRate } from '../../policy/token-bucket.js';
import { confirmation, CONFIRM_ABOVE } from '../../replay/replay.js';
import { systemClock } from '../../shared/clock.js';
import { ExitCode, ExitWith } from '../../shared/errors.js';
import type { Rate } from '../../policy/token-bucket.js';
import { checkReplayScope, dryRunJson, selectReplay, startReplay } from '../../replay/select-replay.js';
import { withStore } from '../context.js';
import { isRemoteStore } from '../../remote/remote-store.js';
import { checkDestinationAllowed } from '../../options/destination-check.js';
import { durationMsArg, rateArg } from '../drain-options.js';
import { addFilterOptions, filterFromOptions, type FilterOptions } from '../filter-options.js';
import { redactUrl } from '../../policy/redact.js';
import { iso, print, printErr, printJson, table, terminalSafe, usage, type CliIo } from '../io.js';
import { targetText } from '../render.js';
import { bucketNameArg, urlArg } from '../parsers.js';
import { followCommand, replayJson, waitForReplay } from './replays.js';
import { ask, interactive } from '../confirm.js';

interface ReplayOpts extends FilterOptions {
  all?: boolean;
  to?: string;
  rate?: Rate;
  dryRun?: boolean;
  yes?: boolean;
  wait?: boolean;
  timeout?: number;
  json?: boolean;
}

export function makeReplayCommand(io: CliIo): Command {
  return addFilterOptions(
    new Command('replay')
      .description('replay a bucket after a fix: a new delivery generation for each selected request; earlier attempts are kept')
      .argument('<bucket>', 'bucket name', bucketNameArg),
  )
    .option('--all', 'every request of the bucket (the scope must be explicit: a bare replay is refused)')
    .option(
      '--to <url>',
      "deliver to this URL instead (staging, say); supersedes nothing and leaves the requests' state alone; the destinations setting may refuse it",
      urlArg,
    )
    .option('--rate <n/unit>', "pace this replay's deliveries, below the bucket's own rate (like 10/s)", rateArg)
    .option('--dry-run', 'print how many would replay and a sample; change nothing')
    .option('--yes', `do not ask before replaying more than ${CONFIRM_ABOVE} (required when not at a terminal)`)
    .option('--wait', 'follow the replay with a progress bar until every delivery has settled')
    .option('--timeout <duration>', 'with --wait: stop waiting after this long (exit 3)', durationMsArg)
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
Each selected request gets a new delivery whose generation is one more than its highest; its
attempt history starts fresh and earlier generations stay as they were. An earlier delivery still
pending or retrying is superseded at once; one in flight finishes its attempt first. Replay
deliveries obey the bucket's rate, concurrency and pause, and count toward its retry budget.

Exit codes: 0 replayed (with --wait: all delivered), 2 usage or more than ${CONFIRM_ABOVE} without
--yes when not at a terminal, 3 with --wait when some failed, were exhausted or the timeout passed,
4 unknown bucket or request id, 1 other errors.

Examples:
  $ hookbucket replay stripe --state exhausted,failed --dry-run
  $ hookbucket replay stripe --state exhausted,failed --yes --wait
  $ hookbucket replay stripe --since 2h --status 5xx --rate 5/s --yes
  $ hookbucket replay stripe --id 019ae0c4-… --to https://staging.example.com/hooks
  $ hookbucket replays wait <replay-id>`,
    )
    .action(async (bucketName: string, opts: ReplayOpts, cmd: Command) => {
      if (opts.timeout !== undefined && !opts.wait) throw usage('--timeout goes with --wait');
      if (opts.wait && opts.dryRun) throw usage('--dry-run changes nothing, so there is nothing to --wait for');
      const filter = filterFromOptions(opts, systemClock.now());
      checkReplayScope({ filter, all: opts.all === true });
      await withStore(cmd, io, async (store) => {
        // Through --api the server checks against its own setting and DNS.
        if (!isRemoteStore(store)) await checkDestinationAllowed(store, opts.to);
        const selection = await selectReplay(store, { bucket: bucketName, filter, all: opts.all === true, to: opts.to ?? null });
        const { ids, sample } = selection;
        const to = selection.destination;
        // For people: credentials in the URL redacted (replay takes no --reveal; --json keeps it whole).
        const toText = redactUrl(to);
        if (opts.dryRun) {
          if (opts.json) return printJson(io, dryRunJson(selection));
          print(
            io,
            `would replay ${ids.length} request(s) of ${bucketName} to ${toText}${opts.rate ? ` at ${formatRate(opts.rate)}` : ''}; nothing changed (dry run)`,
          );
          if (sample.length > 0) {
            print(
              io,
              table(
                ['ID', 'RECEIVED', 'METHOD', 'PATH', 'STATE'],
                sample.map((r) => [r.id, iso(r.receivedAt), r.method, targetText(r.path, r.query, false), r.state]),
              ),
            );
            if (ids.length > sample.length) print(io, `… and ${ids.length - sample.length} more`);
          }
          return;
        }
        if (ids.length === 0) {
          if (opts.json) return printJson(io, { replay: null, count: 0 });
          return print(io, `nothing to replay: no request of ${bucketName} matches`);
        }
        const confirm = confirmation(ids.length, opts.yes === true, interactive(io));
        if (confirm === 'refuse') {
          throw usage(`would replay ${ids.length} requests (more than ${CONFIRM_ABOVE}); add --yes to confirm, or --dry-run to look first`);
        }
        if (
          confirm === 'ask' &&
          !(await ask(io, `replay ${ids.length} requests of ${bucketName} to ${terminalSafe(toText)}? [y/N] `, 'not replayed'))
        ) {
          io.stderr.write('not replayed\n');
          throw new ExitWith(ExitCode.failure);
        }
        const replay = await startReplay(store, selection, { rate: opts.rate ?? null, nowMs: systemClock.now() });
        if (opts.wait) {
          if (!opts.json) printErr(io, `replay ${replay.id}: ${replay.total} request(s) of ${bucketName} to ${toText}`);
          const code = await waitForReplay(io, store, replay, {
            ...(opts.timeout !== undefined ? { timeoutMs: opts.timeout } : {}),
            json: opts.json === true,
            follow: followCommand(cmd, replay.id),
          });
          if (code !== ExitCode.ok) throw new ExitWith(code);
          return;
        }
        if (opts.json) return printJson(io, replayJson(replay));
        print(io, replay.id);
        printErr(
          io,
          `replayed ${replay.total} request(s) of ${bucketName} to ${toText}${replay.superseded ? `; ${replay.superseded} earlier deliveries superseded` : ''}; follow with: ${followCommand(cmd, replay.id)}`,
        );
      });
    });
}

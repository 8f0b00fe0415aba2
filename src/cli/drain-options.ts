/**
 * The delivery-policy flags of `schedule`, `simulate` and `bucket create|update`, wired into
 * commander; their parsers and the settings they make live in src/options/drain-settings.ts.
 */
import { Option, type Command } from 'commander';
import { formatDuration } from '../config/units.js';
import { DEFAULT_RETRY_ON, formatRetryOn, RETRY_ON_WORDS } from '../policy/classify.js';
import { DEFAULT_RETRY_BUDGET } from '../policy/retry-budget.js';
import { DEFAULT_SCHEDULE, JITTERS } from '../policy/schedule.js';
import { DEFAULT_BURST } from '../policy/token-bucket.js';
import { DEFAULT_CONCURRENCY, DEFAULT_TIMEOUT_MS } from '../store/bucket-defaults.js';
import {
  burstArg,
  capArg,
  concurrencyArg,
  durationMsArg,
  fractionArg,
  maxAttemptsArg,
  MAX_CONCURRENCY,
  multiplierArg,
  positiveDurationMsArg,
  rateArg,
  retryFloorArg,
  retryOnArg,
  timeoutArg,
  type ForwardHeaderEdit,
} from '../options/drain-settings.js';
import { forwardHeaderArg } from './parsers.js';

export * from '../options/drain-settings.js';

const d = DEFAULT_SCHEDULE;

export function addScheduleOptions(cmd: Command): Command {
  return cmd
    .option('--base <duration>', `gap before the first retry (default ${formatDuration(d.baseMs)})`, positiveDurationMsArg)
    .option('--multiplier <n>', `each gap is the previous one times this; 1 gives fixed intervals (default ${d.multiplier})`, multiplierArg)
    .option('--cap <duration>', `longest gap, or none (default ${formatDuration(d.capMs)})`, capArg)
    .addOption(
      new Option('--max-attempts <n>', `give up after this many attempts (default ${d.maxAttempts})`)
        .argParser(maxAttemptsArg)
        .conflicts('giveUp'),
    )
    .addOption(
      new Option(
        '--give-up <duration>',
        'give up instead when the next attempt would fall this long after the first (paused time not counted)',
      )
        .argParser(durationMsArg)
        .conflicts('maxAttempts'),
    )
    .addOption(new Option('--jitter <kind>', `full: gap × [0, 1); upper: gap × [1/2, 1); none (default ${d.jitter})`).choices(JITTERS));
}

export function addBudgetAndRateOptions(cmd: Command): Command {
  return cmd
    .option(
      '--retry-budget <fraction>',
      `retries allowed per first attempt over a sliding 60 s window (default ${DEFAULT_RETRY_BUDGET.fraction})`,
      fractionArg,
    )
    .option(
      '--retry-floor <n>',
      `retries per second allowed however quiet the bucket (default ${DEFAULT_RETRY_BUDGET.floorPerSecond})`,
      retryFloorArg,
    )
    .option('--rate <n/unit>', 'bound every attempt to this rate, like 200/s, 600/m or 30/h (default: no rate cap)', rateArg)
    .option('--burst <n>', `attempts allowed back to back under --rate (default ${DEFAULT_BURST})`, burstArg);
}

function collectForwardHeader(value: string, previous: ForwardHeaderEdit | undefined): ForwardHeaderEdit {
  return { clear: previous?.clear ?? false, set: [...(previous?.set ?? []), forwardHeaderArg(value)] };
}

/** The drain settings of `bucket create` and (with forUpdate, the --no-* forms) `bucket update`. */
export function addDeliveryOptions(cmd: Command, forUpdate: boolean): Command {
  cmd
    .option(
      '--rate <n/unit>',
      'cap every attempt (first tries, retries, replays) at this rate, like 200/s, 600/m or 30/h (default: no rate cap)',
      rateArg,
    )
    .option('--burst <n>', `attempts allowed back to back under the rate, 1 to 100000 (default ${DEFAULT_BURST})`, burstArg);
  if (forUpdate) cmd.option('--no-rate', `remove the rate cap (burst goes back to ${DEFAULT_BURST})`);
  cmd
    .option('--concurrency <n>', `attempts in flight at once, 1 to ${MAX_CONCURRENCY} (default ${DEFAULT_CONCURRENCY})`, concurrencyArg)
    .option(
      '--timeout <duration>',
      `time limit of one attempt, connect to last response byte, at most 10m (default ${formatDuration(DEFAULT_TIMEOUT_MS)})`,
      timeoutArg,
    );
  addScheduleOptions(cmd);
  cmd
    .option(
      '--retry-on <list>',
      `outcomes retried, a comma-separated list of ${RETRY_ON_WORDS}; it replaces the whole default set (${formatRetryOn(DEFAULT_RETRY_ON)}), which the word default brings back`,
      retryOnArg,
    )
    .option(
      '--retry-budget <fraction>',
      `retries allowed per first attempt over a sliding 60 s window, 0 to 10 (default ${DEFAULT_RETRY_BUDGET.fraction})`,
      fractionArg,
    )
    .option(
      '--retry-floor <n>',
      `retries per second allowed however quiet the bucket, or a rate like 30/m; 0 turns it off (default ${DEFAULT_RETRY_BUDGET.floorPerSecond})`,
      retryFloorArg,
    )
    .option('--forward-path', 'append the sub-path a request arrived on (after /b/<name>) to the destination URL (default)')
    .option('--no-forward-path', 'forward every request to the destination URL as it is')
    .option(
      '--forward-raw-path',
      "append the sub-path as stored, dot-segments (../, %2e%2e/) and empty segments included; unsafe behind a proxy or server that normalises paths (default: they are removed, so the path stays under the destination's)",
    );
  if (forUpdate) cmd.option('--no-forward-raw-path', 'remove dot-segments and empty segments from the sub-path again (the default)');
  cmd.option(
    '--forward-header <header>',
    forUpdate
      ? 'add "Name: value" to every forwarded request, replacing the bucket\'s headers of that name; repeatable'
      : 'add "Name: value" to every forwarded request, after the stored headers; repeatable',
    collectForwardHeader,
  );
  if (forUpdate) {
    // Negated options share the attribute of their positive form, so a plain --no-forward-header
    // would overwrite headers given before it. A preset makes commander call the parser instead,
    // with the value so far: the result does not depend on the order of the two flags.
    cmd.addOption(
      new Option('--no-forward-header', 'remove every forwarded header; with --forward-header, the headers given become the whole list')
        .preset(true)
        .argParser((_: unknown, previous: ForwardHeaderEdit | undefined): ForwardHeaderEdit => ({ clear: true, set: previous?.set ?? [] })),
    );
  }
  return cmd;
}

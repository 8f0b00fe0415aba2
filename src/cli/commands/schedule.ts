import { Command } from 'commander';
import { formatDuration } from '../../config/units.js';
import { scheduleSettingsJson } from '../../json/bucket-json.js';
import {
  expectedGiveUp,
  JITTERS,
  paperSchedule,
  scheduleWarnings,
  type ExpectedGiveUp,
  type Jitter,
  type PaperSchedule,
  type Schedule,
} from '../../policy/schedule.js';
import { addScheduleOptions, describeSchedule, scheduleFromOptions, type ScheduleOpts } from '../drain-options.js';
import { print, printJson, table, type CliIo } from '../io.js';

const JITTER_RANGE: Record<Jitter, string> = {
  full: 'each gap drawn from [0, gap)',
  upper: 'each gap drawn from [gap/2, gap)',
  none: 'no jitter',
};

function elapsed(ms: number): string {
  return ms === 0 ? '0s' : formatDuration(ms);
}

/** Stable JSON shape of `schedule --json`; durations in ms, null for "none". */
export function scheduleJson(s: Schedule, paper: PaperSchedule, expected: Record<Jitter, ExpectedGiveUp>, warnings: string[]) {
  const chosen = expected[s.jitter];
  return {
    ...scheduleSettingsJson(s),
    attempts: paper.rows.map((r) => ({ attempt: r.attempt, gap_ms: r.gapMs, elapsed_ms: r.elapsedMs })),
    give_up_on_paper_ms: paper.giveUpMs,
    expected_give_up_ms: chosen.ms,
    expected_attempts: chosen.attempts,
    expected_method: chosen.method,
    expected_give_up_ms_by_jitter: Object.fromEntries(JITTERS.map((j) => [j, expected[j].ms])),
    warnings,
  };
}

function text(s: Schedule, paper: PaperSchedule, expected: ExpectedGiveUp): string {
  const last = paper.rows[paper.rows.length - 1]!;
  const why =
    s.giveUpMs !== undefined
      ? `attempt ${last.attempt + 1} would fall past --give-up ${formatDuration(s.giveUpMs)}`
      : `when attempt ${last.attempt} fails`;
  const about =
    expected.method === 'exact'
      ? JITTER_RANGE[s.jitter]
      : `${JITTER_RANGE[s.jitter]}, about ${expected.attempts.toFixed(1)} attempts (mean of seeded runs)`;
  return [
    `schedule: ${describeSchedule(s)}`,
    '',
    table(
      ['ATTEMPT', 'GAP BEFORE', 'ELAPSED'],
      paper.rows.map((r) => [r.attempt, r.gapMs === null ? null : formatDuration(r.gapMs), elapsed(r.elapsedMs)]),
    ),
    '',
    `${'give up on paper'.padEnd(18)}${elapsed(paper.giveUpMs)} after the first attempt, ${why}`,
    `${`expected (${s.jitter})`.padEnd(18)}${elapsed(expected.ms)}, ${about}`,
    '(elapsed counts from the first attempt; time paused is not counted; a Retry-After can stretch a gap up to the cap)',
  ].join('\n');
}

export function makeScheduleCommand(io: CliIo): Command {
  return addScheduleOptions(new Command('schedule'))
    .description('print the retry schedule a bucket would follow: each attempt, its gap, and when it gives up')
    .option('--json', 'print JSON (durations in ms)')
    .addHelpText(
      'after',
      `
The gap before retry k is min(cap, base × multiplier^(k-1)); jitter then draws it from [0, gap)
(full) or [gap/2, gap) (upper). The table is "on paper": no jitter, every attempt failing at once.

Examples:
  $ hookbucket schedule
  $ hookbucket schedule --base 1m --multiplier 2 --cap 1h --give-up 48h
  $ hookbucket schedule --multiplier 1 --base 5m --max-attempts 12 --jitter none
  $ hookbucket schedule --jitter full --json`,
    )
    .action((opts: ScheduleOpts & { json?: boolean }) => {
      const s = scheduleFromOptions(opts);
      const paper = paperSchedule(s);
      const expected = Object.fromEntries(JITTERS.map((j) => [j, expectedGiveUp(s, j)])) as Record<Jitter, ExpectedGiveUp>;
      const warnings = scheduleWarnings(s, paper);
      if (opts.json) return printJson(io, scheduleJson(s, paper, expected, warnings));
      print(io, text(s, paper, expected[s.jitter]));
      for (const w of warnings) io.stderr.write(`warning: ${w}\n`);
    });
}

import type { Command } from 'commander';
import {
  parseHeaderMatch,
  parseIds,
  parseMethods,
  parsePathGlob,
  parseSearch,
  parseStates,
  parseStatus,
  parseTimeBound,
  REQUEST_STATES,
  VERDICT_RESULTS,
  parseVerified,
} from '../options/request-filter.js';

/** The parsing and meaning of the filter flags live in src/options/request-filter.ts (shared with the admin API). */
export * from '../options/request-filter.js';

/** Repeated flags and comma lists both add to what came before. */
function concat<T>(parse: (value: string) => T[]): (value: string, previous: T[] | undefined) => T[] {
  return (value, previous) => [...(previous ?? []), ...parse(value)];
}

/** Adds the filter flags to a command (`requests list`, `requests export`, `replay`). */
export function addFilterOptions(cmd: Command): Command {
  return cmd
    .option('--state <states>', `the request's state: ${REQUEST_STATES.join('|')} (comma list, repeatable)`, concat(parseStates))
    .option('--since <when>', 'received at or after: a duration before now (30m, 6h, 7d) or an ISO time', parseTimeBound)
    .option('--until <when>', 'received before: a duration before now or an ISO time', parseTimeBound)
    .option('--method <methods>', 'HTTP method (comma list, repeatable)', concat(parseMethods))
    .option(
      '--path <glob>',
      'raw sub-path after /b/<bucket> ("/" when none): * within a segment, ** across, ? one character',
      parsePathGlob,
    )
    .option(
      '--header <name=value>',
      'a stored header with this name (any case) and exactly this value (repeatable: all must match)',
      concat(parseHeaderMatch),
    )
    .option('--search <text>', 'bodies containing this text (its UTF-8 bytes; case-sensitive; scans bodies)', parseSearch)
    .option('--status <code|class>', "the latest generation's last response status: a code (503) or a class (5xx)", parseStatus)
    .option('--id <ids>', 'these request ids (comma list, repeatable)', concat(parseIds))
    .option(
      '--verified <results>',
      `the sender verdict: ${VERDICT_RESULTS.join('|')} (comma list, repeatable; unverified: imported into a verifying bucket)`,
      concat(parseVerified),
    );
}

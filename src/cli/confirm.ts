/**
 * The confirmation destructive commands share (replay, bucket delete): above CONFIRM_ABOVE items,
 * a person at a terminal is asked; anything else (piped, cron, --json) needs --yes
 * (replay/replay.ts holds the pure rule).
 */
import { createInterface } from 'node:readline/promises';
import { confirmation, type Confirmation } from '../replay/replay.js';
import type { CliIo } from './io.js';

export { CONFIRM_ABOVE } from '../replay/replay.js';

/** Whether a prompt can be shown: stdin and stderr are both terminals. */
export function interactive(io: CliIo): boolean {
  return io.stdin?.isTTY === true && io.stderr.isTTY === true;
}

/** What to do about `count` items: not_needed, ask (a terminal) or refuse (exit 2 unless --yes). */
export function confirmationFor(io: CliIo, count: number, options: { yes: boolean; json?: boolean }): Confirmation {
  return confirmation(count, options.yes, options.json !== true && interactive(io));
}

/** Asks on stderr, reads a line from stdin: true for y or yes (any case), false otherwise. */
export async function ask(io: CliIo, question: string): Promise<boolean> {
  const rl = createInterface({ input: io.stdin!, output: io.stderr });
  try {
    return /^y(es)?$/i.test((await rl.question(question)).trim());
  } finally {
    rl.close();
  }
}

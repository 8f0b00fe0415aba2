/**
 * The confirmation destructive commands share (replay, bucket delete): above CONFIRM_ABOVE items,
 * a person at a terminal is asked; anything else (piped, cron, --json) needs --yes
 * (replay/replay.ts holds the pure rule).
 */
import { createInterface } from 'node:readline/promises';
import { confirmation, type Confirmation } from '../replay/replay.js';
import { Interrupted } from './interrupt.js';
import { interruptOf, type CliIo } from './io.js';

export { CONFIRM_ABOVE } from '../replay/replay.js';

/** Whether a prompt can be shown: stdin and stderr are both terminals. */
export function interactive(io: CliIo): boolean {
  return io.stdin?.isTTY === true && io.stderr.isTTY === true;
}

/** What to do about `count` items: not_needed, ask (a terminal) or refuse (exit 2 unless --yes). */
export function confirmationFor(io: CliIo, count: number, options: { yes: boolean; json?: boolean }): Confirmation {
  return confirmation(count, options.yes, options.json !== true && interactive(io));
}

/**
 * Asks on stderr, reads a line from stdin: true for y or yes (any case), false otherwise. Ctrl-C
 * there (read as a key while readline has the terminal in raw mode) or a SIGTERM answers nothing:
 * the terminal mode is put back, `refused` ("not replayed", "not deleted") is printed, and the
 * command exits 130 or 143 (interrupt.ts).
 */
export async function ask(io: CliIo, question: string, refused: string): Promise<boolean> {
  const held = interruptOf(io).hold();
  const key = new AbortController();
  const signal = AbortSignal.any([held.signal, key.signal]);
  const rl = createInterface({ input: io.stdin!, output: io.stderr });
  rl.on('SIGINT', () => key.abort(new Interrupted('SIGINT')));
  try {
    return /^y(es)?$/i.test((await rl.question(question, { signal })).trim());
  } catch (e) {
    if (!signal.aborted) throw e;
    io.stderr.write(`\n${refused}\n`);
    throw signal.reason;
  } finally {
    rl.close();
    held.release();
  }
}

import { escapeJsonText, escapeTerminal } from '../policy/terminal-text.js';
import { AppError } from '../shared/errors.js';
import { NO_INTERRUPT, type Interrupt } from './interrupt.js';

/** What a command may touch of the outside world; bin.ts passes the real process streams. */
export interface CliIo {
  stdout: NodeJS.WritableStream & { isTTY?: boolean };
  stderr: NodeJS.WritableStream & { isTTY?: boolean };
  /** For confirmations; a prompt is only shown when it is a TTY. */
  stdin?: NodeJS.ReadableStream & { isTTY?: boolean };
  env: Readonly<Record<string, string | undefined>>;
  dotenv: Readonly<Record<string, string | undefined>>;
  /** Resolves when SIGINT/SIGTERM arrives (for long-running commands). */
  waitForSignal: () => Promise<string>;
  /**
   * Ctrl-C and SIGTERM for commands with a progress bar, a temporary file or a replay to follow
   * (interrupt.ts): restore and remove, then exit 130/143. Absent in in-process tests: use interruptOf.
   */
  interrupt?: Interrupt;
}

/** The command's interrupt, or one that never fires. */
export function interruptOf(io: CliIo): Interrupt {
  return io.interrupt ?? NO_INTERRUPT;
}

/**
 * The last guard before a terminal: whatever a command composed, no control, bidi or invisible
 * character leaves raw. Values from requests are escaped in full (backslash too) where they are
 * formatted (render.ts, table()); this pass leaves `\` alone so it does not garble those escapes.
 */
export function terminalSafe(text: string): string {
  return escapeTerminal(text, { newline: true, tab: true, backslash: false });
}

export function print(io: CliIo, text = ''): void {
  const safe = terminalSafe(text);
  io.stdout.write(safe.endsWith('\n') ? safe : `${safe}\n`);
}

/** A line for stderr (warnings, notes, errors), under the same guard as print. */
export function printErr(io: CliIo, text: string): void {
  const safe = terminalSafe(text);
  io.stderr.write(safe.endsWith('\n') ? safe : `${safe}\n`);
}

/**
 * JSON for machines, the one writer every `--json` uses: JSON.stringify, then DEL, C1, bidi and
 * invisible characters as `\uXXXX` (JSON.stringify leaves them raw); it parses back identical.
 */
export function jsonText(value: unknown, indent?: number): string {
  return escapeJsonText(JSON.stringify(value, null, indent));
}

export function printJson(io: CliIo, value: unknown): void {
  io.stdout.write(`${jsonText(value, 2)}\n`);
}

/** One NDJSON line (tail --json). */
export function printJsonLine(io: CliIo, value: unknown): void {
  io.stdout.write(`${jsonText(value)}\n`);
}

export { iso } from '../json/iso.js';

/** Left-aligned columns for people; `--json` is for machines. */
export function table(headers: string[], rows: Array<Array<string | number | null>>): string {
  // Escaped before measuring, so a hostile cell neither moves the terminal's cursor nor the columns.
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === null ? '-' : escapeTerminal(String(c)))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) =>
      r
        .map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!)))
        .join('  ')
        .trimEnd(),
    )
    .join('\n');
}

export function usage(message: string): AppError {
  return new AppError('usage', message);
}

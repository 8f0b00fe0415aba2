import { AppError } from '../shared/errors.js';

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
}

export function print(io: CliIo, text = ''): void {
  io.stdout.write(text.endsWith('\n') ? text : `${text}\n`);
}

export function printJson(io: CliIo, value: unknown): void {
  io.stdout.write(`${JSON.stringify(value, null, 2)}\n`);
}

export function iso(ms: number | null): string | null {
  return ms === null ? null : new Date(ms).toISOString();
}

/** Left-aligned columns for people; `--json` is for machines. */
export function table(headers: string[], rows: Array<Array<string | number | null>>): string {
  const cells = [headers, ...rows.map((r) => r.map((c) => (c === null ? '-' : String(c))))];
  const widths = headers.map((_, i) => Math.max(...cells.map((r) => (r[i] ?? '').length)));
  return cells
    .map((r) => r.map((c, i) => (i === r.length - 1 ? c : c.padEnd(widths[i]!))).join('  ').trimEnd())
    .join('\n');
}

export function usage(message: string): AppError {
  return new AppError('usage', message);
}

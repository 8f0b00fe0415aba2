/**
 * What the benchmarks share outside their measurements: option parsing, number formats, aligned
 * tables and the common lines of their reports, progress on stderr, and the way each script runs
 * when executed (and only then, so a test can import its pure parts).
 */
import { pathToFileURL } from 'node:url';
import { inspect, parseArgs, type ParseArgsConfig } from 'node:util';
import type { MachineInfo } from './ingest.js';

/** The flags in argv that `options` declares (long flags, no positionals); an unknown one throws. */
export function parseFlags<O extends NonNullable<ParseArgsConfig['options']>>(argv: string[], options: O) {
  return parseArgs({ args: argv, options, strict: true }).values;
}

/**
 * The value of an integer option from `min` to `max`; `fallback` when absent or empty. Throws with
 * the option's `name` on anything else.
 */
export function intOption(name: string, raw: string | undefined, fallback: number, min: number, max: number): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isInteger(n) || n < min || n > max)
    throw new Error(`${name} must be an integer from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  return n;
}

/** As intOption, for a number that may have decimals unless `integer`. */
export function numberOption(name: string, raw: string | undefined, fallback: number, min: number, max: number, integer: boolean): number {
  if (raw === undefined || raw === '') return fallback;
  const n = Number(raw);
  if (!Number.isFinite(n) || n < min || n > max || (integer && !Number.isInteger(n)))
    throw new Error(`${name} must be a number from ${min} to ${max}, got ${JSON.stringify(raw)}`);
  return n;
}

/** The options `parse` returns, or undefined once why it threw and the `usage` line are on stderr (the bench then exits 2). */
export function optionsOrUsage<T>(parse: () => T, usage: string): T | undefined {
  try {
    return parse();
  } catch (e) {
    process.stderr.write(`${e instanceof Error ? e.message : String(e)}\nusage: ${usage}\n`);
    return undefined;
  }
}

/** A line of progress on stderr, away from the report (and the JSON on stdout). */
export const progress = (msg: string) => process.stderr.write(`${msg}\n`);

/**
 * A signal that SIGINT aborts, after a note on stderr, so a bench stops its current run and cleans
 * up; dispose() takes the handler off again.
 */
export function abortOnSigint(): { signal: AbortSignal; dispose(): void } {
  const aborter = new AbortController();
  const onSigint = () => {
    progress('SIGINT: stopping the current run and cleaning up');
    aborter.abort();
  };
  process.once('SIGINT', onSigint);
  return { signal: aborter.signal, dispose: () => process.off('SIGINT', onSigint) };
}

/** `n` with `digits` decimals; '-' for NaN or an infinity (a figure with nothing to measure). */
export const fixed = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : '-');

/** `n` rounded, with thousands separators; '-' for NaN or an infinity. */
export const thousands = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-');

/** a / b with 2 decimals; '-' when b is not above 0 or the quotient is not finite. */
export const ratio = (a: number, b: number) => (b > 0 && Number.isFinite(a) ? fixed(a / b, 2) : '-');

/** The middle value (the mean of the two middle ones for an even count); NaN for none. */
export function median(values: readonly number[]): number {
  const s = [...values].sort((a, b) => a - b);
  if (s.length === 0) return NaN;
  const mid = s.length >> 1;
  return s.length % 2 === 1 ? s[mid]! : (s[mid - 1]! + s[mid]!) / 2;
}

/** Lines of a table: the first `leftColumns` columns left-aligned, the rest right-aligned. */
export function table(header: string[], rows: string[][], leftColumns: number): string[] {
  const widths = header.map((h, i) => Math.max(h.length, ...rows.map((r) => r[i]?.length ?? 0)));
  const fmt = (r: string[]) =>
    r
      .map((cell, i) => (i < leftColumns ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0)))
      .join('  ')
      .trimEnd();
  return [fmt(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(fmt)];
}

/** The system's 1/5/15-minute load averages before and after a bench. */
export interface LoadAverages {
  before: number[];
  after: number[];
}

/** The report's machine line, and its load line for a bench that also shows each run's 1-min load. */
export function machineLines(machine: MachineInfo, load: LoadAverages): string[] {
  const avg = (l: number[]) => l.map((x) => x.toFixed(2)).join(' ');
  return [
    `machine   ${machine.cpuCount} x ${machine.cpuModel}, ${machine.totalMemGiB} GiB RAM, ${machine.platform}, node ${machine.node}`,
    `load      1/5/15-min load average: ${avg(load.before)} before, ${avg(load.after)} after; 1-min at the end of each run in the table`,
  ];
}

/** The report's closing list of what went wrong, after a blank line and `heading`; nothing when nothing did. */
export function problemLines(problems: readonly string[], heading = 'ERRORS: the run broke, so its figures are suspect:'): string[] {
  return problems.length === 0 ? [] : ['', heading, ...problems.map((x) => `  - ${x}`)];
}

/**
 * Writes the report, and with `json` the JSON of `data` after it: stdout then holds only the JSON,
 * and the report goes to stderr. Returns the exit code, 1 when the run had problems.
 */
export function writeReport(json: boolean, text: string, data: object, problems: readonly string[]): number {
  (json ? process.stderr : process.stdout).write(text);
  if (json) process.stdout.write(`${JSON.stringify(data, null, 2)}\n`);
  return problems.length > 0 ? 1 : 0;
}

/**
 * Writes why a run failed, and the problems found before it, to stderr; returns the exit code 1.
 * Not only Errors: a worker thread that fails to start rejects with whatever it threw.
 */
export function benchFailed(e: unknown, problems: readonly string[]): 1 {
  process.stderr.write(`bench failed: ${e instanceof Error ? (e.stack ?? e.message) : inspect(e)}\n`);
  for (const p of problems) process.stderr.write(`  - ${p}\n`);
  return 1;
}

/**
 * Runs `main` when the script of `moduleUrl` is the one node was started with, and sets its exit
 * code. `exitGraceMs`: whatever a failed run left behind (a pool, a writer thread that never got
 * its close) must not keep the bench alive once the report is out, so it exits that long after.
 */
export async function runIfMain(moduleUrl: string, main: () => Promise<number>, exitGraceMs?: number): Promise<void> {
  if (process.argv[1] === undefined || moduleUrl !== pathToFileURL(process.argv[1]).href) return;
  process.exitCode = await main();
  if (exitGraceMs === undefined) return;
  setTimeout(() => {
    process.stderr.write(`still running ${exitGraceMs} ms after the report: exiting\n`);
    process.exit();
  }, exitGraceMs).unref();
}

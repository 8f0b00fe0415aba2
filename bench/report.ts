/**
 * What the benchmarks share outside their measurements: number formats and aligned tables for
 * their reports, and the way each script runs when executed (and only then, so a test can import
 * its pure parts).
 */
import { pathToFileURL } from 'node:url';
import { inspect } from 'node:util';

/** `n` with `digits` decimals; '-' for NaN or an infinity (a figure with nothing to measure). */
export const fixed = (n: number, digits: number) => (Number.isFinite(n) ? n.toFixed(digits) : '-');

/** `n` rounded, with thousands separators; '-' for NaN or an infinity. */
export const thousands = (n: number) => (Number.isFinite(n) ? Math.round(n).toLocaleString('en-US') : '-');

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
  const fmt = (r: string[]) => r.map((cell, i) => (i < leftColumns ? cell.padEnd(widths[i] ?? 0) : cell.padStart(widths[i] ?? 0))).join('  ').trimEnd();
  return [fmt(header), widths.map((w) => '-'.repeat(w)).join('  '), ...rows.map(fmt)];
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

/**
 * Parsers and formatters for the units people type: durations (`30s`, `1m30s`, `2h`), sizes
 * (`25MiB`, `1gb`) and status codes. Pure: no I/O, no clock. Each parser returns `undefined` on
 * bad input so that callers choose the error (CLI usage error, config error).
 *
 * No silent units: a number without a unit (`10`) is refused, since `--timeout 10` used to mean
 * 10 ms where people read 10 s. A bare `0` needs no unit. Environment variables still take a bare
 * number for one release (read as ms or bytes, with a warning: src/config/config.ts); the admin
 * API's JSON numbers are ms and bytes as documented (src/api/api-schemas.ts).
 */

/** A number without a unit, other than zero: `10`, `1.5`, ` 60000 `. */
export function isBareNumber(text: string): boolean {
  return /^\s*\d+(?:\.\d+)?\s*$/.test(text) && Number(text) !== 0;
}

/** What to write instead of a bare number: `write 10s or 10ms`, `write 25MiB or 25B`. */
export function unitHint(text: string, kind: 'duration' | 'size'): string {
  const n = text.trim();
  return kind === 'duration' ? `write ${n}s or ${n}ms` : `write ${n}B (bytes), ${n}KiB or ${n}MiB`;
}

/** A command-line refusal for a bare number: `10 has no unit: write 10s or 10ms`. */
export function noUnitMessage(text: string, kind: 'duration' | 'size'): string {
  return `${text.trim()} has no unit: ${unitHint(text, kind)}`;
}

const durationUnitMs: Record<string, number> = {
  ms: 1,
  s: 1000,
  m: 60_000,
  h: 3_600_000,
  d: 86_400_000,
  w: 604_800_000,
};

/**
 * `1h30m`, `90s`, `250ms`, `7d`, or `0`. A bare number is refused (undefined) unless `bare` is
 * `'ms'`, the reading kept for environment variables during their warning release.
 */
export function parseDuration(text: string, bare: 'refuse' | 'ms' = 'refuse'): number | undefined {
  const s = text.trim().toLowerCase();
  if (/^\d+$/.test(s)) return Number(s) === 0 || bare === 'ms' ? Number(s) : undefined;
  const re = /(\d+(?:\.\d+)?)(ms|s|m|h|d|w)/gy;
  let total = 0;
  let matched = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(s)) !== null) {
    total += Number(m[1]) * durationUnitMs[m[2]!]!;
    matched = re.lastIndex;
  }
  if (matched === 0 || matched !== s.length) return undefined;
  return Math.round(total);
}

/** Lives in shared/ so that pure policy (schedule.ts) can print durations without importing config. */
export { formatDuration } from '../shared/format-duration.js';

const sizeUnit: Record<string, number> = {
  b: 1,
  k: 1000,
  kb: 1000,
  kib: 1024,
  m: 1000 ** 2,
  mb: 1000 ** 2,
  mib: 1024 ** 2,
  g: 1000 ** 3,
  gb: 1000 ** 3,
  gib: 1024 ** 3,
};

/**
 * `25MiB`, `1GiB`, `512kb`, `1048576B`, or `0`; decimal (kB) and binary (KiB) units both accepted.
 * A bare number is refused (undefined) unless `bare` is `'bytes'` (environment variables, for now).
 */
export function parseSize(text: string, bare: 'refuse' | 'bytes' = 'refuse'): number | undefined {
  const m = /^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$/i.exec(text);
  if (!m) return undefined;
  const unit = (m[2] ?? '').toLowerCase();
  if (unit === '' && Number(m[1]) !== 0 && bare === 'refuse') return undefined;
  const factor = unit === '' ? 1 : sizeUnit[unit];
  if (factor === undefined) return undefined;
  const n = Number(m[1]) * factor;
  return Number.isSafeInteger(Math.round(n)) ? Math.round(n) : undefined;
}

/** Sizes for people: `2.0 KiB`, `25.0 MiB`; bytes below 1 KiB print exactly. */
export function formatSize(bytes: number): string {
  if (bytes < 1024) return `${bytes} B`;
  const units = ['KiB', 'MiB', 'GiB', 'TiB'];
  let v = bytes / 1024;
  let i = 0;
  while (v >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return `${v.toFixed(1)} ${units[i]}`;
}

export function parseBoolean(text: string): boolean | undefined {
  const s = text.trim().toLowerCase();
  if (['1', 'true', 'yes', 'on'].includes(s)) return true;
  if (['0', 'false', 'no', 'off', ''].includes(s)) return false;
  return undefined;
}

export function parseInteger(text: string, min: number, max: number): number | undefined {
  if (!/^\s*-?\d+\s*$/.test(text)) return undefined;
  const n = Number(text);
  return Number.isSafeInteger(n) && n >= min && n <= max ? n : undefined;
}

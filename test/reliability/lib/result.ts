import type { CaseFigure, CaseResult } from './types.js';

/** A result to fill in as a case runs: passed until something fails it. */
export function newResult(): CaseResult & {
  fail(why: string): void;
  figure(name: string, value: string, bound?: string): void;
  note(line: string): void;
} {
  const r: CaseResult = { passed: true, sent: 0, acked: 0, verified: 0, lostAcked: 0, duplicates: 0, figures: [], notes: [] };
  return Object.assign(r, {
    fail(why: string) {
      r.passed = false;
      r.error = r.error ? `${r.error}; ${why}` : why;
    },
    figure(name: string, value: string, bound?: string) {
      const f: CaseFigure = { name, value };
      if (bound !== undefined) f.bound = bound;
      r.figures.push(f);
    },
    note(line: string) {
      r.notes!.push(line);
    },
  });
}

export const mib = (bytes: number) => `${(bytes / 1024 / 1024).toFixed(1)} MiB`;
export const secs = (ms: number) => `${(ms / 1000).toFixed(2)} s`;

/** Polls `probe` every `everyMs` until it returns a value other than undefined, or the time is up. */
export async function until<T>(
  probe: () => T | undefined | Promise<T | undefined>,
  timeoutMs: number,
  everyMs = 50,
): Promise<T | undefined> {
  const end = Date.now() + timeoutMs;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() >= end) return undefined;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/**
 * The reliability suite's runner (`npm run test:reliability`): every module compiled to
 * dist/test/reliability/cases/ exports `cases: ReliabilityCase[]`; they run one at a time in id
 * order, each under its own time bound, and the run ends with the summary table and, as its very
 * last line, `N passed, M failed`. Exit 1 when a case failed or an acknowledged request was lost.
 *
 *   node dist/test/reliability/run.js [--seed <n>] [--only 1,2,9] [--keep]
 *
 * --seed (or RELIABILITY_SEED) repeats a run's random choices; --keep leaves each case's temporary
 * folder in place (a failed case's folder is always kept and its path printed).
 */
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { killAll, liveProcesses } from './lib/serve-process.js';
import { caseSeed, resolveSeed, seededRandom } from './lib/seed.js';
import type { CaseContext, CaseResult, ReliabilityCase } from './lib/types.js';

/** A case's time bound when it names none: a limit that catches hangs, not a target. */
const DEFAULT_CASE_TIMEOUT_MS = 10 * 60_000; // 10 min
/** After its bound, a case gets this long to notice the abort and clean up. */
const ABORT_GRACE_MS = 30_000; // 30 s

interface Args {
  seed: number;
  only: Set<string> | undefined;
  keep: boolean;
}

function parseArgs(argv: string[]): Args {
  const oi = argv.indexOf('--only');
  const onlyText = oi >= 0 ? argv[oi + 1] : argv.find((a) => a.startsWith('--only='))?.slice('--only='.length);
  return {
    seed: resolveSeed(argv, process.env),
    only: onlyText
      ? new Set(
          onlyText
            .split(',')
            .map((s) => s.trim())
            .filter(Boolean),
        )
      : undefined,
    keep: argv.includes('--keep'),
  };
}

async function discover(): Promise<ReliabilityCase[]> {
  const dir = fileURLToPath(new URL('./cases/', import.meta.url));
  const files = readdirSync(dir)
    .filter((f) => f.endsWith('.js'))
    .sort();
  const all: ReliabilityCase[] = [];
  for (const f of files) {
    // `skipped`: one line saying why a module's cases do not run here (the PostgreSQL twins without HOOKBUCKET_TEST_PG).
    const mod = (await import(pathToFileURL(join(dir, f)).href)) as { cases?: ReliabilityCase[]; skipped?: string };
    if (!Array.isArray(mod.cases)) throw new Error(`${f} exports no \`cases\` array`);
    if (mod.skipped) console.log(mod.skipped);
    all.push(...mod.cases);
  }
  const seen = new Set<string>();
  for (const c of all) {
    if (seen.has(String(c.id))) throw new Error(`two cases have the id ${c.id}`);
    seen.add(String(c.id));
  }
  return all.sort(byId);
}

/** Numeric ids in number order, then string ids in text order (`10` after `9`, `26b` after `26`). */
function byId(a: ReliabilityCase, b: ReliabilityCase): number {
  const na = parseFloat(String(a.id));
  const nb = parseFloat(String(b.id));
  if (Number.isFinite(na) && Number.isFinite(nb) && na !== nb) return na - nb;
  if (Number.isFinite(na) !== Number.isFinite(nb)) return Number.isFinite(na) ? -1 : 1;
  return String(a.id).localeCompare(String(b.id));
}

const fmtS = (ms: number) => `${(ms / 1000).toFixed(1)} s`;

async function runCase(c: ReliabilityCase, args: Args): Promise<{ result: CaseResult; ms: number }> {
  const abort = new AbortController();
  const dirs: string[] = [];
  const ctx: CaseContext = {
    seed: args.seed,
    random: seededRandom(caseSeed(args.seed, c.id)),
    tmpDir: () => {
      const d = mkdtempSync(join(tmpdir(), `hookbucket-rel-${c.id}-`));
      dirs.push(d);
      return d;
    },
    log: (line) => console.log(`    ${line}`),
    signal: abort.signal,
  };
  const bound = c.timeoutMs ?? DEFAULT_CASE_TIMEOUT_MS;
  const t0 = performance.now();
  let result: CaseResult;
  const running = c.run(ctx).catch(
    (e: unknown): CaseResult => ({
      passed: false,
      sent: 0,
      acked: 0,
      verified: 0,
      lostAcked: 0,
      duplicates: 0,
      figures: [],
      error: e instanceof Error ? (e.stack ?? e.message) : String(e),
    }),
  );
  let timer: NodeJS.Timeout | undefined;
  const timedOut = new Promise<'timeout'>((r) => (timer = setTimeout(() => r('timeout'), bound)));
  const first = await Promise.race([running, timedOut]);
  clearTimeout(timer);
  if (first === 'timeout') {
    abort.abort(new Error(`case ${c.id} passed its ${fmtS(bound)} bound`));
    const late = await Promise.race([running, new Promise<undefined>((r) => setTimeout(() => r(undefined), ABORT_GRACE_MS))]);
    result = late ?? { passed: false, sent: 0, acked: 0, verified: 0, lostAcked: 0, duplicates: 0, figures: [] };
    result.passed = false;
    result.error = `timed out after ${fmtS(bound)}${result.error ? `; ${result.error}` : ''}`;
  } else {
    result = first;
  }
  const ms = performance.now() - t0;
  const left = liveProcesses();
  if (left.length > 0) {
    killAll();
    result.passed = false;
    result.error = `${result.error ? `${result.error}; ` : ''}left ${left.length} process(es) running: ${left.map((p) => p.describe()).join(', ')}`;
  }
  if (result.lostAcked > 0) result.passed = false;
  if (result.passed && !args.keep) for (const d of dirs) rmSync(d, { recursive: true, force: true });
  else if (dirs.length > 0) (result.notes ??= []).push(`kept: ${dirs.join(', ')}`);
  return { result, ms };
}

function table(rows: string[][]): string {
  const widths = rows[0]!.map((_, i) => Math.max(...rows.map((r) => r[i]!.length)));
  const line = (r: string[]) => `| ${r.map((c, i) => (i === 0 ? c.padEnd(widths[i]!) : c.padStart(widths[i]!))).join(' | ')} |`;
  return [
    line(rows[0]!),
    `| ${widths.map((w, i) => (i === 0 ? '-'.repeat(w) : `${'-'.repeat(w - 1)}:`)).join(' | ')} |`,
    ...rows.slice(1).map(line),
  ].join('\n');
}

async function main(): Promise<number> {
  const args = parseArgs(process.argv.slice(2));
  console.log(`reliability suite: seed ${args.seed} (rerun with --seed ${args.seed} or RELIABILITY_SEED=${args.seed})`);
  const all = await discover();
  const selected = args.only ? all.filter((c) => args.only!.has(String(c.id))) : all;
  if (args.only) {
    const unknown = [...args.only].filter((id) => !all.some((c) => String(c.id) === id));
    if (unknown.length > 0) console.log(`--only: no case ${unknown.join(', ')}`);
  }
  const results: Array<{ c: ReliabilityCase; result: CaseResult; ms: number }> = [];
  const suiteStart = performance.now();
  for (const c of selected) {
    console.log(`\n▶ case ${c.id}: ${c.title}`);
    const { result, ms } = await runCase(c, args);
    results.push({ c, result, ms });
    console.log(
      `${result.passed ? '✔ passed' : '✘ FAILED'} case ${c.id} in ${fmtS(ms)}: sent ${result.sent}, acked ${result.acked}, verified ${result.verified}, lost ${result.lostAcked}, duplicates ${result.duplicates}`,
    );
    for (const f of result.figures) console.log(`    ${f.name}: ${f.value}${f.bound ? ` (bound ${f.bound})` : ''}`);
    for (const n of result.notes ?? []) console.log(`    note: ${n}`);
    if (result.error) console.log(`    error: ${result.error}`);
  }
  const passed = results.filter((r) => r.result.passed).length;
  const failed = results.length - passed;
  const sum = (k: 'sent' | 'acked' | 'verified' | 'lostAcked' | 'duplicates') => results.reduce((n, r) => n + r.result[k], 0);
  console.log(`\nsummary (seed ${args.seed}, ${fmtS(performance.now() - suiteStart)}):\n`);
  const rows = [['case', 'result', 'time', 'sent', 'acked', 'verified', 'lost', 'duplicates']];
  for (const { c, result, ms } of results) {
    rows.push([
      `${c.id} ${c.title}`.slice(0, 60),
      result.passed ? 'passed' : 'FAILED',
      fmtS(ms),
      ...[result.sent, result.acked, result.verified, result.lostAcked, result.duplicates].map(String),
    ]);
  }
  console.log(table(rows));
  console.log('');
  console.log(
    table([
      ['figure', 'value'],
      ['cases run', String(results.length)],
      ['cases passed', String(passed)],
      ['requests sent', String(sum('sent'))],
      ['requests acknowledged', String(sum('acked'))],
      ['acknowledged and verified', String(sum('verified'))],
      ['acknowledged but lost (must be 0)', String(sum('lostAcked'))],
      ['duplicates delivered', String(sum('duplicates'))],
    ]),
  );
  console.log(`${passed} passed, ${failed} failed`);
  return failed > 0 || sum('lostAcked') > 0 ? 1 : 0;
}

const code = await main().catch((e: unknown) => {
  console.error(e);
  console.log('0 passed, 1 failed');
  return 1;
});
killAll();
process.exitCode = code;
// Exit even if a case left a handle open (its processes were killed above).
process.stdout.write('', () => process.exit(code));

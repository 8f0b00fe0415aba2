// The contract between the reliability runner (test/reliability/run.ts) and its cases.
// A case module lives in test/reliability/cases/<name>.ts and exports `cases: ReliabilityCase[]`;
// the runner discovers every module compiled to dist/test/reliability/cases/, runs the cases one
// at a time in id order under an overall time bound each, and adds their counts to the summary.

export interface CaseContext {
  /** The suite's seed (printed at start; `--seed <n>` or RELIABILITY_SEED reruns it). */
  seed: number;
  /** Uniform in [0, 1), from a PRNG seeded per case from `seed` and the case id: reruns repeat. */
  random(): number;
  /** A fresh temporary directory for this case; the runner removes it after the case. */
  tmpDir(): string;
  /** A progress line, printed indented under the case. */
  log(line: string): void;
  /** Aborted when the case's overall time bound passes: stop loops and children promptly. */
  signal: AbortSignal;
  /**
   * A PostgreSQL server URL when the case is a PostgreSQL twin (ids ending in `p`): the case runs
   * on a fresh database there (lib/test-store.ts) instead of a SQLite file.
   */
  postgres?: string;
}

export interface CaseFigure {
  name: string;
  /** The measured value, with its unit (`"1.24 s"`, `"38 MiB"`). */
  value: string;
  /** The bound it is checked against, when there is one (`"≤ 10 s"`). */
  bound?: string;
}

export interface CaseResult {
  passed: boolean;
  /** Requests sent to the receiver. */
  sent: number;
  /** Requests answered 2xx. */
  acked: number;
  /** Acked requests found stored intact by the invariant check. */
  verified: number;
  /** Acked requests missing or altered: must be 0. */
  lostAcked: number;
  /** Deliveries the consumer saw more than once (allowed, reported). */
  duplicates: number;
  figures: CaseFigure[];
  notes?: string[];
  /** Why the case failed (set when `passed` is false). */
  error?: string;
}

export interface ReliabilityCase {
  id: number | string;
  title: string;
  /** The case's own time bound in ms (the runner's default when omitted). */
  timeoutMs?: number;
  run(ctx: CaseContext): Promise<CaseResult>;
}

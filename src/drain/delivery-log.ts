/**
 * What the drain worker says in its log about deliveries, at the default level, without flooding
 * it during an outage:
 *
 * - `warn`, the first delivery of a bucket that ends `failed` or `exhausted`, in full; the ones
 *   that follow within the interval are counted, and one line at its end says how many
 *   (src/policy/log-window.ts decides). The same for a bucket blocked by a consumer's Retry-After.
 * - `info`, once an interval, one summary line per bucket that did anything in it: requests
 *   received (inside `serve` only: ingest tells it), delivered, retried, failed, exhausted, and the
 *   deliveries held back by reason.
 *
 * The worker calls it once the store has recorded each fact, like its DrainObserver. The interval
 * is `--log-interval` (default 1m); `tick()` does the work of one timer beat, for tests.
 */
import type { Clock } from '../shared/clock.js';
import { formatDuration } from '../shared/format-duration.js';
import type { Logger } from '../shared/logger.js';
import { noteLogEvent, tickLogWindow, type LogLine, type LogWindow } from '../policy/log-window.js';

export const DEFAULT_LOG_INTERVAL_MS = 60_000; // 1m

/** An attempt's end, as the first-failure line shows it. */
export interface EndedAttempt {
  /** null: not at hand (a lease that expired under a worker that died). */
  requestId: string | null;
  deliveryId: string;
  /** The attempt's number (1: the first). */
  number: number;
  status: number | null;
  errorClass: string | null;
  reason: string | null;
}

interface Counts {
  received: number;
  delivered: number;
  retried: number;
  failed: number;
  exhausted: number;
  deferred: Record<string, number>;
}

const emptyCounts = (): Counts => ({ received: 0, delivered: 0, retried: 0, failed: 0, exhausted: 0, deferred: {} });

const active = (c: Counts): boolean =>
  c.received + c.delivered + c.retried + c.failed + c.exhausted + Object.values(c.deferred).reduce((a, n) => a + n, 0) > 0;

export interface DeliveryLogDeps {
  logger: Logger;
  clock: Clock;
  /** The summary interval, and the window failures are counted in (default 1m). */
  intervalMs?: number;
  /** Whether ingest reports to it (inside `serve`): only then do summaries carry `received`. */
  receives?: boolean;
}

export class DeliveryLog {
  readonly #logger: Logger;
  readonly #clock: Clock;
  readonly #intervalMs: number;
  readonly #receives: boolean;
  #counts = new Map<string, Counts>();
  #since: number;
  readonly #failures = new Map<string, LogWindow | null>();
  readonly #blocks = new Map<string, { window: LogWindow | null; untilMs: number }>();
  #timer: NodeJS.Timeout | undefined;

  constructor(deps: DeliveryLogDeps) {
    this.#logger = deps.logger;
    this.#clock = deps.clock;
    this.#intervalMs = deps.intervalMs ?? DEFAULT_LOG_INTERVAL_MS;
    this.#receives = deps.receives ?? false;
    this.#since = deps.clock.now();
  }

  get intervalMs(): number {
    return this.#intervalMs;
  }

  /** Starts the interval's timer (unref'd: it keeps no process alive). */
  start(): void {
    if (this.#timer) return;
    this.#since = this.#clock.now();
    this.#timer = setInterval(() => this.tick(), this.#intervalMs);
    this.#timer.unref();
  }

  /** Stops the timer and writes what the last, partial interval holds. */
  stop(): void {
    clearInterval(this.#timer);
    this.#timer = undefined;
    this.tick(true);
  }

  #of(bucket: string): Counts {
    let c = this.#counts.get(bucket);
    if (!c) {
      c = emptyCounts();
      this.#counts.set(bucket, c);
    }
    return c;
  }

  /** A request stored for `bucket` (serve's ingest). */
  requestReceived(bucket: string): void {
    this.#of(bucket).received++;
  }

  /** Deliveries a committed claim held back. */
  deferred(bucket: string, reason: string, n: number): void {
    const d = this.#of(bucket).deferred;
    d[reason] = (d[reason] ?? 0) + n;
  }

  /** An attempt the store has recorded; `released` ones (never sent) are not counted. */
  attemptEnded(bucket: string, outcome: string, a: EndedAttempt | undefined): void {
    const c = this.#of(bucket);
    if (outcome === 'delivered') c.delivered++;
    else if (outcome === 'retry' || outcome === 'lease_expired') c.retried++;
    else if (outcome === 'failed' || outcome === 'exhausted') {
      c[outcome]++;
      this.#failure(bucket, outcome, a);
    }
  }

  /** A consumer's Retry-After blocked the bucket until `untilMs` (recorded in the store). */
  blocked(bucket: string, untilMs: number, a: EndedAttempt): void {
    const now = this.#clock.now();
    const prev = this.#blocks.get(bucket);
    const step = noteLogEvent(prev?.window ?? null, 'retry_after', now, this.#intervalMs);
    const latest = Math.max(prev?.untilMs ?? 0, untilMs);
    this.#blocks.set(bucket, { window: step.window, untilMs: latest });
    for (const line of step.lines) this.#blockLine(bucket, line, untilMs, latest, a);
  }

  #failure(bucket: string, outcome: 'failed' | 'exhausted', a: EndedAttempt | undefined): void {
    const step = noteLogEvent(this.#failures.get(bucket) ?? null, outcome, this.#clock.now(), this.#intervalMs);
    this.#failures.set(bucket, step.window);
    for (const line of step.lines) this.#failureLine(bucket, line, a);
  }

  #failureLine(bucket: string, line: LogLine, a: EndedAttempt | undefined): void {
    const every = formatDuration(this.#intervalMs);
    if (line.type === 'more') {
      const by = Object.entries(line.counts)
        .map(([k, n]) => `${k} ${n}`)
        .join(', ');
      this.#logger.warn(
        { bucket, ...line.counts, more: line.total, since: new Date(line.fromMs).toISOString() },
        `bucket ${bucket}: ${line.total} more ${line.total === 1 ? 'delivery' : 'deliveries'} ended failed or exhausted in the last ${formatDuration(line.toMs - line.fromMs)} (${by})`,
      );
      return;
    }
    const which = a?.requestId ? `request ${a.requestId}` : `delivery ${a?.deliveryId}`;
    const what = a === undefined ? '' : ` (${which}, attempt ${a.number}: ${attemptWhat(a)})`;
    this.#logger.warn(
      {
        bucket,
        outcome: line.kind,
        ...(a ? { request: a.requestId, delivery: a.deliveryId, attempt: a.number, status: a.status, error_class: a.errorClass } : {}),
        ...(a?.reason ? { reason: a.reason } : {}),
      },
      `bucket ${bucket}: a delivery ended ${line.kind}${what}; more within ${every} are counted in one line`,
    );
  }

  #blockLine(bucket: string, line: LogLine, untilMs: number, latestMs: number, a: EndedAttempt | undefined): void {
    if (line.type === 'more') {
      this.#logger.warn(
        { bucket, blocks: line.total, until: new Date(latestMs).toISOString(), since: new Date(line.fromMs).toISOString() },
        `bucket ${bucket}: Retry-After blocked deliveries ${line.total} more time(s) in the last ${formatDuration(line.toMs - line.fromMs)}, latest until ${new Date(latestMs).toISOString()}`,
      );
      return;
    }
    this.#logger.warn(
      { bucket, until: new Date(untilMs).toISOString(), ...(a ? { request: a.requestId, attempt: a.number, status: a.status } : {}) },
      `bucket ${bucket}: the consumer answered ${a?.status ?? 'an error'} with Retry-After; the bucket's deliveries wait until ${new Date(untilMs).toISOString()}`,
    );
  }

  /**
   * One timer beat: the failure and Retry-After counts whose window ended, then a summary line per
   * bucket active since the last summary, when an interval has passed (or `force`, on stop).
   */
  tick(force = false): void {
    const now = this.#clock.now();
    for (const [bucket, w] of this.#failures) {
      const step = tickLogWindow(w, now, this.#intervalMs);
      if (step.window === null) this.#failures.delete(bucket);
      else this.#failures.set(bucket, step.window);
      for (const line of step.lines) this.#failureLine(bucket, line, undefined);
    }
    for (const [bucket, b] of this.#blocks) {
      const step = tickLogWindow(b.window, now, this.#intervalMs);
      if (step.window === null) this.#blocks.delete(bucket);
      else this.#blocks.set(bucket, { window: step.window, untilMs: b.untilMs });
      for (const line of step.lines) this.#blockLine(bucket, line, b.untilMs, b.untilMs, undefined);
    }
    // A timer beat may come a little early; a summary covers at least most of an interval.
    if (!force && now - this.#since < this.#intervalMs * 0.9) return;
    const counts = this.#counts;
    const since = this.#since;
    this.#counts = new Map();
    this.#since = now;
    for (const [bucket, c] of [...counts].sort(([a], [b]) => (a < b ? -1 : 1))) {
      if (!active(c)) continue;
      this.#summary(bucket, c, now - since);
    }
  }

  #summary(bucket: string, c: Counts, ms: number): void {
    const deferred = Object.entries(c.deferred).sort(([a], [b]) => (a < b ? -1 : 1));
    const parts = [
      ...(this.#receives ? [`received ${c.received}`] : []),
      `delivered ${c.delivered}`,
      `retried ${c.retried}`,
      `failed ${c.failed}`,
      `exhausted ${c.exhausted}`,
      `deferred ${deferred.length === 0 ? 0 : deferred.map(([k, n]) => `${k} ${n}`).join(', ')}`,
    ];
    this.#logger.info(
      {
        bucket,
        interval_ms: ms,
        ...(this.#receives ? { received: c.received } : {}),
        delivered: c.delivered,
        retried: c.retried,
        failed: c.failed,
        exhausted: c.exhausted,
        deferred: Object.fromEntries(deferred),
      },
      `bucket ${bucket}, last ${formatDuration(ms)}: ${parts.join(', ')}`,
    );
  }
}

function attemptWhat(a: EndedAttempt): string {
  const what = a.status !== null ? `status ${a.status}` : (a.errorClass ?? 'error');
  return a.reason ? `${what}, ${a.reason}` : what;
}

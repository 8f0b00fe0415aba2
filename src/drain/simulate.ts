/**
 * The retry-storm model behind `hookbucket simulate`: one bucket, one consumer, simulated time,
 * no network. It runs the worker's own policy modules (schedule and jitter, retry budget, token
 * bucket), so what it shows is what the drain worker would do. Pure: a seed in, a table out.
 *
 * The model:
 * - Requests arrive evenly at `arrival` (600/m: one every 100 ms from t = 0), each a delivery
 *   whose first attempt is due on arrival.
 * - For the first `outage`, every attempt fails at once (connection refused).
 * - After it, the consumer serves `capacity` requests per second, first come first served, from an
 *   unbounded queue. An attempt whose answer takes longer than the sender's `timeout` fails for the
 *   sender, but the consumer still spends its capacity on it: congestion collapse, where the
 *   consumer is busy all the time and almost nothing it does counts.
 * - A failed attempt is retried per the policy, counting from when the sender saw the failure (at
 *   once in the outage, after `timeout` after it).
 * - Due retries wait in due order for the budget and the rate; first attempts wait for the rate only.
 * - Per-bucket concurrency is not modelled.
 *
 * Time advances in ticks of 10 ms (coarser for long runs, see slotMsFor). Attempts keep their
 * exact due and token times, so a 200/s rate or a 30/s consumer is modelled exactly; only their
 * order within one tick is the order they were scheduled in. Retries sit on a timing wheel (a
 * linked list per tick in typed arrays), O(1) per attempt: the fixed-30s storm over 120 minutes is
 * 7.4 million attempts and takes about 1.2 s, the default policy's 79,000 about 0.25 s.
 */
import { mulberry32 } from '../policy/prng.js';
import { DEFAULT_RETRY_BUDGET, emptyRetryBudget, mayRetry, recordAttempt, type RetryBudgetConfig } from '../policy/retry-budget.js';
import { DEFAULT_SCHEDULE, nextAttempt, scheduleProblem, type Schedule } from '../policy/schedule.js';
import { FULL_BUCKET, intervalMs, takeToken, type Rate, type TokenBucketConfig } from '../policy/token-bucket.js';

export interface SimulationPolicy {
  /** `default` or `fixed:30s`, as given. */
  readonly name: string;
  readonly schedule: Schedule;
  /** Undefined: no retry budget. */
  readonly budget?: RetryBudgetConfig | undefined;
  /** Undefined: no rate cap (the bucket default). */
  readonly rate?: TokenBucketConfig | undefined;
}

/** The naive sender: the same interval forever, no jitter, no budget, no rate cap, no give-up. */
export function fixedPolicy(name: string, intervalMs: number): SimulationPolicy {
  return {
    name,
    schedule: { baseMs: intervalMs, multiplier: 1, capMs: intervalMs, maxAttempts: Infinity, jitter: 'none' },
  };
}

export const DEFAULT_POLICY: SimulationPolicy = Object.freeze({
  name: 'default',
  schedule: DEFAULT_SCHEDULE,
  budget: DEFAULT_RETRY_BUDGET,
});

export interface SimulationInput {
  readonly arrival: Rate;
  readonly outageMs: number;
  readonly capacity: Rate;
  readonly timeoutMs: number;
  readonly durationMs: number;
  readonly policy: SimulationPolicy;
  readonly seed: number;
}

/** The storm: 600 events a minute, a 10-minute outage, a consumer good for 30/s. */
export const DEFAULT_SIMULATION: SimulationInput = Object.freeze({
  arrival: { count: 600, perMs: 60_000 },
  outageMs: 10 * 60_000, // 10m
  capacity: { count: 30, perMs: 1000 },
  timeoutMs: 5000, // 5s
  durationMs: 120 * 60_000, // 120m
  policy: DEFAULT_POLICY,
  seed: 1,
});

export const MAX_SIM_DURATION_MS = 7 * 86_400_000; // 7d
/** Deliveries held in typed arrays: about 40 bytes each. */
export const MAX_SIM_DELIVERIES = 2_000_000;
/** A storm grows without bound; past this many attempts the run stops and says so. */
export const MAX_SIM_ATTEMPTS = 20_000_000; // about 3 s

export interface SimulationMinute {
  /** 1-based: minute 1 is [0, 60 s). */
  minute: number;
  arrivals: number;
  attempts: number;
  firstAttempts: number;
  retries: number;
  /** Attempts that succeeded for the sender, counted when the answer came. */
  successes: number;
  /** Attempts that failed for the sender, counted when it saw the failure. */
  failures: number;
  /** Deliveries that gave up (became exhausted). */
  exhausted: number;
  /** At the end of the minute: deliveries received and not delivered or exhausted, not counting first attempts still in flight. */
  backlog: number;
  /** At the end of the minute: how long a request just sent would queue at the consumer. */
  consumerWaitMs: number;
}

export interface SimulationResult {
  input: SimulationInput;
  minutes: SimulationMinute[];
  /** The minute in which the outage ends (10 for a 10m outage). */
  outageEndMinute: number;
  backlogAtFix: number;
  /** The first minute from the outage's end at whose end the backlog is 0; null if it does not drain within the run. */
  drainMinute: number | null;
  /** When the last delivery of that backlog succeeded (or gave up); null if it does not drain within the run. */
  drainedAtMs: number | null;
  peakAttempts: { minute: number; attempts: number };
  totals: { arrivals: number; attempts: number; successes: number; failures: number; exhausted: number };
  /** Set when MAX_SIM_ATTEMPTS stopped the run: the minutes after it are missing. */
  stoppedAtMinute: number | null;
}

export function simulationProblem(i: SimulationInput): string | undefined {
  if (!(i.durationMs >= 60_000) || i.durationMs > MAX_SIM_DURATION_MS) return 'duration must be from 1m to 7d';
  if (!(i.outageMs >= 0) || i.outageMs >= i.durationMs) return 'the outage must end before the run does';
  if (!(i.timeoutMs > 0)) return 'timeout must be positive';
  if (i.durationMs / intervalMs(i.arrival) > MAX_SIM_DELIVERIES) {
    return `arrival × duration exceeds ${MAX_SIM_DELIVERIES} deliveries: shorten the run or lower the rate`;
  }
  const { schedule } = i.policy;
  if (schedule.maxAttempts === Infinity) {
    // The naive sender: scheduleProblem would refuse its infinite attempts, which are the point.
    if (!(schedule.baseMs >= 1)) return 'the interval must be at least 1ms';
    return undefined;
  }
  return scheduleProblem(schedule);
}

/** Ticks small enough for ordering, but at most a million per run; each divides a second. */
function slotMsFor(durationMs: number): number {
  for (const ms of [10, 20, 50, 100, 200, 500]) if (durationMs / ms <= 1_000_000) return ms;
  return 1000;
}

export function simulate(input: SimulationInput): SimulationResult {
  const problem = simulationProblem(input);
  if (problem !== undefined) throw new RangeError(problem);
  const { durationMs, outageMs, timeoutMs } = input;
  const { schedule, budget, rate } = input.policy;
  const random = mulberry32(input.seed);

  const nMinutes = Math.ceil(durationMs / 60_000);
  const arrivalEvery = intervalMs(input.arrival);
  const serviceMs = intervalMs(input.capacity);
  const total = Math.ceil(durationMs / arrivalEvery);
  const arrivalAt = (id: number) => id * arrivalEvery;

  const slotMs = slotMsFor(durationMs);
  const nSlots = Math.ceil(durationMs / slotMs);
  const slotHead = new Int32Array(nSlots).fill(-1);
  const slotTail = new Int32Array(nSlots).fill(-1);
  const link = new Int32Array(total).fill(-1);

  const dueAt = new Float64Array(total);
  const firstAt = new Float64Array(total);
  const attemptsMade = new Int32Array(total);
  const hasFailed = new Uint8Array(total);
  // Retries that are due and wait for the budget or the rate, oldest due first. Each delivery is
  // in at most one place (wheel, this queue, or decided), so `total` entries always suffice.
  const ready = new Int32Array(total);
  let readyHead = 0;
  let readyLen = 0;

  const perMinute = () => new Float64Array(nMinutes);
  const arrivals = perMinute();
  const attempts = perMinute();
  const firsts = perMinute();
  const retries = perMinute();
  const successes = perMinute();
  const failures = perMinute();
  const exhausted = perMinute();
  const retryingDelta = perMinute();
  const pendingAtEnd = perMinute();
  // Per minute, the latest time a delivery left the backlog (succeeded after failing, or gave up).
  const lastLeftAt = perMinute();
  const waitAtEnd = perMinute();
  const add = (arr: Float64Array, atMs: number, n = 1) => {
    const m = Math.floor(atMs / 60_000);
    if (m < nMinutes) arr[m]! += n;
  };
  const markLeft = (atMs: number) => {
    const m = Math.floor(atMs / 60_000);
    if (m < nMinutes) lastLeftAt[m] = Math.max(lastLeftAt[m]!, atMs);
  };
  const leave = (atMs: number) => {
    add(retryingDelta, atMs, -1);
    markLeft(atMs);
  };

  let arrived = 0;
  let nextFirst = 0;
  let consumerFreeAt = 0;
  let bucketState = FULL_BUCKET;
  let tokenAt = 0;
  let budgetState = emptyRetryBudget();
  let retriesBlockedUntil = -Infinity;
  let attemptCount = 0;
  let stoppedAtMinute: number | null = null;
  let slot = 0;

  const send = (id: number, t: number, isRetry: boolean) => {
    attemptsMade[id]!++;
    add(attempts, t);
    if (isRetry) add(retries, t);
    else {
      add(firsts, t);
      firstAt[id] = t;
    }
    if (budget) budgetState = recordAttempt(budgetState, t, isRetry ? 'retry' : 'first');

    let failAt: number;
    if (t < outageMs) failAt = t;
    else {
      const done = Math.max(t, consumerFreeAt) + serviceMs;
      consumerFreeAt = done;
      if (done - t <= timeoutMs) {
        add(successes, done);
        if (hasFailed[id]) leave(done);
        // A first attempt that waited for the rate was backlog too (counted as pending).
        else if (t - arrivalAt(id) >= slotMs) markLeft(done);
        return;
      }
      failAt = t + timeoutMs;
    }
    add(failures, failAt);
    if (!hasFailed[id]) {
      hasFailed[id] = 1;
      add(retryingDelta, failAt, 1);
    }
    const next = nextAttempt(schedule, {
      attempt: attemptsMade[id]!,
      elapsedActiveMs: failAt - firstAt[id]!,
      nowMs: failAt,
      random: random(),
    });
    if (next.kind === 'give_up') {
      add(exhausted, failAt);
      leave(failAt);
      return;
    }
    dueAt[id] = next.atMs;
    // Never back into the tick being dispatched: a zero gap waits for the next tick.
    const s = Math.max(slot + 1, Math.floor(next.atMs / slotMs));
    if (s >= nSlots) return;
    link[id] = -1;
    if (slotTail[s] === -1) slotHead[s] = id;
    else link[slotTail[s]!] = id;
    slotTail[s] = id;
  };

  run: for (; slot < nSlots; slot++) {
    const tickStart = slot * slotMs;
    const tickEnd = Math.min(durationMs, tickStart + slotMs);
    for (let id = slotHead[slot]!; id !== -1; id = link[id]!) ready[(readyHead + readyLen++) % total] = id;
    while (arrived < total && arrivalAt(arrived) < tickEnd) add(arrivals, arrivalAt(arrived++));

    for (;;) {
      const hasFirst = nextFirst < arrived;
      const retryOpen = readyLen > 0 && tickStart >= retriesBlockedUntil;
      if (!hasFirst && !retryOpen) break;
      const retryId = retryOpen ? ready[readyHead]! : -1;
      const isRetry = retryOpen && (!hasFirst || dueAt[retryId]! <= arrivalAt(nextFirst));
      let t = Math.max(tickStart, isRetry ? dueAt[retryId]! : arrivalAt(nextFirst));
      if (rate) {
        t = Math.max(t, tokenAt);
        if (t >= tickEnd) break;
      }
      if (isRetry && budget && !mayRetry(budget, budgetState, t)) {
        // The budget counts whole seconds, so nothing changes before the next one.
        retriesBlockedUntil = (Math.floor(t / 1000) + 1) * 1000;
        continue;
      }
      if (rate) {
        const take = takeToken(rate, bucketState, t);
        tokenAt = take.nextAvailableAtMs;
        if (!take.taken) continue;
        bucketState = take.state;
      }
      if (isRetry) {
        readyHead = (readyHead + 1) % total;
        readyLen--;
        send(retryId, t, true);
      } else send(nextFirst++, t, false);
      if (++attemptCount >= MAX_SIM_ATTEMPTS) {
        stoppedAtMinute = Math.floor(t / 60_000) + 1;
        break run;
      }
    }
    if (tickEnd % 60_000 === 0 || tickEnd === durationMs) {
      const m = Math.ceil(tickEnd / 60_000) - 1;
      pendingAtEnd[m] = arrived - nextFirst;
      waitAtEnd[m] = Math.max(0, consumerFreeAt - tickEnd);
    }
  }

  const shown = stoppedAtMinute === null ? nMinutes : stoppedAtMinute - 1;
  const minutes: SimulationMinute[] = [];
  let retrying = 0;
  for (let m = 0; m < shown; m++) {
    retrying += retryingDelta[m]!;
    minutes.push({
      minute: m + 1,
      arrivals: arrivals[m]!,
      attempts: attempts[m]!,
      firstAttempts: firsts[m]!,
      retries: retries[m]!,
      successes: successes[m]!,
      failures: failures[m]!,
      exhausted: exhausted[m]!,
      backlog: retrying + pendingAtEnd[m]!,
      consumerWaitMs: Math.round(waitAtEnd[m]!),
    });
  }

  const outageEndMinute = Math.ceil(outageMs / 60_000);
  const drain = minutes.find((r) => r.minute >= Math.max(1, outageEndMinute) && r.backlog === 0);
  const peak = minutes.reduce((p, r) => (r.attempts > p.attempts ? { minute: r.minute, attempts: r.attempts } : p), {
    minute: 0,
    attempts: 0,
  });
  const sum = (k: keyof SimulationMinute) => minutes.reduce((s, r) => s + r[k], 0);
  return {
    input,
    minutes,
    outageEndMinute,
    backlogAtFix: outageEndMinute === 0 ? 0 : (minutes[outageEndMinute - 1]?.backlog ?? 0),
    drainMinute: drain?.minute ?? null,
    // Nothing left the backlog in the drain minute only when there was none to begin with.
    drainedAtMs: drain === undefined ? null : Math.max(outageMs, Math.round(lastLeftAt[drain.minute - 1]!)),
    peakAttempts: peak,
    totals: {
      arrivals: sum('arrivals'),
      attempts: sum('attempts'),
      successes: sum('successes'),
      failures: sum('failures'),
      exhausted: sum('exhausted'),
    },
    stoppedAtMinute,
  };
}

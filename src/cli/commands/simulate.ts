import { writeFileSync } from 'node:fs';
import { Command, InvalidArgumentError } from 'commander';
import { formatDuration, isBareNumber, noUnitMessage, parseDuration } from '../../config/units.js';
import {
  DEFAULT_SIMULATION,
  fixedPolicy,
  simulate,
  simulationProblem,
  type SimulationInput,
  type SimulationPolicy,
  type SimulationResult,
} from '../../drain/simulate.js';
import { formatRate, perSecond } from '../../policy/token-bucket.js';
import { AppError } from '../../shared/errors.js';
import {
  addBudgetAndRateOptions,
  addScheduleOptions,
  budgetFromOptions,
  positiveDurationMsArg,
  durationMsArg,
  rateArg,
  rateFromOptions,
  scheduleFromOptions,
  seedArg,
  type BudgetRateOpts,
  type ScheduleOpts,
} from '../drain-options.js';
import { print, printJson, table, type CliIo } from '../io.js';
import { simulationChartSvg } from '../simulation-chart.js';

type PolicyArg = { kind: 'default' } | { kind: 'fixed'; name: string; intervalMs: number };

export function policyArg(value: string): PolicyArg {
  const v = value.trim().toLowerCase();
  if (v === 'default') return { kind: 'default' };
  const m = /^fixed:(.+)$/.exec(v);
  if (m && isBareNumber(m[1]!)) throw new InvalidArgumentError(`fixed:${noUnitMessage(m[1]!, 'duration')}`);
  const ms = m ? parseDuration(m[1]!) : undefined;
  if (ms === undefined || ms < 1) throw new InvalidArgumentError('default, or fixed:<interval> like fixed:30s');
  return { kind: 'fixed', name: `fixed:${formatDuration(ms)}`, intervalMs: ms };
}

interface SimulateOpts extends ScheduleOpts, BudgetRateOpts {
  arrival?: SimulationInput['arrival'];
  outage?: number;
  capacity?: SimulationInput['capacity'];
  timeout?: number;
  duration?: number;
  policy?: PolicyArg;
  seed?: number;
  json?: boolean;
  chart?: string;
}

/** Options that shape the default policy; the naive fixed sender takes none of them. */
const POLICY_FLAGS: ReadonlyArray<[keyof SimulateOpts, string]> = [
  ['base', '--base'],
  ['multiplier', '--multiplier'],
  ['cap', '--cap'],
  ['maxAttempts', '--max-attempts'],
  ['giveUp', '--give-up'],
  ['jitter', '--jitter'],
  ['retryBudget', '--retry-budget'],
  ['retryFloor', '--retry-floor'],
  ['rate', '--rate'],
  ['burst', '--burst'],
];

function policyFrom(o: SimulateOpts): SimulationPolicy {
  const p = o.policy ?? { kind: 'default' };
  if (p.kind === 'fixed') {
    const given = POLICY_FLAGS.filter(([k]) => o[k] !== undefined).map(([, flag]) => flag);
    if (given.length > 0) {
      throw new AppError('invalid_option', `${given.join(', ')} shape --policy default only; --policy ${p.name} is the naive sender`);
    }
    return fixedPolicy(p.name, p.intervalMs);
  }
  return { name: 'default', schedule: scheduleFromOptions(o), budget: budgetFromOptions(o), rate: rateFromOptions(o) };
}

function describePolicy(p: SimulationPolicy): string {
  if (p.name !== 'default') return `${p.name}: the same interval forever, no jitter, no budget, no rate cap, no give-up`;
  const s = p.schedule;
  const parts = [
    `base ${formatDuration(s.baseMs)} ×${s.multiplier}`,
    Number.isFinite(s.capMs) ? `cap ${formatDuration(s.capMs)}` : 'no cap',
    s.giveUpMs !== undefined ? `give up after ${formatDuration(s.giveUpMs)}` : `${s.maxAttempts} attempts`,
    `jitter ${s.jitter}`,
    p.budget ? `retry budget ${p.budget.fraction} + ${p.budget.floorPerSecond}/s` : 'no budget',
    p.rate ? `rate ${formatRate(p.rate.rate)} burst ${p.rate.burst}` : 'no rate cap',
  ];
  return `default: ${parts.join(', ')}`;
}

/** Stable JSON shape of `simulate --json`; durations in ms. */
export function simulationJson(r: SimulationResult) {
  const i = r.input;
  const p = i.policy;
  const s = p.schedule;
  const outageMinutes = i.outageMs / 60_000;
  return {
    arrival: formatRate(i.arrival),
    arrival_per_s: perSecond(i.arrival),
    outage_ms: i.outageMs,
    capacity: formatRate(i.capacity),
    capacity_per_s: perSecond(i.capacity),
    timeout_ms: i.timeoutMs,
    duration_ms: i.durationMs,
    seed: i.seed,
    policy: {
      name: p.name,
      base_ms: s.baseMs,
      multiplier: s.multiplier,
      cap_ms: Number.isFinite(s.capMs) ? s.capMs : null,
      max_attempts: s.maxAttempts !== undefined && Number.isFinite(s.maxAttempts) ? s.maxAttempts : null,
      give_up_ms: s.giveUpMs ?? null,
      jitter: s.jitter,
      retry_budget: p.budget?.fraction ?? null,
      retry_floor_per_s: p.budget?.floorPerSecond ?? null,
      rate: p.rate ? formatRate(p.rate.rate) : null,
      burst: p.rate?.burst ?? null,
    },
    minutes: r.minutes.map((m) => ({
      minute: m.minute,
      outage: m.minute - 1 < outageMinutes,
      arrivals: m.arrivals,
      attempts: m.attempts,
      first_attempts: m.firstAttempts,
      retries: m.retries,
      successes: m.successes,
      failures: m.failures,
      exhausted: m.exhausted,
      backlog: m.backlog,
      consumer_wait_ms: m.consumerWaitMs,
    })),
    outage_end_minute: r.outageEndMinute,
    backlog_at_fix: r.backlogAtFix,
    drain_minute: r.drainMinute,
    drained_at_ms: r.drainedAtMs,
    drained_after_fix_ms: r.drainedAtMs === null ? null : r.drainedAtMs - i.outageMs,
    peak_attempts: r.peakAttempts,
    totals: r.totals,
    stopped_at_minute: r.stoppedAtMinute,
  };
}

function wait(ms: number): string {
  return ms === 0 ? '0s' : formatDuration(ms);
}

function summary(r: SimulationResult): string[] {
  const i = r.input;
  const lines: string[] = [];
  const fixRow = r.minutes[r.outageEndMinute - 1];
  if (fixRow) {
    const ratio = fixRow.arrivals > 0 ? `, ${(fixRow.attempts / fixRow.arrivals).toFixed(1)}× its ${fixRow.arrivals} arrivals` : '';
    lines.push(`minute ${fixRow.minute} (the outage's last): ${fixRow.attempts} attempts${ratio}; backlog ${fixRow.backlog}`);
  }
  lines.push(`peak: ${r.peakAttempts.attempts} attempts in minute ${r.peakAttempts.minute}`);
  if (r.drainMinute !== null && r.drainedAtMs !== null) {
    lines.push(
      `drained: the backlog is empty by the end of minute ${r.drainMinute}, ${formatDuration(r.drainedAtMs - i.outageMs)} after the fix (last delivery at ${formatDuration(r.drainedAtMs)})`,
    );
  } else {
    const last = r.minutes[r.minutes.length - 1];
    lines.push(
      `no drain within the run: ${last?.backlog ?? 0} deliveries outstanding at the end of minute ${last?.minute ?? 0}, and a request sent then would queue ${wait(last?.consumerWaitMs ?? 0)} at the consumer`,
    );
  }
  if (r.stoppedAtMinute !== null)
    lines.push(`stopped in minute ${r.stoppedAtMinute}: more attempts than the simulation follows; the table ends before it`);
  return lines;
}

function text(r: SimulationResult): string {
  const i = r.input;
  const outageMinutes = i.outageMs / 60_000;
  return [
    `simulate: arrival ${formatRate(i.arrival)}, outage ${formatDuration(i.outageMs)}, consumer ${formatRate(i.capacity)}, sender timeout ${formatDuration(i.timeoutMs)}, ${formatDuration(i.durationMs)}, seed ${i.seed}`,
    `policy ${describePolicy(i.policy)}`,
    '',
    table(
      ['MINUTE', 'ARRIVALS', 'ATTEMPTS', 'RETRIES', 'SUCCESSES', 'FAILURES', 'BACKLOG', 'CONSUMER WAIT', 'NOTE'],
      r.minutes.map((m) => [
        m.minute,
        m.arrivals,
        m.attempts,
        m.retries,
        m.successes,
        m.failures,
        m.backlog,
        wait(m.consumerWaitMs),
        m.minute - 1 < outageMinutes ? 'outage' : m.minute === r.drainMinute ? 'drained' : '',
      ]),
    ),
    '',
    ...summary(r),
  ].join('\n');
}

export function makeSimulateCommand(io: CliIo): Command {
  const d = DEFAULT_SIMULATION;
  const cmd = new Command('simulate')
    .description("model a retry storm in simulated time, on the drain worker's own schedule, jitter, budget and rate code")
    .option('--arrival <rate>', `requests arriving, like 600/m (default ${formatRate(d.arrival)})`, rateArg)
    .option(
      '--outage <duration>',
      `the consumer refuses every attempt from the start for this long (default ${formatDuration(d.outageMs)})`,
      durationMsArg,
    )
    .option('--capacity <rate>', `requests the recovered consumer serves, in arrival order (default ${formatRate(d.capacity)})`, rateArg)
    .option(
      '--timeout <duration>',
      `the sender's attempt timeout; a slower answer counts as failed (default ${formatDuration(d.timeoutMs)})`,
      positiveDurationMsArg,
    )
    .option('--duration <duration>', `simulated time, 1m to 7d (default ${formatDuration(d.durationMs)})`, positiveDurationMsArg)
    .option(
      '--policy <policy>',
      'default (the bucket defaults, shaped by the options below) or fixed:<interval>, the naive sender (default default)',
      policyArg,
    )
    .option('--seed <n>', `seed for the jitter (default ${d.seed})`, seedArg);
  addScheduleOptions(cmd);
  addBudgetAndRateOptions(cmd);
  return cmd
    .option('--json', 'print JSON (durations in ms)')
    .option('--chart <file.svg>', 'also write an SVG plot of attempts, backlog and successes per minute')
    .addHelpText(
      'after',
      `
The model: every attempt fails at once during the outage; after it the consumer serves --capacity
requests per second in arrival order, and an answer slower than --timeout fails for the sender
although the consumer still spent its capacity on it. Per-bucket concurrency is not modelled.

Examples:
  $ hookbucket simulate --policy fixed:30s
  $ hookbucket simulate --arrival 600/m --outage 10m --capacity 30/s --timeout 5s --duration 120m
  $ hookbucket simulate --retry-budget 0.2 --retry-floor 5 --chart storm.svg
  $ hookbucket simulate --rate 20/s --jitter full --seed 7 --json`,
    )
    .action((opts: SimulateOpts) => {
      const input: SimulationInput = {
        arrival: opts.arrival ?? d.arrival,
        outageMs: opts.outage ?? d.outageMs,
        capacity: opts.capacity ?? d.capacity,
        timeoutMs: opts.timeout ?? d.timeoutMs,
        durationMs: opts.duration ?? d.durationMs,
        policy: policyFrom(opts),
        seed: opts.seed ?? d.seed,
      };
      const problem = simulationProblem(input);
      if (problem !== undefined) throw new AppError('invalid_option', problem);
      const result = simulate(input);
      if (opts.chart !== undefined) writeFileSync(opts.chart, simulationChartSvg(result));
      if (opts.json) printJson(io, simulationJson(result));
      else print(io, text(result));
    });
}

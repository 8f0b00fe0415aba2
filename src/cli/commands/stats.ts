import { Command } from 'commander';
import { formatDuration } from '../../config/units.js';
import type { ProcessRecord, Store } from '../../store/store.js';
import { isRemoteStore } from '../../remote/remote-store.js';
import { DEFAULT_WINDOW_MS, loadStats, statsJson, workerFigures, type StatsReport } from '../../stats/stats-report.js';
import { configFor, withStore } from '../context.js';
import { stuckText, type StuckBucket } from '../../policy/lease-fit.js';
import { systemClock } from '../../shared/clock.js';
import { positiveDurationMsArg } from '../drain-options.js';
import { iso, print, printJson, table, type CliIo } from '../io.js';
import { bucketNameArg } from '../parsers.js';

export { DEFAULT_WINDOW_MS, loadStats, statsJson, workerFigures, type StatsReport };

/** The report `stats` and `health` render: computed here from the store, or, through --api, the server's own (GET /api/stats). */
export function reportOf(store: Store, bucket: string | undefined, windowMs: number, defaultLeaseMs: number): Promise<StatsReport> {
  return isRemoteStore(store) ? store.statsReport(bucket, windowMs) : loadStats(store, bucket, windowMs, systemClock, defaultLeaseMs);
}

/** Each stuck bucket, why and what to do, for people (stats, health, bucket show). */
export function stuckLines(stuck: readonly StuckBucket[]): string[] {
  return stuck.map((s) => `stuck: ${stuckText(s)}`);
}

export function formatNumber(v: number | null): string {
  if (v === null) return 'null';
  return Number.isInteger(v) ? String(v) : v.toFixed(4).replace(/0+$/, '');
}

export function scopeText(r: Pick<StatsReport, 'bucket' | 'windowMs' | 'sinceMs' | 'untilMs'>): string {
  return `${r.bucket ?? 'all buckets'}, window ${formatDuration(r.windowMs)} (${iso(r.sinceMs)} to ${iso(r.untilMs)})`;
}

function statsText(r: StatsReport): string {
  const f = r.fields;
  const rows: Array<[string, number | null, string]> = [
    ['received', f.received, 'requests stored'],
    ['pending', f.pending, ''],
    ['retrying', f.retrying, ''],
    ['delivering', f.delivering, ''],
    ['held', f.held, f.held > 0 ? 'pending or retrying in a paused bucket' : ''],
    ['delivered', f.delivered, ''],
    ['failed', f.failed, ''],
    ['exhausted', f.exhausted, ''],
    ['none', f.none, 'accepted, no delivery to the bucket destination'],
    ['quarantined', f.quarantined, f.quarantined > 0 ? 'failed verification, never delivered (requests verify --release)' : ''],
    ['duplicate', f.duplicate, f.duplicate > 0 ? 'repeats within the dedup window, never delivered' : ''],
    ['handshake', f.handshake, f.handshake > 0 ? 'URL handshakes answered inline' : ''],
    ['superseded', f.superseded, 'deliveries replaced by a replay'],
    [
      'oldest_pending_age_s',
      f.oldest_pending_age_s,
      f.oldest_pending_age_s === null ? 'nothing waiting' : formatDuration(f.oldest_pending_age_s * 1000),
    ],
    [
      'rejected_total',
      f.rejected_total,
      Object.entries(f.rejected)
        .map(([k, n]) => `${k} ${n}`)
        .join(', '),
    ],
    [
      'deferred_total',
      f.deferred_total,
      f.deferred_total === 0
        ? 'nothing held back'
        : `held back by ${Object.entries(f.deferred)
            .filter(([, n]) => n > 0)
            .map(([k, n]) => `${k} ${n}`)
            .join(', ')}`,
    ],
  ];
  const windowed: Array<[string, number | null, string]> = [
    ['received_in_window', f.received_in_window, ''],
    ['settled', f.settled, 'deliveries that ended delivered, failed or exhausted'],
    [
      'success_rate',
      f.success_rate,
      f.success_rate === null ? 'nothing settled' : `${Math.round((f.success_rate ?? 0) * f.settled)} of ${f.settled} delivered`,
    ],
    ['attempts', f.attempts, ''],
    ['attempt_success_rate', f.attempt_success_rate, f.attempt_success_rate === null ? 'no attempts' : ''],
    ['latency_p50_ms', f.latency_p50_ms, ''],
    ['latency_p99_ms', f.latency_p99_ms, ''],
  ];
  const width = Math.max(...[...rows, ...windowed].map(([k]) => k.length));
  const vwidth = Math.max(...[...rows, ...windowed].map(([, v]) => formatNumber(v).length));
  const line = ([k, v, note]: [string, number | null, string]) =>
    `  ${k.padEnd(width)}  ${formatNumber(v).padStart(vwidth)}${note ? `  ${note}` : ''}`;
  const out = [
    scopeText(r),
    '',
    'now:',
    ...rows.map(line),
    '',
    `last ${formatDuration(r.windowMs)} (to the bucket destination; --to replays left out):`,
    ...windowed.map(line),
  ];
  if (r.perBucket.length > 0) {
    out.push(
      '',
      table(
        ['BUCKET', 'RECEIVED', 'WAITING', 'DELIVERED', 'FAILED', 'EXHAUSTED', 'NONE', 'SUCCESS_RATE', 'P99_MS'],
        r.perBucket.map(({ bucket, fields: b }) => [
          bucket,
          b.received,
          b.pending + b.retrying + b.delivering + b.held,
          b.delivered,
          b.failed,
          b.exhausted,
          b.none,
          formatNumber(b.success_rate),
          formatNumber(b.latency_p99_ms),
        ]),
      ),
    );
  }
  out.push('', ...processesText(r.processes, r.untilMs));
  if (r.stuck.length > 0) out.push('', ...stuckLines(r.stuck));
  return out.join('\n');
}

function processesText(processes: readonly ProcessRecord[], nowMs: number): string[] {
  const w = workerFigures(processes);
  const head = `processes: ${w.workers_alive} worker${w.workers_alive === 1 ? '' : 's'} alive`;
  if (processes.length === 0) return [`${head} (none registered; a worker or serve registers when it starts)`];
  const out = [
    head,
    table(
      ['ID', 'ROLES', 'HOST', 'PID', 'STATE', 'LAST_BEAT', 'IN_FLIGHT'],
      processes.map((p) => [
        p.id,
        p.roles.join(','),
        p.host,
        p.pid,
        p.alive ? 'alive' : p.stoppedAt !== null ? 'stopped' : 'dead',
        `${formatDuration(Math.max(0, nowMs - p.heartbeatAt))} ago`,
        p.inflight,
      ]),
    ),
  ];
  if (w.delivering_dead_worker > 0) {
    out.push(
      `${w.delivering_dead_worker} deliveries are leased to workers that are no longer alive: they are due again once their lease ends (--lease)`,
    );
  }
  return out;
}

export function makeStatsCommand(io: CliIo): Command {
  return new Command('stats')
    .description('delivery figures for a bucket (or all buckets together): requests by state now, success rate and latency over a window')
    .argument('[bucket]', 'one bucket (default: every bucket together, and each one in --json)', bucketNameArg)
    .option('--window <duration>', 'the window for the rates and latency (default 1h)', positiveDurationMsArg)
    .option('--json', 'print JSON with the documented field names (the names health --fail-on uses)')
    .addHelpText(
      'after',
      `
Counts by state are the database as it is now; received_in_window, settled, success_rate, attempts,
attempt_success_rate and latency_p50_ms/latency_p99_ms cover the window. Rates and percentiles are
null when there is nothing to compute them from. deferred (by reason: rate, retry_budget,
retry_after, replay_rate) counts the times the drain held a bucket's line back, since the bucket
was made. Field names: README "stats".

Examples:
  $ hookbucket stats
  $ hookbucket stats stripe --window 15m
  $ hookbucket stats stripe --json | jq .success_rate`,
    )
    .action(async (bucket: string | undefined, opts: { window?: number; json?: boolean }, cmd: Command) =>
      withStore(cmd, io, async (store) => {
        const report = await reportOf(store, bucket, opts.window ?? DEFAULT_WINDOW_MS, configFor(cmd, io).leaseMs);
        if (opts.json) printJson(io, statsJson(report));
        else print(io, statsText(report));
      }),
    );
}

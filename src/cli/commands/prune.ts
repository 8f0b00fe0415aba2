import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { DEFAULT_PRUNE_STATES, formatAge, pruneCutoff } from '../../retention/rules.js';
import { systemClock } from '../../shared/clock.js';
import type { PrunableState, PruneCounts, PruneResult } from '../../store/store.js';
import { withStore } from '../context.js';
import { positiveDurationMsArg } from '../drain-options.js';
import { iso, print, printJson, table, type CliIo } from '../io.js';
import { bucketNameArg } from '../parsers.js';
import { createProgress } from '../progress.js';

import { pruneStatesArg } from '../../options/bucket-settings.js';

export { pruneStatesArg };

interface PruneOpts {
  olderThan: number;
  bucket?: string;
  state?: PrunableState[];
  dryRun?: boolean;
  json?: boolean;
}

const countsJson = (c: PruneCounts) => ({
  requests: c.requests,
  bytes: c.bytes,
  deliveries: c.deliveries,
  attempts: c.attempts,
  kept_live: c.keptLive,
});

/** Stable JSON shape (README "JSON fields"). */
export function pruneJson(
  r: PruneResult,
  o: { dryRun: boolean; olderThanMs: number; receivedBeforeMs: number; states: readonly PrunableState[] },
) {
  return {
    dry_run: o.dryRun,
    older_than_ms: o.olderThanMs,
    received_before: iso(o.receivedBeforeMs),
    states: o.states,
    ...countsJson(r),
    reclaimed_bytes: r.reclaimedBytes,
    buckets: Object.fromEntries(Object.entries(r.buckets).map(([name, c]) => [name, countsJson(c)])),
  };
}

export function makePruneCommand(io: CliIo): Command {
  return new Command('prune')
    .description(
      'delete old requests that are done with (delivered by default), with their deliveries and attempts, and give the disk back',
    )
    .requiredOption('--older-than <duration>', 'only requests received longer ago than this, like 30d or 12h', positiveDurationMsArg)
    .option('--bucket <name>', 'only this bucket (default: every bucket)', bucketNameArg)
    .option('--state <list>', 'the states to prune: delivered, failed, exhausted, none (default delivered)', pruneStatesArg)
    .option('--dry-run', 'count what would go; delete nothing')
    .option('--json', 'print JSON')
    .addHelpText(
      'after',
      `
Only delivered requests go unless --state names others (failed, exhausted and none are evidence you
may still want to replay). A request with any live delivery (pending, retrying or delivering, to any
destination, a replay --to included) is never pruned, whatever its state. Deletes run in batches of
at most 500 requests and 8 MiB, so ingest never waits long; then freed pages go back to the disk.

Examples:
  $ hookbucket prune --older-than 30d --dry-run
  $ hookbucket prune --older-than 30d
  $ hookbucket prune --older-than 7d --bucket stripe --state delivered,failed,exhausted --json`,
    )
    .action(async (opts: PruneOpts, cmd: Command) =>
      withStore(cmd, io, async (store) => {
        const states = opts.state ?? [...DEFAULT_PRUNE_STATES];
        const dryRun = opts.dryRun === true;
        const receivedBeforeMs = pruneCutoff(systemClock.now(), opts.olderThan);
        const options = { ...(opts.bucket !== undefined ? { bucket: opts.bucket } : {}), receivedBeforeMs, states, dryRun };
        const progress = createProgress(io);
        let result: PruneResult;
        try {
          // On a TTY a counting pass first gives the bar its total.
          const total = io.stderr.isTTY && !dryRun ? (await store.prune({ ...options, dryRun: true })).requests : 0;
          result = await store.prune(options, {
            onProgress: (p) =>
              p.phase === 'delete'
                ? progress.update(
                    p.requests,
                    Math.max(total, p.requests),
                    `${p.requests} request(s), ${formatSize(p.bytes)} ${dryRun ? 'found' : 'pruned'} (${p.bucket})`,
                  )
                : progress.update(1, 1, `gave back ${formatSize(p.reclaimedBytes)} of disk`),
          });
        } finally {
          progress.stop();
        }
        const meta = { dryRun, olderThanMs: opts.olderThan, receivedBeforeMs, states };
        if (opts.json) return printJson(io, pruneJson(result, meta));
        const verb = dryRun ? 'would prune' : 'pruned';
        const lines = [
          `${verb} ${result.requests} request(s) (${formatSize(result.bytes)} of bodies) with ${result.deliveries} deliveries and ${result.attempts} attempts: ` +
            `${states.join(', ')}, received before ${iso(receivedBeforeMs)} (older than ${formatAge(opts.olderThan)}), ${opts.bucket ?? 'all buckets'}`,
        ];
        if (result.keptLive > 0)
          lines.push(`kept ${result.keptLive} old request(s) that still have a live delivery (pending, retrying or delivering)`);
        if (!dryRun && result.requests > 0) lines.push(`gave back ${formatSize(result.reclaimedBytes)} of disk`);
        const buckets = Object.entries(result.buckets).filter(([, c]) => c.requests > 0 || c.keptLive > 0);
        if (opts.bucket === undefined && buckets.length > 0) {
          lines.push(
            '',
            table(
              ['BUCKET', 'REQUESTS', 'SIZE', 'KEPT LIVE'],
              buckets.map(([name, c]) => [name, c.requests, formatSize(c.bytes), c.keptLive]),
            ),
          );
        }
        print(io, lines.join('\n'));
      }),
    );
}

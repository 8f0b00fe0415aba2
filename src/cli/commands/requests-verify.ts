import { Command } from 'commander';
import { isRemoteStore } from '../../remote/remote-store.js';
import { systemClock } from '../../shared/clock.js';
import type { Store } from '../../store/store.js';
import {
  addSummary,
  emptySummary,
  planBucket,
  planIds,
  verifyStep,
  type VerifyStep,
  type VerifySummary,
  type VerifyTarget,
} from '../../verify/recheck.js';
import { withStore } from '../context.js';
import { addFilterOptions, filterFromOptions, type FilterOptions } from '../filter-options.js';
import { print, printJson, usage, type CliIo } from '../io.js';
import { bucketNameArg } from '../parsers.js';
import { createProgress } from '../progress.js';

interface VerifyOpts extends FilterOptions {
  bucket?: string;
  release?: boolean;
  json?: boolean;
}

/**
 * One batch of a target: here on the database, or through --api by the server (which holds the
 * secrets), with the same walk and verdicts (src/verify/recheck.ts).
 */
function stepper(store: Store, release: boolean): (target: VerifyTarget, cursor: string | null) => Promise<VerifyStep> {
  if (isRemoteStore(store)) return (target, cursor) => store.verifyStep(target.bucket.name, target.filter, cursor, release);
  return (target, cursor) => verifyStep(store, store, target, cursor, { release, nowMs: systemClock.now() });
}

/** Re-checks each target to its end, batch by batch, with a progress bar on a terminal. */
async function run(io: CliIo, store: Store, targets: readonly VerifyTarget[], release: boolean): Promise<VerifySummary> {
  const step = stepper(store, release);
  const summary = emptySummary();
  const progress = createProgress(io);
  try {
    let total = 0;
    for (const t of targets) total += t.filter.ids?.length ?? (await store.countRequests(t.bucket.name, t.filter));
    for (const t of targets) {
      let cursor: string | null = null;
      do {
        const done: VerifyStep = await step(t, cursor);
        addSummary(summary, done.summary);
        cursor = done.next;
        progress.update(summary.checked, Math.max(total, summary.checked), `${summary.checked}/${total} requests checked`);
      } while (cursor !== null);
    }
  } finally {
    progress.stop();
  }
  return summary;
}

export function makeRequestsVerifyCommand(io: CliIo): Command {
  return addFilterOptions(
    new Command('verify')
      .description("re-check stored requests against the bucket's current verify secrets and update their verdicts")
      .argument('[ids...]', 'request ids (or --bucket with filters)'),
  )
    .option('--bucket <name>', 'every request of this bucket matching the filters (oldest first)', bucketNameArg)
    .option('--release', 'quarantined requests that now verify become accepted and go on to delivery')
    .option('--json', 'print a JSON summary')
    .addHelpText(
      'after',
      `
The recovery path after fixing a mistyped secret: each request is checked over its exact stored
bytes with the bucket's current secrets (any one matching passes), the timestamp tolerance measured
from when it was received, and its stored verdict is replaced. With --release, a quarantined
request that now verifies is accepted and gets its first delivery (when the bucket has a
destination). Requests that still fail stay as they are; nothing is deleted.

On a bucket with --dedup, a released request is checked like one arriving at its received time:
if another request with its key was accepted meanwhile (the sender's retry, verified after the
fix), it becomes a duplicate of that one and is not delivered; otherwise it registers its key
until received time + --dedup-window. --json counts these as "duplicates", apart from "released".

With --api, the server re-checks them (it holds the secrets), one batch per call of its
POST /api/buckets/{name}/verify; the output and exit codes are those of a run with --db.

Exit codes: 0 it ran (even if some requests still fail), 2 usage or the bucket has no --verify
(verify_not_configured), 4 unknown bucket or request id, 1 other errors.

Examples:
  $ hookbucket bucket update stripe --verify-secret whsec_…
  $ hookbucket requests verify --bucket stripe --state quarantined --release
  $ hookbucket requests verify --bucket stripe --since 2h --json
  $ hookbucket requests verify 019ae0c4-… 019ae0c5-… --release`,
    )
    .action(async (ids: string[], opts: VerifyOpts, cmd: Command) => {
      if (ids.length > 0 && opts.bucket !== undefined) throw usage('give request ids or --bucket, not both');
      if (ids.length === 0 && opts.bucket === undefined) throw usage('give request ids or --bucket <name>');
      const filter = filterFromOptions(opts, systemClock.now());
      if (ids.length > 0 && Object.keys(filter).length > 0) throw usage('filters go with --bucket, not with request ids');
      await withStore(cmd, io, async (store) => {
        // Everything is checked before anything changes: an unknown bucket or id, or one that does not verify.
        const targets = opts.bucket !== undefined ? [await planBucket(store, opts.bucket, filter)] : await planIds(store, ids);
        const summary = await run(io, store, targets, opts.release === true);
        if (opts.json) return printJson(io, summary);
        print(
          io,
          `checked ${summary.checked}: ${summary.verified} verified, ${summary.invalid} invalid, ${summary.missing} missing, ${summary.expired} expired` +
            (opts.release
              ? `; ${summary.released} released from quarantine, ${summary.duplicates} duplicate${summary.duplicates === 1 ? '' : 's'} (not delivered)`
              : ''),
        );
      });
    });
}

import { Command } from 'commander';
import { formatDuration, formatSize } from '../../config/units.js';
import { DEFAULT_RETRY_ON, formatRetryOn } from '../../policy/classify.js';
import { BUDGET_WINDOW_SECONDS, describeRetryBudget } from '../../policy/retry-budget.js';
import { formatRate } from '../../policy/token-bucket.js';
import { AppError, bucketNotFound, ExitCode, ExitWith } from '../../shared/errors.js';
import { ask, CONFIRM_ABOVE, confirmationFor } from '../confirm.js';
import { DEFAULT_DRAIN } from '../../store/bucket-defaults.js';
import { RETENTION_INTERVAL_MS } from '../../retention/retention-loop.js';
import { formatAge } from '../../retention/rules.js';
import type { Bucket, BucketCounts, DrainSettings, Store } from '../../store/store.js';
import { bucketUrlText, ingestBaseUrl, parsePublicUrl, recordedUrl, type IngestBaseUrl } from '../../policy/public-url.js';
import { configFor, withStore } from '../context.js';
import { isRemoteStore } from '../../remote/remote-store.js';
import { checkTimeoutFitsLease, currentLease } from '../../options/lease-check.js';
import { checkDestinationAllowed } from '../../options/destination-check.js';
import { stuckBuckets, stuckText } from '../../policy/lease-fit.js';
import { stuckJson } from '../../stats/stats-report.js';
import { systemClock } from '../../shared/clock.js';
import { addDeliveryOptions, describeSchedule, positiveDurationMsArg } from '../drain-options.js';
import { iso, print, printJson, table, terminalSafe, type CliIo } from '../io.js';
import { ackStatusArg, bucketNameArg, contentTypeArg, maxBodyArg, urlArg } from '../parsers.js';
import { isSecretKey, REDACTED, redactUrl } from '../../policy/redact.js';
import { escapeJsonText, escapeTerminal } from '../../policy/terminal-text.js';
import { bucketPatchFrom as patchFrom, pruneStatesArg, type BucketSettingsOpts } from '../../options/bucket-settings.js';
import { bucketJson, fingerprintsOf } from '../../json/bucket-json.js';
import { addProviderOptions, type ProviderFlags, resolveProviderSecrets } from '../provider-options.js';
import { answeredHandshakes } from '../../options/provider-settings.js';
import { dedupKeyText, providerDedupKey } from '../../policy/dedup.js';
import { schemeText } from '../../policy/verify.js';
import { printErr } from '../io.js';

export { bucketJson };

/**
 * HOOKBUCKET_PUBLIC_URL from the environment, else `.env` (read here, not through configFor: with
 * --api no local configuration is loaded); undefined when unset, a usage error when not a URL.
 */
function publicUrlOf(io: CliIo): string | undefined {
  const raw = io.env.HOOKBUCKET_PUBLIC_URL ?? io.dotenv.HOOKBUCKET_PUBLIC_URL;
  if (raw === undefined || raw.trim() === '') return undefined;
  const url = parsePublicUrl(raw);
  if (url === undefined) {
    throw new AppError(
      'invalid_option',
      `invalid HOOKBUCKET_PUBLIC_URL: ${JSON.stringify(raw)} (an http:// or https:// URL without credentials, query or fragment, like https://hooks.example.com)`,
    );
  }
  return url;
}

/** Where senders reach a bucket: HOOKBUCKET_PUBLIC_URL, else the address a live serve recorded, else a labelled placeholder. */
async function ingestBaseFor(publicUrl: string | undefined, store: Store): Promise<IngestBaseUrl> {
  if (publicUrl !== undefined) return ingestBaseUrl(publicUrl, []);
  let recorded: string[] = [];
  try {
    recorded = (await store.processes(systemClock.now()))
      .filter((p) => p.alive && p.roles.includes('receiver'))
      .map((p) => recordedUrl(p.info))
      .filter((u): u is string => u !== undefined);
  } catch {
    // Nothing recorded to read (an older server behind --api): the placeholder says so.
  }
  return ingestBaseUrl(undefined, recorded);
}

interface BucketOpts extends BucketSettingsOpts, ProviderFlags {
  json?: boolean;
  reveal?: boolean;
  force?: boolean;
  yes?: boolean;
}

/** The destination for people: its userinfo and secret query values redacted unless `reveal`, escaped. */
function destinationText(url: string, reveal: boolean): string {
  return escapeTerminal(reveal ? url : redactUrl(url));
}

function showText(b: Bucket, counts: BucketCounts, base: IngestBaseUrl, reveal: boolean): string {
  const lines = [
    `name              ${escapeTerminal(b.name)}`,
    ...(b.deletingAt !== null
      ? [
          `deleting          since ${iso(b.deletingAt)}: ${counts.requests} request(s) left to purge; ingest refuses it (404) and nothing is sent; ` +
            `finish with: hookbucket bucket delete ${escapeTerminal(b.name)} (a running serve also finishes it in the background)`,
        ]
      : []),
    `url               ${escapeTerminal(bucketUrlText(base, b.name))}`,
    `destination       ${b.destination === null ? '(none: requests are stored only)' : destinationText(b.destination, reveal)}`,
    `max body          ${formatSize(b.maxBody)} (${b.maxBody} bytes)`,
    `ack               ${b.ackStatus} ${b.ackBody === null ? '{"id":"<id>"}' : escapeJsonText(JSON.stringify(b.ackBody))}${b.ackContentType ? ` (${escapeTerminal(b.ackContentType)})` : ''}`,
    ...drainText(b, reveal),
    ...providerText(b),
    `created           ${iso(b.createdAt)}`,
    `updated           ${iso(b.updatedAt)}`,
    `requests          ${counts.requests} (${formatSize(counts.bytes)})`,
  ];
  const states = Object.entries(counts.states);
  lines.push(`by state          ${states.length ? states.map(([s, n]) => `${s} ${n}`).join(', ') : '-'}`);
  const rej = Object.entries(counts.rejections);
  lines.push(`rejected          ${rej.length ? rej.map(([r, n]) => `${r} ${n}`).join(', ') : 'none'}`);
  return lines.join('\n');
}

/** The drain settings for people; credential-looking forwarded header values are redacted unless `reveal`. */
function drainText(b: Bucket, reveal: boolean): string[] {
  const d = b.drain;
  const { fraction, floorPerSecond } = d.retryBudget;
  const lines = [
    `rate              ${d.rate === null ? 'no rate cap' : `${formatRate(d.rate)}, burst ${d.burst}`}`,
    `concurrency       ${d.concurrency} attempt(s) in flight at most`,
    `timeout           ${formatDuration(d.timeoutMs)} per attempt`,
    `schedule          ${describeSchedule(d.schedule)}`,
    `retry on          ${formatRetryOn(d.retryOn ?? DEFAULT_RETRY_ON)}${d.retryOn === null ? ' (default)' : ''}`,
    `retry budget      ${fraction} per first attempt, floor ${floorPerSecond}/s: allowed retries per ${BUDGET_WINDOW_SECONDS} s = ${fraction} × first attempts + ${floorPerSecond} × ${BUDGET_WINDOW_SECONDS}`,
    `                  ${describeRetryBudget(d.retryBudget)}`,
    `forward path      ${forwardPathText(d)}`,
  ];
  if (d.forwardHeaders.length === 0) lines.push('forward headers   none');
  d.forwardHeaders.forEach(([name, value], i) => {
    const shown = !reveal && isSecretKey(name, 'header') ? REDACTED : value;
    lines.push(`${i === 0 ? 'forward headers   ' : ' '.repeat(18)}${escapeTerminal(name)}: ${escapeTerminal(shown)}`);
  });
  lines.push(
    `paused            ${b.pausedAt !== null ? `yes, since ${iso(b.pausedAt)}: deliveries held, ingest keeps storing` : b.paused ? 'yes' : 'no'}`,
    `retention         ${
      b.retainMs === null
        ? 'off: requests are kept until pruned (hookbucket prune)'
        : `serve prunes ${b.retainStates.join(', ')} requests older than ${formatAge(b.retainMs)} every ${formatDuration(RETENTION_INTERVAL_MS)} (never one with a live delivery)`
    }`,
  );
  return lines;
}

/** The provider settings for people: secrets as fingerprints, tokens as set or not (never shown, --reveal included). */
export function providerText(b: Bucket): string[] {
  const p = b.provider;
  const lines: string[] = [];
  if (p.verify === null) lines.push('verify            off: every sender is taken at its word');
  else {
    const fps = fingerprintsOf(p.verify);
    lines.push(
      `verify            ${escapeTerminal(schemeText(p.verify.scheme))} (${fps.length} secret${fps.length === 1 ? '' : 's'}: ${fps.join(', ')}), ` +
        `tolerance ${formatDuration(p.verify.toleranceMs)}, invalid → ${p.verify.onInvalid}`,
    );
  }
  const answered = answeredHandshakes(p);
  lines.push(
    `handshakes        ${
      answered.length === 0
        ? 'none'
        : answered
            .map((h) => {
              if (!p.handshakes.includes(h)) return `${h} (from --verify)`;
              if (h === 'graph') return `graph${p.graphClientState !== null ? ' (clientState checked)' : ''}`;
              return h;
            })
            .join(', ')
    }`,
  );
  if (p.verifyToken !== null || answered.includes('meta'))
    lines.push(`verify token      ${p.verifyToken !== null ? 'set (never shown)' : 'not set: the meta handshake answers 403'}`);
  if (p.graphClientState !== null) lines.push('graph state       set (never shown): notifications without it are refused');
  lines.push(`methods           ${p.methods === null ? 'any' : `${p.methods.join(', ')} (others get 405)`}`);
  if (p.dedup === null) lines.push('dedup             off');
  else {
    const k = p.dedup.key;
    const via = k.kind === 'provider' ? providerDedupKey(p.verify === null ? null : p.verify.scheme.kind) : null;
    lines.push(
      `dedup             ${escapeTerminal(dedupKeyText(k))}${via !== null ? ` (${escapeTerminal(dedupKeyText(via))})` : ''}, window ${formatDuration(p.dedup.windowMs)}`,
    );
  }
  if (p.sign === null) lines.push('sign              off');
  else {
    const fps = fingerprintsOf(p.sign);
    lines.push(`sign              ${p.sign.scheme} (${fps.length} secret${fps.length === 1 ? '' : 's'}: ${fps.join(', ')})`);
  }
  return lines;
}

/** `--sign-secret generate`: the new secret, once. With --json it is in the JSON instead (`generated_sign_secret`). */
function printGenerated(io: CliIo, secret: string | null): void {
  if (secret === null) return;
  printErr(
    io,
    `generated signing secret (shown this once; hookbucket keeps it but never prints it again, give it to the consumer now):\n${secret}`,
  );
}

function forwardPathText(d: DrainSettings): string {
  if (!d.forwardPath)
    return `off: every request goes to the destination as it is${d.forwardRawPath ? ' (raw path kept for when it is on)' : ''}`;
  if (d.forwardRawPath)
    return 'on, raw: the sub-path after /b/<name> is appended as stored, dot-segments included (unsafe behind a path-normalising proxy)';
  return 'on: the sub-path after /b/<name> is appended without dot-segments or empty segments, never above the destination path';
}

function addBucketSettings(cmd: Command, forUpdate: boolean): Command {
  cmd
    .option(
      '--destination <url>',
      'consumer URL the drain worker forwards to (the destinations setting may refuse it: hookbucket settings --help)',
      urlArg,
    )
    .option('--max-body <size>', 'largest body accepted, at most 100MiB (default 25MiB)', maxBodyArg)
    .option('--ack-status <code>', '2xx status answered to the sender (default 200)', ackStatusArg)
    .option('--ack-body <text>', 'body answered to the sender (default {"id":"<id>"})')
    .option('--ack-content-type <type>', 'content type of the ack body', contentTypeArg);
  if (forUpdate) {
    cmd
      .option('--no-destination', 'remove the destination (store only)')
      .option('--no-ack-body', 'answer the default {"id":"<id>"} again')
      .option('--no-ack-content-type', 'use the default content type again');
  }
  cmd
    .option(
      '--retain <duration>',
      "serve prunes this bucket's requests older than this, like 30d (the prune rules: delivered only, unless --retain-state)",
      positiveDurationMsArg,
    )
    .option('--retain-state <list>', 'the states --retain prunes: delivered, failed, exhausted, none (default delivered)', pruneStatesArg);
  if (forUpdate) cmd.option('--no-retain', 'keep requests until pruned by hand (retention off)');
  addDeliveryOptions(cmd, forUpdate);
  addProviderOptions(cmd, forUpdate);
  return cmd.option('--json', 'print JSON');
}

export function makeBucketCommand(io: CliIo): Command {
  const bucket = new Command('bucket')
    .description('create, inspect, change, pause and delete buckets')
    .addHelpText(
      'after',
      '\nExamples:\n  $ hookbucket bucket create stripe --destination http://localhost:3000/hooks\n  $ hookbucket bucket list\n  $ hookbucket bucket show stripe --json\n  $ hookbucket bucket pause stripe',
    );

  bucket.addCommand(
    addBucketSettings(new Command('create'), false)
      .description('create a bucket; webhooks then go to <url>/b/<name> (url: HOOKBUCKET_PUBLIC_URL, else the running serve)')
      .argument('<name>', 'bucket name, ^[a-z0-9][a-z0-9_-]{0,62}$', bucketNameArg)
      .addHelpText(
        'after',
        `
Examples:
  $ hookbucket bucket create stripe --destination http://localhost:3000/webhooks/stripe
  $ hookbucket bucket create slack --ack-status 200 --ack-body ok --ack-content-type text/plain
  $ hookbucket bucket create uploads --max-body 100MiB --json
  $ hookbucket bucket create github --destination http://localhost:3000/gh --rate 20/s --burst 5 --concurrency 4
  $ hookbucket bucket create shop --destination https://api.example.com/shop --timeout 30s \\
      --base 1m --multiplier 2 --cap 1h --give-up 48h --jitter full --retry-on 5xx,429,network,timeout
  $ hookbucket bucket create relay --destination https://api.example.com/in --no-forward-path \\
      --forward-header "Authorization: Bearer abc123" --forward-header "X-Source: hookbucket" \\
      --retry-budget 0.2 --retry-floor 30/m
  $ hookbucket bucket create stripe --destination http://localhost:3000/hooks --retain 30d
  $ hookbucket bucket create archive --retain 7d --retain-state none   # store-only: requests stay in state none
  $ hookbucket bucket create stripe --verify stripe --verify-secret whsec_... --dedup provider --sign-secret generate
  $ hookbucket bucket create github --verify github --verify-secret-file gh.secret --methods POST
  $ hookbucket bucket create graph --handshake graph --graph-client-state "$STATE"

Secrets: --verify-secret and --verify-secret-file (one per line, chmod 600) together; without
either, --verify reads HOOKBUCKET_VERIFY_SECRET_<BUCKET> (name upper-cased, other characters as _)
from the environment or .env, here and now only: serve reads the stored secret. bucket show prints
fingerprints, never secrets. --sign-secret generate prints the new secret once (stderr; with
--json as generated_sign_secret).`,
      )
      .action(async (name: string, opts: BucketOpts, cmd: Command) => {
        // Options are checked before the database is opened (or created).
        if (opts.retainState !== undefined && opts.retain === undefined)
          throw new AppError('invalid_option', '--retain-state needs --retain <duration>');
        const { opts: provider, generated } = resolveProviderSecrets(opts, name, io);
        const warnings: string[] = [];
        const patch = patchFrom({ ...opts, ...provider }, DEFAULT_DRAIN, undefined, (w) => warnings.push(w));
        const publicUrl = publicUrlOf(io);
        return withStore(cmd, io, async (store) => {
          // Through --api the server checks against its own lease (the API applies the same rule).
          if (!isRemoteStore(store)) {
            await checkTimeoutFitsLease(store, patch, { creating: true, ...leaseNow(cmd, io) });
            await checkDestinationAllowed(store, patch.destination);
          }
          const b = await store.createBucket({ name, ...patch });
          for (const w of warnings) printErr(io, `warning: ${w}`);
          if (opts.json) printJson(io, withGenerated(bucketJson(b), generated));
          else {
            printGenerated(io, generated);
            print(io, `created bucket ${b.name}: send webhooks to ${bucketUrlText(await ingestBaseFor(publicUrl, store), b.name)}`);
            if (b.retainMs !== null && b.destination === null && !b.retainStates.includes('none')) {
              print(io, `note: without a destination its requests stay in state none, which --retain prunes only with --retain-state none`);
            }
          }
        });
      }),
  );

  bucket.addCommand(
    new Command('list')
      .description('list buckets with their request counts')
      .option('--json', 'print JSON')
      .option('--reveal', 'show credentials in destination URLs instead of [redacted]')
      .addHelpText('after', '\nExamples:\n  $ hookbucket bucket list\n  $ hookbucket bucket list --json')
      .action(async (opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const buckets = await store.listBuckets();
          // One set of aggregate queries for every bucket, not one per bucket (10,000 buckets).
          const counts = await store.allBucketCounts();
          const empty: BucketCounts = { requests: 0, bytes: 0, states: {}, rejections: {} };
          const withCounts = buckets.map((b) => ({ b, c: counts.get(b.name) ?? empty }));
          const other = await store.unattributedRejections();
          if (opts.json) {
            return printJson(io, { buckets: withCounts.map(({ b, c }) => bucketJson(b, c)), unattributed_rejections: other });
          }
          if (buckets.length === 0) print(io, 'no buckets yet: hookbucket bucket create <name>');
          else {
            print(
              io,
              table(
                ['NAME', 'REQUESTS', 'SIZE', 'MAX BODY', 'DESTINATION'],
                withCounts.map(({ b, c }) => [
                  b.deletingAt === null ? b.name : `${b.name} (deleting)`,
                  c.requests,
                  formatSize(c.bytes),
                  formatSize(b.maxBody),
                  b.destination === null ? null : opts.reveal ? b.destination : redactUrl(b.destination),
                ]),
              ),
            );
            const deleting = buckets.filter((b) => b.deletingAt !== null);
            if (deleting.length > 0) {
              print(
                io,
                `\ndeleting: ${deleting.map((b) => b.name).join(', ')}: requests left to purge; finish with: hookbucket bucket delete <name>`,
              );
            }
          }
          const refused = Object.entries(other);
          if (refused.length > 0) print(io, `\nrefusals naming no bucket: ${refused.map(([r, n]) => `${r} ${n}`).join(', ')}`);
        }),
      ),
  );

  bucket.addCommand(
    new Command('show')
      .description('show a bucket: settings, counts by state, and ingest refusals by reason')
      .argument('<name>', 'bucket name', bucketNameArg)
      .option('--json', 'print JSON')
      .option('--reveal', 'show credentials in the destination URL and forwarded headers instead of [redacted]')
      .addHelpText('after', '\nExamples:\n  $ hookbucket bucket show stripe\n  $ hookbucket bucket show stripe --json')
      .action(async (name: string, opts: BucketOpts, cmd: Command) => {
        const publicUrl = publicUrlOf(io);
        return withStore(cmd, io, async (store) => {
          const b = await store.getBucket(name);
          if (!b) throw notFound(name);
          const counts = await store.bucketCounts(name);
          // Through --api, the server's view (its workers' leases, its configured default).
          const stuck = isRemoteStore(store)
            ? ((await store.statsReport(name, 60_000)).stuck[0] ?? null)
            : (stuckBuckets([b], await currentLease(store, leaseNow(cmd, io).defaultLeaseMs, systemClock.now()))[0] ?? null);
          if (opts.json) printJson(io, { ...bucketJson(b, counts), stuck: stuck === null ? null : stuckJson(stuck) });
          else {
            print(io, showText(b, counts, await ingestBaseFor(publicUrl, store), opts.reveal === true));
            print(io, `stuck             ${stuck === null ? 'no' : `yes: ${stuckText(stuck)}`}`);
          }
        });
      }),
  );

  bucket.addCommand(
    addBucketSettings(new Command('update'), true)
      .description('change a bucket; options not given stay as they are; serve picks changes up on the next request')
      .argument('<name>', 'bucket name', bucketNameArg)
      .addHelpText(
        'after',
        `
Examples:
  $ hookbucket bucket update stripe --destination https://api.example.com/hooks
  $ hookbucket bucket update stripe --no-destination
  $ hookbucket bucket update slack --no-ack-body
  $ hookbucket bucket update stripe --rate 50/s --burst 10 --timeout 5s
  $ hookbucket bucket update stripe --no-rate --retry-on default
  $ hookbucket bucket update stripe --cap 6h --max-attempts 20      # base, multiplier, jitter stay
  $ hookbucket bucket update stripe --forward-header "X-Env: prod"  # replaces X-Env, keeps the others
  $ hookbucket bucket update stripe --no-forward-header             # removes them all
  $ hookbucket bucket update legacy --forward-raw-path              # ../ sent as stored: only with no normalising proxy
  $ hookbucket bucket update stripe --retain 30d --retain-state delivered,exhausted
  $ hookbucket bucket update stripe --no-retain                     # keep everything again
  $ hookbucket bucket update stripe --verify-secret whsec_new --verify-secret whsec_old   # rotation
  $ hookbucket bucket update stripe --verify-tolerance 10m --on-invalid reject  # secrets stay
  $ hookbucket bucket update stripe --no-verify --no-dedup --no-sign

Schedule flags change only the knobs given (--max-attempts and --give-up replace each other);
the resulting schedule must still work. --no-forward-header with --forward-header sets exactly
the headers given.`,
      )
      .action(async (name: string, opts: BucketOpts, cmd: Command) => {
        // Secret files are read (and refused) before the database is opened.
        const { opts: provider, generated } = resolveProviderSecrets(opts, name, io);
        return withStore(cmd, io, async (store) => {
          // Read, merge, write: two updates of one bucket's schedule at the same moment can lose a
          // knob (last writer wins), which a person at a terminal does not do.
          const current = await store.getBucket(name);
          if (!current) throw notFound(name);
          const warnings: string[] = [];
          const patch = patchFrom({ ...opts, ...provider }, current.drain, current.provider, (w) => warnings.push(w));
          if (!isRemoteStore(store)) {
            await checkTimeoutFitsLease(store, patch, { creating: false, ...leaseNow(cmd, io) });
            await checkDestinationAllowed(store, patch.destination);
          }
          const b = await store.updateBucket(name, patch);
          for (const w of warnings) printErr(io, `warning: ${w}`);
          if (opts.json) printJson(io, withGenerated(bucketJson(b), generated));
          else {
            printGenerated(io, generated);
            print(io, `updated bucket ${b.name}`);
          }
        });
      }),
  );

  bucket.addCommand(
    new Command('pause')
      .description("hold a bucket's deliveries: ingest keeps storing, the drain sends nothing until resume")
      .argument('<name>', 'bucket name', bucketNameArg)
      .option('--json', 'print JSON (the bucket, as bucket show --json without counts)')
      .addHelpText(
        'after',
        `
Time paused does not count toward --give-up. Pausing a paused bucket changes nothing.

Examples:
  $ hookbucket bucket pause stripe
  $ hookbucket bucket pause stripe --json`,
      )
      .action(async (name: string, opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const before = await store.getBucket(name);
          if (!before) throw notFound(name);
          const b = await store.pauseBucket(name);
          if (opts.json) printJson(io, bucketJson(b));
          else if (before.paused) print(io, `bucket ${name} was already paused (since ${iso(b.pausedAt)})`);
          else print(io, `paused bucket ${name}: deliveries held, ingest keeps storing; resume with: hookbucket bucket resume ${name}`);
        }),
      ),
  );

  bucket.addCommand(
    new Command('resume')
      .description("let the drain continue a paused bucket's deliveries from where it stopped")
      .argument('<name>', 'bucket name', bucketNameArg)
      .option('--json', 'print JSON (the bucket, as bucket show --json without counts)')
      .addHelpText(
        'after',
        `
Resuming a bucket that is not paused changes nothing.

Examples:
  $ hookbucket bucket resume stripe
  $ hookbucket bucket resume stripe --json`,
      )
      .action(async (name: string, opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const before = await store.getBucket(name);
          if (!before) throw notFound(name);
          const b = await store.resumeBucket(name);
          if (opts.json) printJson(io, bucketJson(b));
          else if (!before.paused) print(io, `bucket ${name} was not paused`);
          else
            print(io, `resumed bucket ${name} after ${formatDuration(b.pausedTotalMs - before.pausedTotalMs)} paused: the drain continues`);
        }),
      ),
  );

  bucket.addCommand(
    new Command('delete')
      .description('delete a bucket and its stored requests; refuses while requests are undelivered')
      .argument('<name>', 'bucket name', bucketNameArg)
      .option('--force', 'delete even when deliveries are pending, retrying or in flight')
      .option(
        '--yes',
        `do not ask before deleting a bucket holding more than ${CONFIRM_ABOVE} requests (required when not at a terminal, and with --json)`,
      )
      .option('--json', 'print JSON')
      .addHelpText(
        'after',
        `
The bucket first becomes "deleting" (ingest answers 404 for it, nothing of it is sent, the name
cannot be created again), then its requests go in short batches. If that stops (the database
stayed locked, the process was killed), the bucket stays deleting: run the same command again
(no --force needed) to finish, or let a running serve finish it in the background.

A bucket holding more than ${CONFIRM_ABOVE} requests is deleted only after a yes at the terminal's
prompt, or with --yes (required when stdin or stderr is not a terminal, and with --json), as
replay asks. Finishing a bucket already deleting asks nothing.

Exit codes: 0 deleted, 1 not confirmed at the prompt or other errors (bucket_not_empty: add
--force), 2 more than ${CONFIRM_ABOVE} requests without --yes when not at a terminal, 4 unknown bucket.

Examples:
  $ hookbucket bucket delete old-test
  $ hookbucket bucket delete stripe --force
  $ hookbucket bucket delete archive --yes --json     # from a script: no prompt`,
      )
      .action(async (name: string, opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const before = await store.getBucket(name);
          // A bucket already deleting was confirmed when it started: finishing it asks nothing.
          if (before !== undefined && before.deletingAt === null) {
            const { requests } = await store.bucketCounts(name);
            const confirm = confirmationFor(io, requests, { yes: opts.yes === true, json: opts.json === true });
            if (confirm === 'refuse') {
              throw new AppError(
                'confirmation_required',
                `bucket ${name} holds ${requests} requests (more than ${CONFIRM_ABOVE}); add --yes to delete them with it`,
              );
            }
            if (
              confirm === 'ask' &&
              !(await ask(io, `delete bucket ${terminalSafe(name)} and its ${requests} stored requests? [y/N] `, 'not deleted'))
            ) {
              io.stderr.write('not deleted\n');
              throw new ExitWith(ExitCode.failure);
            }
          }
          const r = await store.deleteBucket(name, { force: opts.force === true });
          const finished = before !== undefined && before.deletingAt !== null;
          if (opts.json) printJson(io, { name, deleted: true, requests: r.requests });
          else print(io, `${finished ? 'finished deleting' : 'deleted'} bucket ${name} and ${r.requests} stored request(s)`);
        }),
      ),
  );
  return bucket;
}

/** The configured default lease (HOOKBUCKET_LEASE, .env, 60s) and the time, for the lease check. */
function leaseNow(cmd: Command, io: CliIo): { defaultLeaseMs: number; nowMs: number } {
  return { defaultLeaseMs: configFor(cmd, io).leaseMs, nowMs: systemClock.now() };
}

/** `--sign-secret generate` with --json: the new secret in the JSON, the one time it is printed. */
function withGenerated<T extends object>(j: T, secret: string | null): T | (T & { generated_sign_secret: string }) {
  return secret === null ? j : { ...j, generated_sign_secret: secret };
}

export function notFound(name: string): AppError {
  return bucketNotFound(name);
}

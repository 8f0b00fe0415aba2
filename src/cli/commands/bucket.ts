import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { AppError } from '../../shared/errors.js';
import type { Bucket, BucketCounts, BucketPatch } from '../../store/store.js';
import { withStore } from '../context.js';
import { iso, print, printJson, table, type CliIo } from '../io.js';
import { ackStatusArg, bucketNameArg, contentTypeArg, maxBodyArg, urlArg } from '../parsers.js';

/** Stable JSON shape of a bucket (README "JSON fields"). */
export function bucketJson(b: Bucket, counts?: BucketCounts) {
  return {
    name: b.name,
    destination: b.destination,
    max_body: b.maxBody,
    ack_status: b.ackStatus,
    ack_body: b.ackBody,
    ack_content_type: b.ackContentType,
    paused: b.paused,
    created_at: iso(b.createdAt),
    updated_at: iso(b.updatedAt),
    ...(counts
      ? { requests: counts.requests, bytes: counts.bytes, states: counts.states, rejections: counts.rejections }
      : {}),
  };
}

interface BucketOpts {
  destination?: string | false;
  maxBody?: number;
  ackStatus?: number;
  ackBody?: string | false;
  ackContentType?: string | false;
  json?: boolean;
  force?: boolean;
}

function patchFrom(o: BucketOpts): BucketPatch {
  if ((o.ackStatus === 204 || o.ackStatus === 205) && typeof o.ackBody === 'string') {
    throw new AppError('invalid_option', `--ack-status ${o.ackStatus} answers without a body; drop --ack-body`);
  }
  const p: BucketPatch = {};
  if (o.destination !== undefined) p.destination = o.destination === false ? null : o.destination;
  if (o.maxBody !== undefined) p.maxBody = o.maxBody;
  if (o.ackStatus !== undefined) p.ackStatus = o.ackStatus;
  if (o.ackBody !== undefined) p.ackBody = o.ackBody === false ? null : o.ackBody;
  if (o.ackContentType !== undefined) p.ackContentType = o.ackContentType === false ? null : o.ackContentType;
  return p;
}

function showText(b: Bucket, counts: BucketCounts, baseUrlHint: string): string {
  const lines = [
    `name              ${b.name}`,
    `url               ${baseUrlHint}/b/${b.name}`,
    `destination       ${b.destination ?? '(none: requests are stored only)'}`,
    `max body          ${formatSize(b.maxBody)} (${b.maxBody} bytes)`,
    `ack               ${b.ackStatus} ${b.ackBody === null ? '{"id":"<id>"}' : JSON.stringify(b.ackBody)}${b.ackContentType ? ` (${b.ackContentType})` : ''}`,
    `paused            ${b.paused ? 'yes' : 'no'}`,
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

function addBucketSettings(cmd: Command, forUpdate: boolean): Command {
  cmd
    .option('--destination <url>', 'consumer URL the drain worker forwards to', urlArg)
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
  return cmd.option('--json', 'print JSON');
}

export function makeBucketCommand(io: CliIo): Command {
  const bucket = new Command('bucket')
    .description('create, inspect, change and delete buckets')
    .addHelpText('after', '\nExamples:\n  $ hookbucket bucket create stripe --destination http://localhost:3000/hooks\n  $ hookbucket bucket list\n  $ hookbucket bucket show stripe --json');

  bucket.addCommand(
    addBucketSettings(new Command('create'), false)
      .description('create a bucket; webhooks then go to http://HOST:8787/b/<name>')
      .argument('<name>', 'bucket name, ^[a-z0-9][a-z0-9_-]{0,62}$', bucketNameArg)
      .addHelpText(
        'after',
        `
Examples:
  $ hookbucket bucket create stripe --destination http://localhost:3000/webhooks/stripe
  $ hookbucket bucket create slack --ack-status 200 --ack-body ok --ack-content-type text/plain
  $ hookbucket bucket create uploads --max-body 100MiB --json`,
      )
      .action(async (name: string, opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const b = await store.createBucket({ name, ...patchFrom(opts) });
          if (opts.json) printJson(io, bucketJson(b));
          else print(io, `created bucket ${b.name}: send webhooks to http://HOST:8787/b/${b.name}`);
        }),
      ),
  );

  bucket.addCommand(
    new Command('list')
      .description('list buckets with their request counts')
      .option('--json', 'print JSON')
      .addHelpText('after', '\nExamples:\n  $ hookbucket bucket list\n  $ hookbucket bucket list --json')
      .action(async (opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const buckets = await store.listBuckets();
          const withCounts = await Promise.all(buckets.map(async (b) => ({ b, c: await store.bucketCounts(b.name) })));
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
                withCounts.map(({ b, c }) => [b.name, c.requests, formatSize(c.bytes), formatSize(b.maxBody), b.destination]),
              ),
            );
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
      .addHelpText('after', '\nExamples:\n  $ hookbucket bucket show stripe\n  $ hookbucket bucket show stripe --json')
      .action(async (name: string, opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const b = await store.getBucket(name);
          if (!b) throw notFound(name);
          const counts = await store.bucketCounts(name);
          if (opts.json) printJson(io, bucketJson(b, counts));
          else print(io, showText(b, counts, 'http://HOST:8787'));
        }),
      ),
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
  $ hookbucket bucket update slack --no-ack-body`,
      )
      .action(async (name: string, opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const b = await store.updateBucket(name, patchFrom(opts));
          if (opts.json) printJson(io, bucketJson(b));
          else print(io, `updated bucket ${b.name}`);
        }),
      ),
  );

  bucket.addCommand(
    new Command('delete')
      .description('delete a bucket and its stored requests; refuses while requests are undelivered')
      .argument('<name>', 'bucket name', bucketNameArg)
      .option('--force', 'delete even when deliveries are pending, retrying or in flight')
      .option('--json', 'print JSON')
      .addHelpText('after', '\nExamples:\n  $ hookbucket bucket delete old-test\n  $ hookbucket bucket delete stripe --force')
      .action(async (name: string, opts: BucketOpts, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const r = await store.deleteBucket(name, { force: opts.force === true });
          if (opts.json) printJson(io, { name, deleted: true, requests: r.requests });
          else print(io, `deleted bucket ${name} and ${r.requests} stored request(s)`);
        }),
      ),
  );
  return bucket;
}

export function notFound(name: string): AppError {
  return new AppError('not_found', `bucket ${name} not found`);
}

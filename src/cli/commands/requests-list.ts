import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { systemClock } from '../../shared/clock.js';
import type { RequestFilter } from '../../store/store.js';
import { shellWord } from '../../transfer/shell-quote.js';
import { requestPageJson } from '../../json/request-json.js';
import { withStore } from '../context.js';
import { addFilterOptions, filterFromOptions, filterJson, parseIds, type FilterOptions } from '../filter-options.js';
import { iso, print, printJson, table, type CliIo } from '../io.js';
import { bucketNameArg, limitArg } from '../parsers.js';
import { targetText } from '../render.js';

/**
 * The flags that give the same selection again, for the "more:" hint. Times are absolute (the
 * resolved `--since 30m`), so the next page continues the same window rather than a later one.
 */
export function filterFlags(filter: RequestFilter): string[] {
  const out: string[] = [];
  const j = filterJson(filter);
  for (const key of ['state', 'since', 'until', 'method', 'path', 'search', 'status', 'id'] as const) {
    const v = j[key];
    if (v === undefined) continue;
    out.push(`--${key}`, shellWord(Array.isArray(v) ? v.join(',') : String(v)));
  }
  for (const h of (j.header as string[] | undefined) ?? []) out.push('--header', shellWord(h));
  return out;
}

export function makeRequestsListCommand(io: CliIo): Command {
  const cmd = new Command('list')
    .description("list a bucket's stored requests, newest first, with their latest generation's state")
    .argument('<bucket>', 'bucket name', bucketNameArg);
  addFilterOptions(cmd)
    .option('--limit <n>', 'rows per page (default 50)', limitArg)
    .option('--cursor <id>', 'continue after this id (printed at the end of the previous page)', (v: string) => parseIds(v)[0]!)
    .option('--json', 'print JSON: { requests: [...], next_cursor }')
    .option('--reveal', 'show secret query values instead of [redacted]')
    .addHelpText(
      'after',
      `
Filters combine: all must hold. A comma list or a repeated --state, --method or --id means any of
them; repeated --header means all of them. --since/--until take a duration before now (30m, 6h, 7d)
or an ISO time (UTC unless it says otherwise). The state, attempts, last status and generation are
the latest generation's (its delivery to the bucket's destination).

Examples:
  $ hookbucket requests list stripe
  $ hookbucket requests list stripe --state exhausted,failed --since 6h
  $ hookbucket requests list github --header X-GitHub-Event=push --status 5xx
  $ hookbucket requests list shopify --path '/orders/**' --search cus_123 --limit 10 --json`,
    )
    .action(
      async (bucket: string, opts: FilterOptions & { limit?: number; cursor?: string; json?: boolean; reveal?: boolean }, c: Command) => {
        const filter = filterFromOptions(opts, systemClock.now());
        await withStore(c, io, async (store) => {
          const limit = opts.limit ?? 50;
          const page = await store.listRequests(bucket, filter, { limit, ...(opts.cursor ? { before: opts.cursor } : {}) });
          const rows = page.requests;
          if (opts.json) {
            return printJson(io, requestPageJson(page));
          }
          if (rows.length === 0) {
            return print(
              io,
              `no requests in ${bucket}${Object.keys(filter).length > 0 ? ' match' : ''}${opts.cursor ? ' after that cursor' : ''}`,
            );
          }
          print(
            io,
            table(
              ['ID', 'RECEIVED', 'METHOD', 'PATH', 'SIZE', 'STATE', 'ATTEMPTS', 'LAST', 'GEN'],
              rows.map((r) => [
                r.id,
                iso(r.receivedAt),
                r.method,
                targetText(r.path, r.query, opts.reveal === true),
                formatSize(r.size),
                r.state,
                r.attempts,
                r.lastStatus,
                r.generation,
              ]),
            ),
          );
          if (page.nextCursor) {
            const again = [
              'hookbucket',
              'requests',
              'list',
              bucket,
              ...filterFlags(filter),
              ...(opts.limit ? ['--limit', String(limit)] : []),
            ];
            print(io, `\nmore: ${again.join(' ')} --cursor ${page.nextCursor}`);
          }
        });
      },
    );
  return cmd;
}

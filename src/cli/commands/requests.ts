import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { AppError } from '../../shared/errors.js';
import type { StoredRequest } from '../../store/store.js';
import { withStore } from '../context.js';
import { iso, print, printJson, table, type CliIo } from '../io.js';
import { bucketNameArg, limitArg } from '../parsers.js';
import { displayHeaders, headerPairs, isUtf8, renderBody } from '../render.js';

/** Stable JSON shape of a stored request (README "JSON fields"). Keeps the stored bytes exactly. */
export function requestJson(r: StoredRequest) {
  const utf8 = isUtf8(r.body);
  return {
    id: r.id,
    bucket: r.bucket,
    received_at: iso(r.receivedAt),
    method: r.method,
    path: r.path,
    query: r.query,
    headers: headerPairs(r.rawHeaders),
    body: utf8 ? r.body.toString('utf8') : r.body.toString('base64'),
    body_encoding: utf8 ? 'utf8' : 'base64',
    size: r.size,
    sha256: r.sha256,
    peer: r.peer,
    state: r.state,
  };
}

function target(path: string, query: string | null): string {
  return `${path || '/'}${query === null ? '' : `?${query}`}`;
}

export function makeRequestsCommand(io: CliIo): Command {
  const requests = new Command('requests')
    .description('inspect stored requests')
    .addHelpText('after', '\nExamples:\n  $ hookbucket requests list stripe\n  $ hookbucket requests show <id> --raw > body.bin');

  requests.addCommand(
    new Command('list')
      .description('list a bucket\'s stored requests, newest first')
      .argument('<bucket>', 'bucket name', bucketNameArg)
      .option('--limit <n>', 'rows per page (default 50)', limitArg)
      .option('--cursor <id>', 'continue after this id (printed at the end of the previous page)')
      .option('--json', 'print JSON: { requests: [...], next_cursor }')
      .addHelpText('after', '\nExamples:\n  $ hookbucket requests list stripe\n  $ hookbucket requests list stripe --limit 10 --json')
      .action(async (bucket: string, opts: { limit?: number; cursor?: string; json?: boolean }, cmd: Command) =>
        withStore(cmd, io, async (store) => {
          const limit = opts.limit ?? 50;
          const rows = await store.listRequests(bucket, { limit, ...(opts.cursor ? { before: opts.cursor } : {}) });
          const next = rows.length === limit ? rows[rows.length - 1]!.id : null;
          if (opts.json) {
            return printJson(io, {
              requests: rows.map((r) => ({
                id: r.id,
                received_at: iso(r.receivedAt),
                method: r.method,
                path: r.path,
                query: r.query,
                size: r.size,
                state: r.state,
                generation: r.generation,
              })),
              next_cursor: next,
            });
          }
          if (rows.length === 0) return print(io, `no requests in ${bucket}${opts.cursor ? ' after that cursor' : ''}`);
          print(
            io,
            table(
              ['ID', 'RECEIVED', 'METHOD', 'PATH', 'SIZE', 'STATE'],
              rows.map((r) => [r.id, iso(r.receivedAt), r.method, target(r.path, r.query), formatSize(r.size), r.state]),
            ),
          );
          if (next) print(io, `\nmore: hookbucket requests list ${bucket} --cursor ${next}`);
        }),
      ),
  );

  requests.addCommand(
    new Command('show')
      .description('show one stored request: headers in their original order and the body')
      .argument('<id>', 'request id (from requests list or the x-hookbucket-request-id header)')
      .option('--raw', 'write the exact body bytes to stdout, nothing else')
      .option('--json', 'print JSON (headers as [name, value] pairs in order; body base64 when not UTF-8)')
      .option('--reveal', 'show credential headers and secret-looking JSON fields instead of [redacted]')
      .addHelpText(
        'after',
        '\nExamples:\n  $ hookbucket requests show 019ae0c4-…\n  $ hookbucket requests show 019ae0c4-… --raw > body.bin\n  $ hookbucket requests show 019ae0c4-… --json | jq .headers',
      )
      .action(async (id: string, opts: { raw?: boolean; json?: boolean; reveal?: boolean }, cmd: Command) => {
        if (opts.raw && opts.json) throw new AppError('usage', '--raw and --json cannot be combined');
        await withStore(cmd, io, async (store) => {
          const r = await store.getRequest(id);
          if (!r) throw new AppError('not_found', `request ${id} not found`);
          if (opts.raw) {
            await new Promise<void>((resolve, reject) => io.stdout.write(r.body, (e) => (e ? reject(e) : resolve())));
            return;
          }
          if (opts.json) return printJson(io, requestJson(r));
          const headers = displayHeaders(r.rawHeaders, opts.reveal === true);
          const contentType = headers.find(([n]) => n.toLowerCase() === 'content-type')?.[1];
          const lines = [
            `id        ${r.id}`,
            `bucket    ${r.bucket}`,
            `received  ${iso(r.receivedAt)}`,
            `request   ${r.method} ${target(r.path, r.query)}`,
            `peer      ${r.peer ?? '-'}`,
            `body      ${formatSize(r.size)}, sha256 ${r.sha256}`,
            `state     ${r.state}`,
            '',
            `headers (${headers.length}, as received${opts.reveal ? '' : '; credentials redacted, --reveal shows them'}):`,
            ...headers.map(([n, v]) => `  ${n}: ${v}`),
            '',
            'body:',
            ...renderBody(r.body, contentType, opts.reveal === true).map((l) => `  ${l}`),
          ];
          print(io, lines.join('\n'));
        });
      }),
  );
  return requests;
}

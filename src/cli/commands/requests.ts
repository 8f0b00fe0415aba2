import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { AppError } from '../../shared/errors.js';
import type { StoredRequest } from '../../store/store.js';
import { withStore } from '../context.js';
import { iso, print, printJson, type CliIo } from '../io.js';
import { displayHeaders, headerPairs, isUtf8, renderBody } from '../render.js';
import { historyJson, timelineLines } from '../timeline.js';
import { makeTailCommand } from './tail.js';
import { makeRequestsExportCommand } from './requests-export.js';
import { makeRequestsImportCommand } from './requests-import.js';
import { makeRequestsListCommand } from './requests-list.js';

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
    .description('inspect, export and import stored requests')
    .addHelpText(
      'after',
      '\nExamples:\n  $ hookbucket requests list stripe --state exhausted,failed --since 2h\n  $ hookbucket requests show <id> --raw > body.bin\n' +
        '  $ hookbucket requests export stripe --state failed --out failed.ndjson\n  $ hookbucket requests import staging failed.ndjson',
    );

  requests.addCommand(makeRequestsListCommand(io));
  requests.addCommand(makeRequestsExportCommand(io));
  requests.addCommand(makeRequestsImportCommand(io));

  requests.addCommand(
    new Command('show')
      .description('show one stored request: headers in their original order, the body, and every delivery generation with its attempts')
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
          const history = await store.requestHistory(r.id);
          if (opts.json) return printJson(io, { ...requestJson(r), deliveries: historyJson(history) });
          const bucket = await store.getBucket(r.bucket);
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
            '',
            ...timelineLines(history, bucket?.destination ?? null),
          ];
          print(io, lines.join('\n'));
        });
      }),
  );
  requests.addCommand(makeTailCommand(io));
  return requests;
}

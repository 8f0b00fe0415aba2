import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { AppError } from '../../shared/errors.js';
import { withStore } from '../context.js';
import { iso, print, printJson, type CliIo } from '../io.js';
import { escapeTerminal } from '../../policy/terminal-text.js';
import { requestJson } from '../../json/request-json.js';
import { displayHeaders, headerLines, renderBody, targetText } from '../render.js';
import { historyJson, timelineLines } from '../timeline.js';
import { makeTailCommand } from './tail.js';
import { makeRequestsExportCommand } from './requests-export.js';
import { makeRequestsImportCommand } from './requests-import.js';
import { makeRequestsListCommand } from './requests-list.js';
import { makeRequestsVerifyCommand } from './requests-verify.js';

export { requestJson };

/** The Trailers block of `requests show`, after the body (where they came on the wire); none without trailers. */
function trailerLines(rawTrailers: readonly string[], reveal: boolean): string[] {
  if (rawTrailers.length === 0) return [];
  return [
    `trailers (${rawTrailers.length / 2}, as received; stored, not forwarded${reveal ? '' : '; credentials redacted'}):`,
    ...headerLines(rawTrailers, reveal),
    '',
  ];
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
  requests.addCommand(makeRequestsVerifyCommand(io));

  requests.addCommand(
    new Command('show')
      .description('show one stored request: headers in their original order, the body, and every delivery generation with its attempts')
      .argument('<id>', 'request id (from requests list or the x-hookbucket-request-id header)')
      .option('--raw', 'write the exact body bytes to stdout, nothing else (to a file or a pipe: a terminal needs --force)')
      .option('--force', 'with --raw: write the bytes even when stdout is a terminal')
      .option('--json', 'print JSON (headers as [name, value] pairs in order; body base64 when not UTF-8)')
      .option('--reveal', 'show credential headers, secret query, form and JSON values instead of [redacted]')
      .addHelpText(
        'after',
        '\nExamples:\n  $ hookbucket requests show 019ae0c4-…\n  $ hookbucket requests show 019ae0c4-… --raw > body.bin\n  $ hookbucket requests show 019ae0c4-… --json | jq .headers',
      )
      .action(async (id: string, opts: { raw?: boolean; json?: boolean; reveal?: boolean; force?: boolean }, cmd: Command) => {
        if (opts.raw && opts.json) throw new AppError('usage', '--raw and --json cannot be combined');
        // The exact bytes can hold terminal escapes (\e]0;…, \e[2J): a terminal gets them only on request.
        if (opts.raw && io.stdout.isTTY === true && opts.force !== true) {
          throw new AppError(
            'raw_to_terminal',
            '--raw writes the exact body bytes, which can drive a terminal; redirect to a file (> body.bin) or a pipe, or add --force',
          );
        }
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
          const reveal = opts.reveal === true;
          const contentType = displayHeaders(r.rawHeaders, true).find(([n]) => n.toLowerCase() === 'content-type')?.[1];
          const lines = [
            `id        ${r.id}`,
            `bucket    ${escapeTerminal(r.bucket)}`,
            `received  ${iso(r.receivedAt)}`,
            `request   ${escapeTerminal(r.method)} ${escapeTerminal(targetText(r.path, r.query, reveal))}`,
            `peer      ${escapeTerminal(r.peer ?? '-')}`,
            `body      ${formatSize(r.size)}, sha256 ${r.sha256}`,
            `state     ${r.state}${r.disposition === 'quarantined' ? ' (failed verification: never delivered; requests verify --release after fixing the secret)' : ''}`,
            ...(r.verdict === null
              ? []
              : [
                  `verified  ${escapeTerminal(r.verdict.scheme)}: ${r.verdict.result}${r.verdict.reason ? ` (${escapeTerminal(r.verdict.reason)})` : ''}`,
                ]),
            ...(r.dedupKey === null ? [] : [`dedup key ${escapeTerminal(r.dedupKey)}`]),
            ...(r.duplicateOf === null ? [] : [`duplicate of ${r.duplicateOf} (never delivered)`]),
            '',
            `headers (${r.rawHeaders.length / 2}, as received${reveal ? '' : '; credentials redacted, --reveal shows them'}):`,
            ...headerLines(r.rawHeaders, reveal),
            '',
            'body:',
            ...renderBody(r.body, contentType, reveal).map((l) => `  ${l}`),
            '',
            ...trailerLines(r.rawTrailers ?? [], reveal),
            ...timelineLines(history, bucket?.destination ?? null, reveal),
          ];
          print(io, lines.join('\n'));
        });
      }),
  );
  requests.addCommand(makeTailCommand(io));
  return requests;
}

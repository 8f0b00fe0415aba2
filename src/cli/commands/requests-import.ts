import { isUtf8 } from 'node:buffer';
import { schemeText } from '../../policy/verify.js';
import { stat } from 'node:fs/promises';
import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { spoolErrorCode } from '../../ingest/spool.js';
import { AppError, bucketNotFound } from '../../shared/errors.js';
import { deletingError, type ImportItem } from '../../store/store.js';
import { ImportCopy } from '../../transfer/import-copy.js';
import {
  ImportFormatError,
  detectFormat,
  fromHarEntry,
  fromNdjsonRecord,
  harEntries,
  type ImportedRequest,
} from '../../transfer/import-format.js';
import { redactUrl } from '../../policy/redact.js';
import { configFor, withStore } from '../context.js';
import { interruptOf, print, printErr, printJson, type CliIo } from '../io.js';
import { bucketNameArg } from '../parsers.js';
import { createProgress } from '../progress.js';

/** Rows and body bytes per import transaction: short write locks, so a running serve never waits long. */
const BATCH_ROWS = 200;
const BATCH_BYTES = 8 * 1024 * 1024; // 8 MiB

/** NDJSON records with their line numbers, read from the private copy as a stream (a file of any size). */
async function* ndjsonRecords(copy: ImportCopy, file: string): AsyncGenerator<{ line: number; request: ImportedRequest }> {
  for await (const l of copy.lines()) {
    if ('notUtf8' in l) throw new AppError('usage', `${file} line ${l.line}: not UTF-8 text`);
    if (l.text.trim() === '') continue;
    let rec: unknown;
    try {
      rec = JSON.parse(l.text);
    } catch (e) {
      throw new AppError('usage', `${file} line ${l.line}: not JSON (${(e as Error).message})`);
    }
    yield { line: l.line, request: parse(() => fromNdjsonRecord(rec), `${file} line ${l.line}`) };
  }
}

function parse(fn: () => ImportedRequest, where: string): ImportedRequest {
  try {
    return fn();
  } catch (e) {
    if (e instanceof ImportFormatError) throw new AppError('usage', `${where}: ${e.message}`);
    throw e;
  }
}

async function firstLine(copy: ImportCopy): Promise<string | undefined> {
  for await (const l of copy.lines()) if ('text' in l && l.text.trim() !== '') return l.text;
  return undefined;
}

/** The private copy of the source in the spool folder, or the error to show: storage trouble there, or the source unreadable. */
async function copyOf(file: string, dir: string, signal: AbortSignal): Promise<ImportCopy> {
  try {
    return await ImportCopy.from(file, dir, signal);
  } catch (e) {
    if (signal.aborted) throw signal.reason;
    const err = e as NodeJS.ErrnoException;
    if (err.code === 'ENOENT' && (err as { path?: string }).path === file) throw new AppError('not_found', `file ${file} not found`);
    if (err.code === 'EISDIR') throw new AppError('usage', `${file} is a directory`);
    if ((err as { path?: string }).path === file) throw new AppError('usage', `${file} cannot be read: ${err.message}`, { cause: e });
    throw new AppError(spoolErrorCode(err), `cannot copy ${file} into ${dir} before importing it: ${err.message}`, { cause: e });
  }
}

export function makeRequestsImportCommand(io: CliIo): Command {
  return new Command('import')
    .description('store the requests of an NDJSON or HAR export in a bucket, as new requests with new ids')
    .argument('<bucket>', 'bucket name', bucketNameArg)
    .argument('<file>', 'a requests export file (NDJSON or HAR, detected); a pipe such as /dev/stdin works too')
    .option('--deliver', "also create each request's first delivery, so the worker forwards it to the bucket's destination")
    .option('--json', 'print a JSON summary { bucket, format, imported, deliveries, first_id, last_id }')
    .addHelpText(
      'after',
      `
Imported requests keep the method, raw path and query, raw header list and body bytes of the
export; they get new ids and are received now. Nothing is delivered unless --deliver is given:
imported fixtures never reach a destination by accident. The file is read once, into a private copy
beside the database, and the whole copy is checked before anything is stored from it: a bad record
stores nothing (exit 2, naming the line or entry), and a file changed during the import cannot
change what is stored. Refused: anything ingest would refuse (TRACE, CONNECT, control bytes in
header values, a second Host, Transfer-Encoding other than chunked), invalid base64, a
Content-Length other than the body's length, Content-Length with Transfer-Encoding, and bodies
over the bucket's --max-body.

Examples:
  $ hookbucket requests export stripe --state failed --out failed.ndjson
  $ hookbucket requests import staging failed.ndjson
  $ hookbucket requests import staging stripe.har --deliver --json
  $ gunzip -c failed.ndjson.gz | hookbucket requests import staging /dev/stdin`,
    )
    .action(async (bucket: string, file: string, opts: { deliver?: boolean; json?: boolean }, c: Command) => {
      const config = configFor(c, io);
      try {
        if ((await stat(file)).isDirectory()) throw new AppError('usage', `${file} is a directory`);
      } catch (e) {
        if ((e as { code?: string }).code === 'ENOENT') throw new AppError('not_found', `file ${file} not found`);
        throw e;
      }
      // Ctrl-C or SIGTERM: reading and checking stop at once (nothing is stored yet); storing stops
      // after the batch in flight commits, and a note says what was stored (interrupt.ts).
      const held = interruptOf(io).hold();
      const { signal } = held;
      const stopIfInterrupted = () => {
        if (signal.aborted) throw signal.reason;
      };
      await withStore(c, io, async (store) => {
        const b = await store.getBucket(bucket);
        if (!b) throw bucketNotFound(bucket);
        if (b.deletingAt !== null) throw deletingError(bucket);
        if (opts.deliver && b.destination === null) {
          throw new AppError('usage', `--deliver: bucket ${bucket} has no destination (bucket update ${bucket} --destination <url> first)`);
        }
        // The source is read once, here; everything below reads the copy.
        const copy = await copyOf(file, config.spoolDir, signal);
        try {
          const first = await firstLine(copy);
          if (first === undefined) throw new AppError('usage', `${file} is empty`);
          const format = detectFormat(first);

          // Pass 1: check every record (and count them) before storing any.
          const tooBig = (r: ImportedRequest, where: string) => {
            if (r.body.length > b.maxBody) {
              throw new AppError(
                'usage',
                `${where}: body of ${formatSize(r.body.length)} exceeds bucket ${bucket}'s --max-body ${formatSize(b.maxBody)}`,
              );
            }
          };
          let har: ImportedRequest[] | undefined;
          let total = 0;
          if (format === 'har') {
            const bytes = await copy.readAll();
            if (!isUtf8(bytes)) throw new AppError('usage', `${file}: not UTF-8 text`);
            let doc: unknown;
            try {
              doc = JSON.parse(bytes.toString('utf8'));
            } catch (e) {
              throw new AppError('usage', `${file}: neither NDJSON nor a HAR document (${(e as Error).message})`);
            }
            let entries: unknown[];
            try {
              entries = harEntries(doc);
            } catch (e) {
              throw e instanceof ImportFormatError ? new AppError('usage', `${file}: ${e.message}`) : e;
            }
            // Checked and stored from the same parsed entries.
            har = entries.map((entry, i) => {
              const r = parse(() => fromHarEntry(entry), `${file} entry ${i + 1}`);
              stopIfInterrupted();
              tooBig(r, `${file} entry ${i + 1}`);
              return r;
            });
            total = har.length;
          } else {
            for await (const { line, request } of ndjsonRecords(copy, file)) {
              stopIfInterrupted();
              tooBig(request, `${file} line ${line}`);
              total++;
            }
          }

          // Pass 2: store in short transactions through ingest's batch writer.
          const importer = await store.openImporter();
          const progress = createProgress(io);
          let imported = 0;
          let firstId: string | null = null;
          let lastId: string | null = null;
          let batch: ImportItem[] = [];
          let batchBytes = 0;
          const flush = async () => {
            if (batch.length === 0) return;
            const ids = await importer.write(
              { name: bucket, createdAt: b.createdAt, verifyScheme: b.provider.verify ? schemeText(b.provider.verify.scheme) : null },
              batch,
              { createDelivery: opts.deliver === true },
            );
            firstId ??= ids[0]!;
            lastId = ids[ids.length - 1]!;
            imported += ids.length;
            batch = [];
            batchBytes = 0;
            progress.update(imported, total, `${imported}/${total} requests imported`);
          };
          const add = async (r: ImportedRequest) => {
            if (batch.length > 0 && (batch.length >= BATCH_ROWS || batchBytes + r.body.length > BATCH_BYTES)) await flush();
            stopIfInterrupted();
            batch.push(r);
            batchBytes += r.body.length;
          };
          try {
            if (har) for (const r of har) await add(r);
            else for await (const { request } of ndjsonRecords(copy, file)) await add(request);
            stopIfInterrupted();
            await flush();
          } catch (e) {
            if (signal.aborted) {
              // Stored in batches, each its own transaction: say what stays, so the rest can be found.
              progress.stop();
              printErr(
                io,
                imported === 0
                  ? `interrupted: nothing was imported into ${bucket}`
                  : `interrupted: ${imported} of ${total} request(s) were imported into ${bucket} (ids ${firstId} to ${lastId}); the rest were not`,
              );
            }
            throw e;
          } finally {
            progress.stop();
            await importer.close();
          }
          const deliveries = opts.deliver ? imported : 0;
          if (opts.json) return printJson(io, { bucket, format, imported, deliveries, first_id: firstId, last_id: lastId });
          print(
            io,
            `imported ${imported} request${imported === 1 ? '' : 's'} into ${bucket} from ${file} (${format}); ` +
              (opts.deliver
                ? `${deliveries} queued for delivery to ${redactUrl(b.destination!)}`
                : 'no deliveries created (--deliver creates them)'),
          );
        } finally {
          await copy.close();
        }
      }).finally(held.release);
    });
}

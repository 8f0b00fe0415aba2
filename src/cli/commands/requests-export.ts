import { randomBytes } from 'node:crypto';
import { createWriteStream, rmSync, type WriteStream } from 'node:fs';
import { rename } from 'node:fs/promises';
import { once } from 'node:events';
import { finished } from 'node:stream/promises';
import { Command, Option } from 'commander';
import { formatSize } from '../../config/units.js';
import { systemClock } from '../../shared/clock.js';
import { AppError, bucketNotFound } from '../../shared/errors.js';
import {
  EXPORT_FORMATS,
  curlCommand,
  curlNeedsBaseUrl,
  curlPreamble,
  redactRequest,
  harEntry,
  harHead,
  harTail,
  ndjsonLine,
  type ExportFormat,
} from '../../transfer/export-format.js';
import { configFor, withStore } from '../context.js';
import { addFilterOptions, filterFromOptions, filterJson, type FilterOptions } from '../filter-options.js';
import { interruptOf, print, printErr, printJson, type CliIo } from '../io.js';
import { untilInterrupted } from '../interrupt.js';
import { baseUrlArg, bucketNameArg, exportLimitArg } from '../parsers.js';
import { createProgress } from '../progress.js';

/**
 * Writes with backpressure (a slow pipe or disk holds the export, never memory), and turns a
 * stream error (EPIPE, ENOSPC), which arrives as an event, into a rejection of the next write.
 */
class Sink {
  #error: Error | undefined;
  readonly #onError = (e: Error) => {
    this.#error = e;
  };
  constructor(
    readonly out: NodeJS.WritableStream,
    readonly signal: AbortSignal,
  ) {
    out.on('error', this.#onError);
  }
  /** Waits for a slow reader, but not past Ctrl-C (then rejects with the signal's reason). */
  async write(text: string): Promise<void> {
    if (this.#error) throw this.#error;
    if (!this.out.write(text)) {
      await once(this.out, 'drain', { signal: this.signal }).catch((e) => {
        throw this.signal.aborted ? this.signal.reason : e;
      });
    }
  }
  /** Ends the stream and waits until it is closed (a file's close can fail too), still listening. */
  async end(): Promise<void> {
    if (this.#error) throw this.#error;
    this.out.end();
    await finished(this.out);
  }
  release(): void {
    this.out.off('error', this.#onError);
  }
}

/**
 * Throws the partial file away: synchronous, so an interrupt cleanup can call it. A write still in
 * flight when the stream is destroyed completes as an ERR_STREAM_DESTROYED 'error' event, after
 * the Sink has stopped listening; with no listener left, Node would end the process with exit code
 * 1 instead of 130/143. That error is no news (the file is being thrown away), so it is dropped.
 */
function discardPartial(file: WriteStream, path: string): void {
  if (!file.listeners('error').includes(ignoreError)) file.on('error', ignoreError);
  file.destroy();
  removeQuietly(path);
  // Destroyed before its open finished, the file appears after this: removed again once closed.
  if (!file.closed) file.once('close', () => removeQuietly(path));
}

function ignoreError(): void {
  // discardPartial: the error of a file being thrown away.
}

function removeQuietly(path: string): void {
  try {
    rmSync(path, { force: true });
  } catch {
    // Left for the operator: the note printed at the interrupt names the file.
  }
}

/** Resolves once the stream's file descriptor is closed (at once if it is). */
function closed(file: WriteStream): Promise<void> {
  return file.closed ? Promise.resolve() : new Promise((resolve) => file.once('close', () => resolve()));
}

interface ExportOptions extends FilterOptions {
  format: ExportFormat;
  out?: string;
  baseUrl?: string;
  redact?: boolean;
  limit?: number;
  json?: boolean;
}

export function makeRequestsExportCommand(io: CliIo): Command {
  const cmd = new Command('export')
    .description("write a bucket's requests (oldest first) as NDJSON, HAR 1.2 or runnable curl commands")
    .argument('<bucket>', 'bucket name', bucketNameArg)
    .addOption(
      new Option('--format <format>', 'ndjson (one JSON object a line), har (HAR 1.2) or curl (a bash script)')
        .choices(EXPORT_FORMATS)
        .default('ndjson'),
    )
    .option('--out <file>', 'write to this file (written aside, then renamed into place) instead of stdout')
    .option(
      '--base-url <url>',
      'where curl commands send the requests and har URLs point; the raw sub-path and query are appended. Required with --format curl (har default: http://localhost:<port>/b/<bucket>)',
      baseUrlArg,
    )
    .option('--redact', 'replace credential headers (Authorization, Cookie, signatures, API keys) and secret query values with [redacted]')
    .option('--limit <n>', 'export only the first n matching requests (oldest first)', exportLimitArg);
  addFilterOptions(cmd)
    .option('--json', 'with --out: print a JSON summary { bucket, format, requests, bytes, out, filter }')
    .addHelpText(
      'after',
      `
Every format keeps the method, the raw path and query, the raw header list (order, case, repeats)
and the body bytes; bodies that are not UTF-8 go as base64 (NDJSON body_encoding, HAR
postData._encoding). curl commands re-send each request to --base-url (required: e.g. a local
consumer; the bucket's own URL only if you mean to store and deliver everything again), with the
target's own Host header, and print a newline after each response; they need bash.

An export holds the requests' credentials as received (Authorization, cookies, signature headers,
secret query values): keep it private, or pass --redact to replace them with [redacted] (bodies
stay as stored).

Examples:
  $ hookbucket requests export stripe --state exhausted --since 1d --out failed.ndjson
  $ hookbucket requests export stripe --format har --redact --out stripe.har
  $ hookbucket requests export stripe --id 019ae0c4-… --format curl --base-url http://localhost:3000/webhooks | bash
  $ hookbucket requests export stripe --limit 10 --redact   # the 10 oldest, to show someone
  $ hookbucket requests import staging failed.ndjson`,
    )
    .action(async (bucket: string, opts: ExportOptions, c: Command) => {
      if (opts.json && !opts.out) throw new AppError('usage', '--json needs --out (without it the export itself is on stdout)');
      const filter = filterFromOptions(opts, systemClock.now());
      const bucketUrl = `http://localhost:${configFor(c, io).port}/b/${bucket}`;
      if (opts.format === 'curl' && opts.baseUrl === undefined) throw curlNeedsBaseUrl('--base-url', bucketUrl);
      const baseUrl = opts.baseUrl ?? bucketUrl;
      const iterate = { ...(opts.limit !== undefined ? { limit: opts.limit } : {}) };
      await withStore(c, io, async (store) => {
        if (!(await store.getBucket(bucket))) throw bucketNotFound(bucket);
        const progress = createProgress(io);
        const total = io.stderr.isTTY ? Math.min(await store.countRequests(bucket, filter), opts.limit ?? Number.POSITIVE_INFINITY) : 0;
        const partial = opts.out ? `${opts.out}.partial-${randomBytes(4).toString('hex')}` : undefined;
        // Ctrl-C or SIGTERM: the partial file goes at once, whatever the export is waiting on; the
        // loop stops at its next request and the command exits 130 or 143 (interrupt.ts).
        const interrupt = interruptOf(io);
        const held = interrupt.hold();
        const file = partial ? createWriteStream(partial) : undefined;
        const sink = new Sink(file ?? io.stdout, held.signal);
        const unregister =
          partial && file
            ? interrupt.onInterrupt(() => {
                discardPartial(file, partial);
                printErr(io, `interrupted: ${opts.out} not written (its partial file removed)`);
              })
            : () => undefined;
        let n = 0;
        let bytes = 0;
        try {
          // Open before anything is read: a folder that cannot be written fails first.
          if (file) await once(file, 'open', { signal: held.signal });
          if (opts.format === 'har') await sink.write(harHead());
          if (opts.format === 'curl') await sink.write(curlPreamble({ baseUrl, redacted: opts.redact === true }));
          for await (const stored of untilInterrupted(store.iterateRequests(bucket, filter, iterate), held.signal)) {
            const r = opts.redact ? redactRequest(stored) : stored;
            const text =
              opts.format === 'ndjson'
                ? ndjsonLine(r)
                : opts.format === 'har'
                  ? `${n > 0 ? ',\n' : ''}${harEntry(r, baseUrl)}`
                  : curlCommand(r, baseUrl);
            await sink.write(text);
            n++;
            bytes += r.size;
            progress.update(n, Math.max(total, n), `${n} requests, ${formatSize(bytes)} of bodies`);
          }
          if (opts.format === 'har') await sink.write(`${n > 0 ? '\n' : ''}${harTail()}`);
          if (partial) {
            await sink.end();
            await rename(partial, opts.out!);
          }
        } catch (e) {
          if (partial && file) discardPartial(file, partial);
          // A reader that has seen enough (`| head`) closed the pipe: stop, like any Unix filter.
          if (!partial && (e as { code?: string }).code === 'EPIPE') return;
          throw e;
        } finally {
          unregister();
          held.release();
          sink.release();
          progress.stop();
          // A discarded file closes once its last write is back: its descriptor is not left behind.
          if (file) await closed(file);
        }
        if (!opts.out) return;
        if (opts.json)
          return printJson(io, {
            bucket,
            format: opts.format,
            requests: n,
            bytes,
            out: opts.out,
            filter: filterJson(filter),
            limit: opts.limit ?? null,
            redacted: opts.redact === true,
          });
        print(
          io,
          `exported ${n} request${n === 1 ? '' : 's'} (${formatSize(bytes)} of bodies) from ${bucket} to ${opts.out} as ${opts.format}`,
        );
      });
    });
  return cmd;
}

import { Command } from 'commander';
import { formatSize } from '../../config/units.js';
import { systemClock } from '../../shared/clock.js';
import { bucketNotFound } from '../../shared/errors.js';
import type { Store, TailCursor, TailEvent } from '../../store/store.js';
import { tailEventJson } from '../../json/request-json.js';
import { withStore } from '../context.js';
import { escapeTerminal } from '../../policy/terminal-text.js';
import { interruptOf, iso, print, printErr, printJsonLine, type CliIo } from '../io.js';
import { sleepUnlessInterrupted } from '../interrupt.js';
import { isRemoteStore, type RemoteStore } from '../../remote/remote-store.js';
import { followEvents, tailEventFromJson } from '../../remote/event-stream.js';
import { bucketNameArg, integerArg } from '../parsers.js';
import { targetText } from '../render.js';

/** How often tail looks for new rows (one indexed query each for requests and attempts). */
const POLL_MS = 250;

export { tailEventJson };

function tailEventText(e: TailEvent, reveal: boolean): string {
  if (e.kind === 'request') {
    const r = e.request;
    return `${iso(e.at)}  request  ${r.id}  ${escapeTerminal(`${r.method} ${targetText(r.path, r.query, reveal)}`)}  ${formatSize(r.size)}  ${r.state}`;
  }
  const a = e.attempt;
  const what = a.status !== null ? String(a.status) : (a.errorClass ?? '-');
  const next = a.nextAttemptAt === null ? '' : `  next ${iso(a.nextAttemptAt)} (${a.nextWhy})`;
  return `${iso(e.at)}  attempt  ${e.requestId}  gen ${e.generation} #${a.number}  ${what} ${a.outcome}  ${a.durationMs ?? '-'} ms${next}`;
}

/**
 * Through --api: the server's event stream (GET /api/events, one poller for every client) instead
 * of polling; the same lines, the same NDJSON. Reconnects with Last-Event-ID; Ctrl-C ends it.
 */
async function remoteTail(
  io: CliIo,
  store: RemoteStore,
  bucket: string,
  opts: { json?: boolean; count?: number; reveal?: boolean },
  signal: AbortSignal,
): Promise<void> {
  let printed = 0;
  await followEvents(store.api, bucket, {
    signal,
    // Said once the stream is open, as the local tail says it once its cursor is set.
    onOpen: () => io.stderr.write(`following ${bucket} (Ctrl-C to stop)\n`),
    onNote: (text) => printErr(io, text),
    onEvent: (json) => {
      if (opts.json) printJsonLine(io, json);
      else print(io, tailEventText(tailEventFromJson(json), opts.reveal === true));
      return !(opts.count !== undefined && ++printed >= opts.count);
    },
  });
}

export function makeTailCommand(io: CliIo): Command {
  return new Command('tail')
    .description('follow new requests and delivery outcomes of a bucket live, until Ctrl-C')
    .argument('<bucket>', 'bucket name', bucketNameArg)
    .option('--json', 'print NDJSON: one object per event ({event: "request"|"attempt", …})')
    .option('--count <n>', 'stop after this many events', integerArg(1, 1_000_000))
    .option('--reveal', 'show secret query values instead of [redacted]')
    .addHelpText(
      'after',
      '\nExamples:\n  $ hookbucket requests tail stripe\n  $ hookbucket requests tail stripe --json | jq -c \'select(.event == "attempt" and .outcome != "delivered")\'\n  $ hookbucket requests tail stripe --count 1   # wait for the next event',
    )
    .action(async (bucket: string, opts: { json?: boolean; count?: number; reveal?: boolean }, cmd: Command) =>
      withStore(cmd, io, async (store) => {
        if (!(await store.getBucket(bucket))) throw bucketNotFound(bucket);
        // Ctrl-C (SIGINT) or SIGTERM stops the following; the command exits 130 or 143 (interrupt.ts).
        const held = interruptOf(io).hold();
        try {
          if (isRemoteStore(store)) return await remoteTail(io, store, bucket, opts, held.signal);
          return await localTail(io, store, bucket, opts, held.signal);
        } finally {
          held.release();
        }
      }),
    );
}

async function localTail(
  io: CliIo,
  store: Store,
  bucket: string,
  opts: { json?: boolean; count?: number; reveal?: boolean },
  signal: AbortSignal,
): Promise<void> {
  const now = systemClock.now();
  // Start after the newest request stored so far: tail shows what happens from now on.
  const newest = await store.listRequests(bucket, {}, { limit: 1 });
  let cursor: TailCursor = { requestId: newest.requests[0]?.id ?? '', sinceMs: now, seen: [] };
  let printed = 0;
  io.stderr.write(`following ${bucket} (Ctrl-C to stop)\n`);
  while (!signal.aborted) {
    const r = await store.tail(bucket, cursor);
    cursor = r.cursor;
    for (const e of r.events) {
      if (opts.json) printJsonLine(io, tailEventJson(e));
      else print(io, tailEventText(e, opts.reveal === true));
      if (opts.count !== undefined && ++printed >= opts.count) return;
    }
    await sleepUnlessInterrupted(POLL_MS, signal).catch(() => undefined);
  }
}

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
import { parseTimeBound, type TimeBound } from '../../options/request-filter.js';
import { SinceWalk, sinceStart, tailEventKey } from '../../store/tail-since.js';
import { TAIL_LOOKBACK_MS } from '../../store/request-rows.js';
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
  opts: TailOptions,
  sinceMs: number | undefined,
  signal: AbortSignal,
): Promise<void> {
  let printed = 0;
  await followEvents(store.api, bucket, {
    signal,
    ...(sinceMs !== undefined ? { since: new Date(sinceMs).toISOString() } : {}),
    // Said once the stream is open, as the local tail says it once its cursor is set.
    onOpen: () => io.stderr.write(followingText(bucket, sinceMs)),
    onNote: (text) => printErr(io, text),
    onEvent: (json) => {
      if (opts.json) printJsonLine(io, json);
      else print(io, tailEventText(tailEventFromJson(json), opts.reveal === true));
      return !(opts.count !== undefined && ++printed >= opts.count);
    },
  });
}

interface TailOptions {
  json?: boolean;
  count?: number;
  reveal?: boolean;
  since?: TimeBound;
}

function followingText(bucket: string, sinceMs: number | undefined): string {
  return `following ${bucket}${sinceMs === undefined ? '' : ` since ${iso(sinceMs)}`} (Ctrl-C to stop)\n`;
}

export function makeTailCommand(io: CliIo): Command {
  return new Command('tail')
    .description('follow new requests and delivery outcomes of a bucket live, until Ctrl-C')
    .argument('<bucket>', 'bucket name', bucketNameArg)
    .option('--json', 'print NDJSON: one object per event ({event: "request"|"attempt", …})')
    .option('--count <n>', 'stop after this many events', integerArg(1, 1_000_000))
    .option('--reveal', 'show secret query values instead of [redacted]')
    .option(
      '--since <when>',
      'first print what happened since then (a duration before now like 10m, or an ISO time), then follow',
      parseTimeBound,
    )
    .addHelpText(
      'after',
      `
With --since, the requests received and the attempts finished since then come first, oldest
first, in the same lines (or NDJSON) as live events; then tail follows on from there, so nothing
that happens while it starts is missed or printed twice. --count counts them too.

Examples:
  $ hookbucket requests tail stripe
  $ hookbucket requests tail stripe --json | jq -c 'select(.event == "attempt" and .outcome != "delivered")'
  $ hookbucket requests tail stripe --count 1   # wait for the next event
  $ hookbucket requests tail stripe --since 10m # the last ten minutes, then follow`,
    )
    .action(async (bucket: string, opts: TailOptions, cmd: Command) =>
      withStore(cmd, io, async (store) => {
        if (!(await store.getBucket(bucket))) throw bucketNotFound(bucket);
        const now = systemClock.now();
        const sinceMs = opts.since === undefined ? undefined : opts.since.kind === 'ago' ? now - opts.since.ms : opts.since.ms;
        // Ctrl-C (SIGINT) or SIGTERM stops the following; the command exits 130 or 143 (interrupt.ts).
        const held = interruptOf(io).hold();
        try {
          if (isRemoteStore(store)) return await remoteTail(io, store, bucket, opts, sinceMs, held.signal);
          return await localTail(io, store, bucket, opts, now, sinceMs, held.signal);
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
  opts: TailOptions,
  now: number,
  sinceMs: number | undefined,
  signal: AbortSignal,
): Promise<void> {
  let printed = 0;
  /** Prints one event; false once --count is reached. */
  const show = (e: TailEvent): boolean => {
    if (opts.json) printJsonLine(io, tailEventJson(e));
    else print(io, tailEventText(e, opts.reveal === true));
    return !(opts.count !== undefined && ++printed >= opts.count);
  };
  let cursor: TailCursor;
  io.stderr.write(followingText(bucket, sinceMs));
  /** Keys of the attempts given by the backlog that the first live read looks at again. */
  let given: Set<string> | undefined;
  if (sinceMs !== undefined) {
    // Read and printed a page at a time (SinceWalk): memory stays flat however long ago sinceMs is.
    const walk = new SinceWalk(store, [bucket], sinceStart(sinceMs));
    given = new Set();
    for (let x = await walk.next(); x !== undefined && !signal.aborted; x = await walk.next()) {
      if (x.event.kind === 'attempt' && x.event.at >= now - TAIL_LOOKBACK_MS) given.add(tailEventKey(tailEventJson(x.event)));
      if (!show(x.event)) return;
    }
    // Requests after the last one given (on PostgreSQL its first read marks the id window below
    // it seen); attempts finished since sinceMs, of which the look-back's were given above.
    cursor = { requestId: walk.position.requestId, sinceMs, seen: [] };
  } else {
    // Start after the newest request stored so far: tail shows what happens from now on.
    const newest = await store.listRequests(bucket, {}, { limit: 1 });
    cursor = { requestId: newest.requests[0]?.id ?? '', sinceMs: now, seen: [] };
  }
  while (!signal.aborted) {
    const r = await store.tail(bucket, cursor);
    cursor = r.cursor;
    for (const e of r.events) {
      if (given?.has(tailEventKey(tailEventJson(e)))) continue;
      if (!show(e)) return;
    }
    // The cursor now holds what the first read gave: later reads do not repeat it.
    given = undefined;
    await sleepUnlessInterrupted(POLL_MS, signal).catch(() => undefined);
  }
}

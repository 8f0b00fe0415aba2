import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { InflightBudget } from './limits.js';
import { Spool, SPOOL_HIGH_WATER_BYTES, SPOOL_THRESHOLD_BYTES, spoolErrorCode } from './spool.js';

export type BodyResult =
  | { kind: 'ok'; body: Buffer }
  | { kind: 'too_large' }
  | { kind: 'overloaded' }
  | { kind: 'aborted' }
  | { kind: 'storage'; code: 'storage_full' | 'storage_error' };

export interface SpoolOptions {
  /** Folder for spool files (made when missing). */
  dir: string;
  /** A body with no Content-Length spools once it passes this many bytes. */
  thresholdBytes?: number;
}

/** Chunks under this size are copied into a shared block rather than kept as separate Buffers. */
const SMALL_CHUNK_BYTES = 4096; // 4 KiB
const COALESCE_BLOCK_BYTES = 64 * 1024; // 64 KiB

/**
 * Reads the exact body bytes from the raw Node request, counting bytes as they arrive (whatever
 * Content-Length claims, and for chunked bodies too: body-limit middlewares have had chunked
 * bypasses). Stops at `limit` without buffering past it. Bytes are reserved in the shared inflight
 * budget as they arrive; the caller releases `reserved()` when the request is done.
 *
 * With `spool`, a body without a Content-Length that passes the threshold goes to a spool file
 * (see Spool) rather than memory, so one refused at limit + 1 never held the limit in memory. A
 * body with a Content-Length was already checked against the limit, and is read into memory.
 *
 * `onChunk` sees every chunk as it arrives, in order, once it is within the limit and the budget,
 * whether the body then goes to memory or to the spool: sender verification feeds its HMACs there,
 * so a large body is hashed as it streams in rather than in one piece at the end.
 */
export function readBody(
  incoming: IncomingMessage,
  limit: number,
  budget: InflightBudget,
  spoolOptions?: SpoolOptions,
  onChunk?: (chunk: Buffer) => void,
): { done: Promise<BodyResult>; reserved: () => number } {
  let reserved = 0;
  const spoolAfter =
    spoolOptions && incoming.headers['content-length'] === undefined ? (spoolOptions.thresholdBytes ?? SPOOL_THRESHOLD_BYTES) : Infinity;
  const done = new Promise<BodyResult>((resolve) => {
    const chunks: Buffer[] = [];
    let spool: Spool | undefined;
    let size = 0;
    // Where finished pieces go: the list in memory, or the spool once there is one.
    const emit = (buf: Buffer) => {
      if (!spool) return void chunks.push(buf);
      spool.write(buf);
      if (spool.backlog > SPOOL_HIGH_WATER_BYTES && !incoming.isPaused()) {
        incoming.pause();
        spool.onDrain(() => {
          if (!settled) incoming.resume();
        });
      }
    };
    // Small chunks are copied into one block instead of kept one by one: every chunk Node hands
    // over is its own Buffer (about 400 bytes of heap each), so 1 MiB sent as 1-byte chunks held
    // over 400 MiB before this (reliability case 12). Coalesced, it costs the bytes and a few blocks.
    let block: Buffer | undefined;
    let blockUsed = 0;
    const sealBlock = () => {
      if (block && blockUsed > 0) emit(block.subarray(0, blockUsed));
      block = undefined;
      blockUsed = 0;
    };
    let settled = false;
    const finish = (r: BodyResult) => {
      if (settled) return;
      settled = true;
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', onAbort);
      incoming.off('close', onClose);
      if (r.kind !== 'ok') {
        chunks.length = 0;
        block = undefined;
        void spool?.close();
      }
      resolve(r);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return finish({ kind: 'too_large' });
      if (size > reserved) {
        if (!budget.tryReserve(size - reserved)) return finish({ kind: 'overloaded' });
        reserved = size;
      }
      if (spool?.failed) return finish({ kind: 'storage', code: spoolErrorCode(spool.failed) });
      onChunk?.(chunk);
      if (!spool && size > spoolAfter) {
        spool = new Spool(spoolOptions!.dir);
        for (const c of chunks.splice(0)) spool.write(c);
      }
      if (chunk.length >= SMALL_CHUNK_BYTES) {
        sealBlock();
        emit(chunk);
        return;
      }
      if (block && blockUsed + chunk.length > block.length) sealBlock();
      // Blocks grow with the body (4 KiB, then up to 64 KiB) and never past what may still arrive
      // under the limit, so a small body costs a small block.
      block ??= Buffer.allocUnsafe(
        Math.min(limit - size + chunk.length, Math.max(SMALL_CHUNK_BYTES, Math.min(size, COALESCE_BLOCK_BYTES))),
      );
      blockUsed += chunk.copy(block, blockUsed);
    };
    const onEnd = () => {
      sealBlock();
      if (!spool) return finish({ kind: 'ok', body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
      spool.collect().then(
        (body) => finish({ kind: 'ok', body }),
        (e: NodeJS.ErrnoException) => finish({ kind: 'storage', code: spoolErrorCode(e) }),
      );
    };
    const onAbort = () => finish({ kind: 'aborted' });
    const onClose = () => {
      if (!incoming.complete) finish({ kind: 'aborted' });
    };
    incoming.on('data', onData);
    incoming.on('end', onEnd);
    incoming.on('error', onAbort);
    incoming.on('close', onClose);
    // The client may have gone while the bucket was being looked up: its 'close' already fired.
    if (incoming.destroyed && !incoming.complete) finish({ kind: 'aborted' });
  });
  return { done, reserved: () => reserved };
}

/**
 * After refusing a request whose body was not read: discard what the client still sends for a
 * short while, so it can read our answer before the socket closes, then close it.
 */
export function discardBody(incoming: IncomingMessage, maxBytes = 1024 * 1024, maxMs = 1000): void {
  if (incoming.complete || incoming.destroyed) return;
  let seen = 0;
  const close = () => {
    clearTimeout(timer);
    incoming.socket?.destroySoon?.();
  };
  const timer = setTimeout(close, maxMs);
  timer.unref();
  incoming.on('data', (c: Buffer) => {
    seen += c.length;
    if (seen > maxBytes) close();
  });
  incoming.on('end', () => clearTimeout(timer));
  incoming.resume();
}

const answered = Symbol('hookbucket.answeredByServer');

/** Marks a socket whose request the server's clientError handler has answered (and counted). */
export function markAnsweredByServer(socket: Socket): void {
  (socket as Socket & { [answered]?: boolean })[answered] = true;
}

export function answeredByServer(socket: Socket | null | undefined): boolean {
  return (socket as (Socket & { [answered]?: boolean }) | null | undefined)?.[answered] === true;
}

import type { IncomingMessage } from 'node:http';
import type { Socket } from 'node:net';
import type { InflightBudget } from './limits.js';

export type BodyResult =
  | { kind: 'ok'; body: Buffer }
  | { kind: 'too_large' }
  | { kind: 'overloaded' }
  | { kind: 'aborted' };

/**
 * Reads the exact body bytes from the raw Node request, counting bytes as they arrive (whatever
 * Content-Length claims, and for chunked bodies too: body-limit middlewares have had chunked
 * bypasses). Stops at `limit` without buffering past it. Bytes are reserved in the shared inflight
 * budget as they arrive; the caller releases `reserved()` when the request is done.
 */
export function readBody(
  incoming: IncomingMessage,
  limit: number,
  budget: InflightBudget,
): { done: Promise<BodyResult>; reserved: () => number } {
  let reserved = 0;
  const done = new Promise<BodyResult>((resolve) => {
    const chunks: Buffer[] = [];
    let size = 0;
    let settled = false;
    const finish = (r: BodyResult) => {
      if (settled) return;
      settled = true;
      incoming.off('data', onData);
      incoming.off('end', onEnd);
      incoming.off('error', onAbort);
      incoming.off('close', onClose);
      if (r.kind !== 'ok') chunks.length = 0;
      resolve(r);
    };
    const onData = (chunk: Buffer) => {
      size += chunk.length;
      if (size > limit) return finish({ kind: 'too_large' });
      if (size > reserved) {
        if (!budget.tryReserve(size - reserved)) return finish({ kind: 'overloaded' });
        reserved = size;
      }
      chunks.push(chunk);
    };
    const onEnd = () => finish({ kind: 'ok', body: chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size) });
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

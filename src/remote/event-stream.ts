/**
 * GET /api/events read over undici (Node 20 has no EventSource): Server-Sent Events parsed from
 * the byte stream, resumed after a dropped connection with Last-Event-ID, until the caller's signal
 * aborts. For `requests tail --api`.
 */
import type { TailEvent } from '../store/store.js';
import { AppError } from '../shared/errors.js';
import type { ApiClient } from './api-client.js';

export interface SseMessage {
  id: string | undefined;
  event: string;
  data: string;
}

/** Splits an SSE byte stream into messages (comments and heartbeats dropped). */
export async function* parseSse(body: AsyncIterable<Buffer | Uint8Array | string>): AsyncGenerator<SseMessage> {
  let buf = '';
  const decoder = new TextDecoder('utf-8');
  for await (const chunk of body) {
    buf += typeof chunk === 'string' ? chunk : decoder.decode(chunk, { stream: true });
    buf = buf.replace(/\r\n?/g, '\n');
    let end: number;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, end);
      buf = buf.slice(end + 2);
      let id: string | undefined;
      let event = 'message';
      const data: string[] = [];
      for (const line of block.split('\n')) {
        if (line === '' || line.startsWith(':')) continue;
        const colon = line.indexOf(':');
        const field = colon < 0 ? line : line.slice(0, colon);
        const value = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
        if (field === 'id') id = value;
        else if (field === 'event') event = value;
        else if (field === 'data') data.push(value);
      }
      if (data.length > 0) yield { id, event, data: data.join('\n') };
    }
  }
}

/** A `requests tail --json` object (tailEventJson) read back as the TailEvent tail's text renders. */
// biome-ignore lint/suspicious/noExplicitAny: server JSON, read field by field
export function tailEventFromJson(j: any): TailEvent {
  const at = Date.parse(j.at);
  if (j.event === 'request') {
    return {
      kind: 'request',
      at,
      request: {
        id: j.id,
        bucket: j.bucket,
        receivedAt: at,
        method: j.method,
        path: j.path,
        query: j.query,
        size: j.size,
        state: j.state,
        disposition: j.disposition ?? 'accepted',
        verdict: j.verification ?? null,
        generation: null,
      },
    };
  }
  return {
    kind: 'attempt',
    at,
    bucket: typeof j.bucket === 'string' ? j.bucket : '',
    requestId: j.request_id,
    deliveryId: j.delivery_id,
    generation: j.generation,
    attempt: {
      id: '',
      number: j.attempt,
      url: j.url,
      startedAt: at,
      durationMs: j.duration_ms,
      status: j.status,
      errorClass: j.error_class,
      errorMessage: null,
      responseHeaders: null,
      responseBody: null,
      responseTruncated: false,
      outcome: j.outcome,
      reason: j.reason,
      nextAttemptAt: j.next_attempt_at === null ? null : Date.parse(j.next_attempt_at),
      nextWhy: j.next_why,
      workerId: j.worker,
    },
  };
}

export interface FollowHooks {
  /** Each event, as the JSON tail prints it (the stream's `bucket` field removed). Return false to stop. */
  onEvent: (json: Record<string, unknown>) => unknown;
  /** Something for stderr: a reconnect, or events that could not be resumed. */
  onNote: (text: string) => void;
  /** The first connection is open: events from here on are followed. */
  onOpen?: () => void;
  signal: AbortSignal;
  /** First the events since this ISO time (GET /events `since`), on the first connection only: a reconnect resumes by id. */
  since?: string;
  /** Waits between reconnects (default 1 s, doubling to 10 s). */
  retryMs?: number;
}

const MAX_RETRY_MS = 10_000;

/**
 * Waits `ms`, or less when the signal aborts. The abort listener goes when the wait ends either
 * way: a stream that reconnects all day adds one wait per drop, and each would otherwise leave a
 * listener on the command's signal (Node warns past 10, and each holds its closure).
 */
function sleepUnlessAborted(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise<void>((resolve) => {
    const done = () => {
      clearTimeout(t);
      signal.removeEventListener('abort', done);
      resolve();
    };
    const t = setTimeout(done, ms);
    signal.addEventListener('abort', done, { once: true });
  });
}

/**
 * Follows one bucket's events until the signal aborts or onEvent returns false. The first
 * connection's failure is an error (as any command's); later drops reconnect with Last-Event-ID.
 */
export async function followEvents(api: ApiClient, bucket: string, hooks: FollowHooks): Promise<void> {
  let lastId: string | undefined;
  let connected = false;
  let wait = hooks.retryMs ?? 1000;
  while (!hooks.signal.aborted) {
    try {
      const res = await api.send('GET', '/events', {
        query: { bucket, ...(hooks.since !== undefined && !connected ? { since: hooks.since } : {}) },
        headers: { accept: 'text/event-stream', ...(lastId !== undefined ? { 'last-event-id': lastId } : {}) },
        signal: hooks.signal,
      });
      if (connected) hooks.onNote(`reconnected${lastId !== undefined ? `, resuming after event ${lastId}` : ''}`);
      else hooks.onOpen?.();
      connected = true;
      wait = hooks.retryMs ?? 1000;
      for await (const m of parseSse(res.body)) {
        if (m.id !== undefined) lastId = m.id;
        if (m.event === 'reset') {
          // The server says why (an id from another server start, events no longer buffered, a
          // backlog it could not read): a reset is not always about a dropped connection.
          let reason = '';
          try {
            reason = String((JSON.parse(m.data) as { reason?: unknown }).reason ?? '');
          } catch {
            // no reason given
          }
          hooks.onNote(`warning: some events may be missing${reason === '' ? '' : `: ${reason}`}`);
          continue;
        }
        if (m.event !== 'request' && m.event !== 'attempt') continue;
        const { bucket: _b, ...json } = JSON.parse(m.data) as Record<string, unknown>;
        if (hooks.onEvent(json) === false) {
          res.body.destroy();
          return;
        }
      }
    } catch (e) {
      if (hooks.signal.aborted) return;
      // Not reconnecting past a refusal: a wrong token, a deleted bucket, a bad request.
      if (!connected || (e instanceof AppError && e.code !== 'api_unreachable' && e.code !== 'admin_busy')) throw e;
    }
    if (hooks.signal.aborted) return;
    hooks.onNote(`the event stream dropped; reconnecting in ${Math.round(wait / 1000)}s`);
    await sleepUnlessAborted(wait, hooks.signal);
    wait = Math.min(MAX_RETRY_MS, wait * 2);
  }
}

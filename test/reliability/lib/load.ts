import { connect, type Socket } from 'node:net';
import { performance } from 'node:perf_hooks';
import { type AckLog, headerListDigest, sha256Hex, type SentRequest } from './ack-log.js';
import { randomBytesFrom } from './seed.js';

/**
 * A closed-loop load generator over raw keep-alive sockets: each of N connections sends one
 * request, waits for its answer, and sends the next. Raw sockets (no HTTP client in between) so
 * the header list, its order and case, and the framing are exactly what the sender chose, and the
 * stored row can be compared with what went on the wire.
 *
 * Every request carries `x-reliability-seq: <n>`, so any stored row can be traced to what was sent
 * ("a request that got no 2xx is absent or complete"). Every 2xx is appended to the AckLog with the
 * id from `x-hookbucket-request-id` (or the JSON ack body).
 */

export const MAX_BODY = 256 * 1024; // 256 KiB

export type Outcome =
  | {
      kind: 'answered';
      seq: number;
      status: number;
      /** The stored id, for a 2xx. */
      id?: string;
      /** The JSON error code, for an error answer. */
      code?: string;
      retryAfter?: string;
      /** performance.now() when the request's first byte was written and when its answer was read. */
      sentAt: number;
      answeredAt: number;
    }
  | {
      kind: 'reset';
      seq: number;
      /** The whole request was written before the connection went away. */
      whole: boolean;
      /** Bytes of an answer had started to arrive. */
      partialAnswer: boolean;
      sentAt: number;
      at: number;
    };

export interface LoadStats {
  /** Requests started on a connection. */
  sent: number;
  /** 2xx answers. */
  acked: number;
  /** Non-2xx answers by status. */
  byStatus: Record<number, number>;
  /** Non-2xx answers by JSON error code. */
  byCode: Record<string, number>;
  /** Connections that went away with a request unanswered. */
  resets: number;
  /** Connection attempts refused (nothing listening). */
  refused: number;
  /** Requests with no answer within responseTimeoutMs (the socket is dropped). */
  timeouts: number;
}

export interface LoadOptions {
  /** The receiver's base URL; loopback only. */
  url: string;
  bucket: string;
  connections: number;
  random: () => number;
  ackLog: AckLog;
  /** Largest body; sizes are drawn from 0 to this (default 256 KiB). */
  maxBody?: number;
  /** Stop sending after this many requests in all (a bound, whatever else happens). */
  maxRequests?: number;
  /** Share of requests sent with chunked framing instead of Content-Length (default 0.1). */
  chunkedShare?: number;
  /** An unanswered request is dropped after this long (default 30 s). */
  responseTimeoutMs?: number;
  /** Pause before reconnecting after a refused or failed connection (default 25 ms). */
  reconnectDelayMs?: number;
  /**
   * The `sent` map of another generator on the same database, to share (one map to check the
   * stored rows against). Seqs are unique across every generator in the process anyway.
   */
  sent?: Map<number, SentRequest>;
  /** Every answer and reset, as it happens. */
  onOutcome?: (o: Outcome) => void;
}

export interface Built {
  meta: SentRequest;
  head: Buffer;
  body: Buffer;
  chunked: boolean;
}

interface Answer {
  status: number;
  headers: Map<string, string>;
  body: Buffer;
}

/** Seqs are unique across every generator in the process, so generators can share a database. */
let lastSeq = 0;

const LOOPBACK = new Set(['127.0.0.1', 'localhost', '[::1]', '::1']);

export function assertLoopback(url: string): URL {
  const u = new URL(url);
  if (!LOOPBACK.has(u.hostname)) throw new Error(`reliability traffic goes to loopback only, not ${u.hostname}`);
  return u;
}

export class LoadGenerator {
  readonly stats: LoadStats = { sent: 0, acked: 0, byStatus: {}, byCode: {}, resets: 0, refused: 0, timeouts: 0 };
  /** Everything sent, by seq (no bodies: their digests). */
  readonly sent: Map<number, SentRequest>;
  readonly outcomes: Outcome[] = [];
  readonly #o: Required<Omit<LoadOptions, 'onOutcome' | 'maxRequests' | 'sent'>> & Pick<LoadOptions, 'onOutcome' | 'maxRequests'>;
  readonly #pool: Buffer;
  #url: URL;
  /** Requests this generator has started (the bound for maxRequests). */
  #count = 0;
  #stopping = false;
  #loops: Array<Promise<void>> = [];
  readonly #sockets = new Set<Socket>();
  /** Requests written and not yet answered. */
  #inflight = 0;

  constructor(options: LoadOptions) {
    const { sent, ...rest } = options;
    this.#o = { maxBody: MAX_BODY, chunkedShare: 0.1, responseTimeoutMs: 30_000, reconnectDelayMs: 25, ...rest };
    this.sent = sent ?? new Map();
    this.#url = assertLoopback(options.url);
    // Bodies are slices of one seeded pool with the seq stamped in front, so drawing a body costs
    // a copy, not a PRNG call per byte.
    this.#pool = randomBytesFrom(options.random, this.#o.maxBody * 2);
  }

  get inflight(): number {
    return this.#inflight;
  }

  /** Points later connections at another URL (a restarted receiver on another port). */
  retarget(url: string): void {
    this.#url = assertLoopback(url);
  }

  /** Starts (or restarts, after stop) the connections. */
  start(): void {
    this.#stopping = false;
    this.#loops = Array.from({ length: this.#o.connections }, () => this.#connectionLoop());
  }

  /**
   * Stops sending. With `drainMs`, requests in flight get that long to be answered; then every
   * socket is destroyed (an unanswered request counts as a reset).
   */
  async stop(drainMs = 0): Promise<LoadStats> {
    this.#stopping = true;
    if (drainMs > 0) {
      const until = performance.now() + drainMs;
      while (this.#inflight > 0 && performance.now() < until) await sleep(10);
    }
    for (const s of this.#sockets) s.destroy();
    await Promise.all(this.#loops);
    this.#loops = [];
    return this.stats;
  }

  #done(): boolean {
    return this.#stopping || (this.#o.maxRequests !== undefined && this.#count >= this.#o.maxRequests);
  }

  async #connectionLoop(): Promise<void> {
    while (!this.#done()) {
      const socket = await this.#connect();
      if (!socket) {
        await sleep(this.#o.reconnectDelayMs);
        continue;
      }
      const reader = new AnswerReader(socket);
      try {
        while (!this.#done() && !socket.destroyed) {
          const keep = await this.#one(socket, reader);
          if (!keep) break;
        }
      } finally {
        this.#sockets.delete(socket);
        socket.destroy();
      }
    }
  }

  #connect(): Promise<Socket | undefined> {
    return new Promise((resolve) => {
      const socket = connect(Number(this.#url.port), this.#url.hostname.replace(/^\[|\]$/g, ''));
      socket.setNoDelay(true);
      this.#sockets.add(socket);
      let settled = false;
      const fail = () => {
        if (settled) return;
        settled = true;
        this.#sockets.delete(socket);
        socket.destroy();
        this.stats.refused++;
        resolve(undefined);
      };
      socket.once('error', fail);
      // Destroyed by stop() before it connected: no 'error' comes, only 'close'.
      socket.once('close', fail);
      socket.once('connect', () => {
        socket.off('error', fail);
        socket.off('close', fail);
        settled = true;
        // Later errors surface through the reader as a closed connection.
        socket.on('error', () => undefined);
        resolve(socket);
      });
    });
  }

  /** Sends one request and reads its answer; false when the connection is done. */
  async #one(socket: Socket, reader: AnswerReader): Promise<boolean> {
    const b = this.build();
    this.stats.sent++;
    this.#inflight++;
    const sentAt = performance.now();
    let whole = false;
    try {
      socket.write(b.head);
      socket.write(framedBody(b), (e) => (whole = !e));
    } catch {
      // a destroyed socket: the reader reports it closed
    }
    const answer = await reader.next(this.#o.responseTimeoutMs);
    this.#inflight--;
    if (answer === 'timeout') {
      this.stats.timeouts++;
      this.#emit({ kind: 'reset', seq: b.meta.seq, whole, partialAnswer: false, sentAt, at: performance.now() });
      return false;
    }
    if (answer.kind === 'closed') {
      this.stats.resets++;
      this.#emit({ kind: 'reset', seq: b.meta.seq, whole, partialAnswer: answer.partial, sentAt, at: performance.now() });
      return false;
    }
    const { status, headers, body } = answer.answer;
    const answeredAt = performance.now();
    if (status >= 200 && status < 300) {
      const id = headers.get('x-hookbucket-request-id') ?? idFromJson(body);
      this.stats.acked++;
      if (id === undefined) throw new Error(`a ${status} ack without an id (seq ${b.meta.seq})`);
      this.#o.ackLog.append({ ...b.meta, id, status });
      this.#emit({ kind: 'answered', seq: b.meta.seq, status, id, sentAt, answeredAt });
    } else {
      this.stats.byStatus[status] = (this.stats.byStatus[status] ?? 0) + 1;
      const code = codeFromJson(body);
      if (code !== undefined) this.stats.byCode[code] = (this.stats.byCode[code] ?? 0) + 1;
      const retryAfter = headers.get('retry-after');
      this.#emit({
        kind: 'answered',
        seq: b.meta.seq,
        status,
        sentAt,
        answeredAt,
        ...(code !== undefined ? { code } : {}),
        ...(retryAfter !== undefined ? { retryAfter } : {}),
      });
    }
    return !/close/i.test(headers.get('connection') ?? '');
  }

  #emit(o: Outcome): void {
    this.outcomes.push(o);
    this.#o.onOutcome?.(o);
  }

  /**
   * The next request (registered in `sent`), for a case that sends it itself (a slow client),
   * with a body of `size` bytes when given;
   * `head` then `body` as Content-Length framing, or chunked when `chunked`.
   */
  build(size: number = pickSize(this.#o.random, this.#o.maxBody)): Built {
    const r = this.#o.random;
    const seq = ++lastSeq;
    this.#count++;
    const body = Buffer.allocUnsafe(size);
    const off = Math.floor(r() * (this.#pool.length - size));
    this.#pool.copy(body, 0, off, off + size);
    // The seq in the first bytes keeps bodies distinct even when slices repeat.
    if (size >= 8) body.writeBigUInt64BE(BigInt(seq), 0);
    const method = pick(r, ['POST', 'POST', 'POST', 'PUT', 'PATCH', 'DELETE']);
    const path = `/r/${seq}/${pick(r, ['events', '%C3%BC', 'a%2Fb', 'x/../y', "~t!$&'()*+,;=:@"])}`;
    const query = pick(r, [null, '', `seq=${seq}`, `a=1&a=2&b=%20x+y`, `q=${'z'.repeat(randomIntIn(r, 1, 200))}`]);
    const chunked = size > 0 && r() < this.#o.chunkedShare;
    // Header names in mixed case, a repeated header, values with the bytes Node reads as latin1.
    const flat: string[] = [
      'Host',
      `${this.#url.host}`,
      'Content-Type',
      pick(r, ['application/octet-stream', 'application/json', 'text/plain; charset=utf-8']),
    ];
    flat.push('x-reliability-seq', String(seq));
    flat.push(pick(r, ['X-Dup', 'x-dup', 'X-DUP']), 'one', pick(r, ['X-Dup', 'x-dup']), 'two');
    if (r() < 0.5) flat.push('Stripe-Signature', `t=${seq},v1=${(seq * 2654435761).toString(16)}`);
    if (r() < 0.3) flat.push('X-Empty', '');
    if (chunked) flat.push('Transfer-Encoding', 'chunked');
    else flat.push('Content-Length', String(size));
    const target = `/b/${this.#o.bucket}${path}${query === null ? '' : `?${query}`}`;
    let head = `${method} ${target} HTTP/1.1\r\n`;
    for (let i = 0; i < flat.length; i += 2) head += `${flat[i]}: ${flat[i + 1]}\r\n`;
    head += '\r\n';
    const headBytes = Buffer.from(head, 'latin1');
    const meta: SentRequest = {
      seq,
      bucket: this.#o.bucket,
      method,
      path,
      query,
      headersDigest: headerListDigest(flat),
      sha256: sha256Hex(body),
      size,
    };
    this.sent.set(seq, meta);
    return {
      meta,
      head: headBytes,
      body,
      chunked,
    };
  }
}

/** The body as it goes on the wire: as is, or as two chunks and the last-chunk marker. */
export function framedBody(b: Built): Buffer {
  if (!b.chunked) return b.body;
  const cut = Math.floor(b.body.length / 2);
  const parts: Buffer[] = [];
  for (const part of [b.body.subarray(0, cut), b.body.subarray(cut)]) {
    if (part.length > 0) parts.push(Buffer.from(`${part.length.toString(16)}\r\n`), part, Buffer.from('\r\n'));
  }
  parts.push(Buffer.from('0\r\n\r\n'));
  return Buffer.concat(parts);
}

/**
 * Body sizes from 0 to max: 5% empty, 5% exactly max, the rest max·u³ (mean about max/4), so
 * most requests are small, as webhooks are, and large ones still arrive every second or so.
 */
function pickSize(r: () => number, max: number): number {
  const u = r();
  if (u < 0.05) return 0;
  if (u < 0.1) return max;
  return Math.floor(max * r() ** 3);
}

function pick<T>(r: () => number, xs: readonly T[]): T {
  return xs[Math.floor(r() * xs.length)]!;
}

function randomIntIn(r: () => number, min: number, max: number): number {
  return min + Math.floor(r() * (max - min + 1));
}

function idFromJson(body: Buffer): string | undefined {
  try {
    const v = JSON.parse(body.toString('utf8')) as { id?: unknown };
    return typeof v.id === 'string' ? v.id : undefined;
  } catch {
    return undefined;
  }
}

function codeFromJson(body: Buffer): string | undefined {
  try {
    const v = JSON.parse(body.toString('utf8')) as { code?: unknown };
    return typeof v.code === 'string' ? v.code : undefined;
  } catch {
    return undefined;
  }
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

/**
 * Reads HTTP/1.1 answers off one socket, one at a time: Content-Length or chunked framing, or
 * until close; interim 1xx answers are skipped.
 */
export class AnswerReader {
  #buf: Buffer = Buffer.alloc(0);
  #closed = false;
  #wake: (() => void) | undefined;

  constructor(socket: Socket) {
    socket.on('data', (d: Buffer) => {
      this.#buf = this.#buf.length === 0 ? d : Buffer.concat([this.#buf, d]);
      this.#wake?.();
    });
    const closed = () => {
      this.#closed = true;
      this.#wake?.();
    };
    socket.on('close', closed);
    socket.on('end', closed);
  }

  async next(timeoutMs: number): Promise<{ kind: 'answer'; answer: Answer } | { kind: 'closed'; partial: boolean } | 'timeout'> {
    const deadline = performance.now() + timeoutMs;
    for (;;) {
      const parsed = this.#parse();
      if (parsed) return { kind: 'answer', answer: parsed };
      if (this.#closed) {
        // An answer framed by close (no length) is complete when the socket ends.
        const byClose = this.#parse(true);
        if (byClose) return { kind: 'answer', answer: byClose };
        const partial = this.#buf.length > 0;
        this.#buf = Buffer.alloc(0);
        return { kind: 'closed', partial };
      }
      const left = deadline - performance.now();
      if (left <= 0) return 'timeout';
      await new Promise<void>((resolve) => {
        const t = setTimeout(resolve, left);
        this.#wake = () => {
          clearTimeout(t);
          this.#wake = undefined;
          resolve();
        };
      });
    }
  }

  #parse(atClose = false): Answer | undefined {
    for (;;) {
      const end = this.#buf.indexOf('\r\n\r\n');
      if (end === -1) return undefined;
      const lines = this.#buf.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
      const headers = new Map<string, string>();
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        if (i > 0) headers.set(l.slice(0, i).trim().toLowerCase(), l.slice(i + 1).trim());
      }
      const start = end + 4;
      if (status >= 100 && status < 200) {
        this.#buf = this.#buf.subarray(start);
        continue;
      }
      const cl = headers.get('content-length');
      if (cl !== undefined) {
        const n = Number(cl);
        if (this.#buf.length < start + n) return undefined;
        const body = Buffer.from(this.#buf.subarray(start, start + n));
        this.#buf = this.#buf.subarray(start + n);
        return { status, headers, body };
      }
      if (/chunked/i.test(headers.get('transfer-encoding') ?? '')) {
        const chunks: Buffer[] = [];
        let p = start;
        for (;;) {
          const le = this.#buf.indexOf('\r\n', p);
          if (le === -1) return undefined;
          const size = parseInt(this.#buf.subarray(p, le).toString('latin1'), 16);
          if (!Number.isFinite(size)) return undefined;
          if (size === 0) {
            const te = this.#buf.indexOf('\r\n\r\n', le);
            if (te === -1) return undefined;
            this.#buf = this.#buf.subarray(te + 4);
            return { status, headers, body: Buffer.concat(chunks) };
          }
          if (this.#buf.length < le + 2 + size + 2) return undefined;
          chunks.push(Buffer.from(this.#buf.subarray(le + 2, le + 2 + size)));
          p = le + 2 + size + 2;
        }
      }
      if (status === 204 || status === 304) {
        this.#buf = this.#buf.subarray(start);
        return { status, headers, body: Buffer.alloc(0) };
      }
      if (!atClose) return undefined;
      const body = Buffer.from(this.#buf.subarray(start));
      this.#buf = Buffer.alloc(0);
      return { status, headers, body };
    }
  }
}

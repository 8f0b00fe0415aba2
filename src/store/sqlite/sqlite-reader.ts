/**
 * The main-thread side of the admin reader on SQLite. In `serve` the Store runs better-sqlite3 on
 * the event loop that ingest shares, so a long read there (a body search, a 30-day `stats`) would
 * hold every ingest acknowledgement until it ends. Here reads run on a thread of their own
 * (reader-thread.ts) with a read-only connection: in WAL mode it reads a snapshot while the writer
 * thread commits, and the event loop only posts a message and later takes the answer.
 *
 * - One call runs at a time; up to `maxQueued` more wait in order, and a call past that fails at
 *   once with `admin_busy`.
 * - A call's budget runs from when it is posted to the thread. Past it the call fails with
 *   `query_timeout`, and since a running SQLite statement cannot be interrupted from outside (no
 *   sqlite3_interrupt in better-sqlite3, and Worker.terminate() takes effect only when the native
 *   call returns to JavaScript), the thread is abandoned: terminated, left to finish its statement
 *   and exit, while a fresh thread serves the calls behind it.
 * - An abandoned thread still uses a core (and keeps its WAL snapshot from being checkpointed over)
 *   until its statement ends, so at most `maxAbandoned` of them may be winding down while a fresh
 *   thread serves; past that no thread is started until one has exited, and calls wait (their
 *   budget starts only once they run).
 * - Results cross by structured clone: Buffers arrive as Uint8Arrays and are made Buffers again;
 *   errors cross as code and message and are AppErrors again.
 */
import { Worker } from 'node:worker_threads';
import type { AppError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import {
  adminBusyError,
  DEFAULT_MAX_QUEUED,
  queryTimeoutError,
  readerClosedError,
  revivedError,
  type ReadableMethod,
  type ReaderStatus,
  type StoreReader,
  type StoreReaderDeps,
  type StoreReaderOptions,
} from '../store-reader.js';
import type { FromReader, ReaderInit, ToReader } from './reader-protocol.js';
import { closeThread } from './threads.js';

export interface SqliteReaderOptions<M extends ReadableMethod> extends StoreReaderOptions<M> {
  path: string;
}

const THREAD_URL = new URL('./reader-thread.js', import.meta.url);
/** How long close() waits for the threads to exit; an abandoned statement may run longer, and the process exit ends it. */
const CLOSE_WAIT_MS = 2_000; // 2 s

interface Call {
  id: number;
  method: string;
  args: unknown[];
  resolve: (value: unknown) => void;
  reject: (e: AppError) => void;
  timer?: NodeJS.Timeout;
}

/** Opens the reader once its first thread has opened the database (failing as that open failed). */
export async function openSqliteReader<M extends ReadableMethod>(
  options: SqliteReaderOptions<M>,
  deps: StoreReaderDeps,
): Promise<StoreReader<M>> {
  const reader = new SqliteReader(options, deps);
  await reader.start();
  const methods = Object.fromEntries(options.methods.map((m) => [m, (...args: unknown[]) => reader.call(m, args)]));
  return Object.assign(methods, { status: () => reader.status(), close: () => reader.close() }) as unknown as StoreReader<M>;
}

class SqliteReader {
  readonly #init: ReaderInit;
  readonly #budgetMs: number;
  readonly #maxQueued: number;
  readonly #maxAbandoned: number;
  readonly #deps: StoreReaderDeps;
  readonly #log: Logger | undefined;
  readonly #queue: Call[] = [];
  #running: Call | undefined;
  /** The thread that serves calls, once ready. */
  #thread: Worker | undefined;
  #starting: Promise<void> | undefined;
  readonly #abandoned = new Set<Worker>();
  #threadsStarted = 0;
  #seq = 0;
  #closed = false;

  constructor(options: SqliteReaderOptions<ReadableMethod>, deps: StoreReaderDeps) {
    this.#budgetMs = options.budgetMs;
    this.#maxQueued = options.maxQueued ?? DEFAULT_MAX_QUEUED;
    this.#maxAbandoned = options.maxAbandoned ?? 1;
    this.#deps = deps;
    this.#log = options.logger;
    // A reader waits for a lock only while SQLite rebuilds the WAL index after a crash: briefly.
    this.#init = { path: options.path, methods: [...options.methods], busyTimeoutMs: Math.max(1, Math.ceil(options.budgetMs)) };
  }

  /** Starts the first thread; rejects as its open failed. */
  async start(): Promise<void> {
    this.#thread = await this.#spawn();
  }

  status(): ReaderStatus {
    return {
      threadsStarted: this.#threadsStarted,
      abandoned: this.#abandoned.size,
      queued: this.#queue.length,
      running: this.#running ? 1 : 0,
    };
  }

  call(method: string, args: unknown[]): Promise<unknown> {
    if (this.#closed) return Promise.reject(readerClosedError());
    return new Promise<unknown>((resolve, reject) => {
      const call: Call = { id: ++this.#seq, method, args, resolve: (v) => resolve(reviveBuffers(v)), reject };
      this.#queue.push(call);
      this.#pump();
      if (this.#queue.length > this.#maxQueued) {
        this.#queue.pop();
        reject(adminBusyError(this.#maxQueued));
      }
    });
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#closed = true;
    const waiting = [...(this.#running ? [this.#running] : []), ...this.#queue.splice(0)];
    const busy = this.#running !== undefined;
    this.#running = undefined;
    for (const c of waiting) {
      clearTimeout(c.timer);
      c.reject(readerClosedError());
    }
    const exits: Array<Promise<unknown>> = [...this.#abandoned].map(exitOf);
    const thread = this.#thread;
    this.#thread = undefined;
    // An idle thread closes its connection; a busy one cannot until its statement ends.
    if (thread) exits.push(busy ? thread.terminate() : closeThread(thread));
    // A thread still starting is ended by #spawn once it is ready (this.#closed).
    if (this.#starting) exits.push(this.#starting.catch(() => undefined));
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<void>((resolve) => {
      timer = setTimeout(resolve, CLOSE_WAIT_MS);
      timer.unref();
    });
    await Promise.race([Promise.all(exits), bound]);
    clearTimeout(timer);
  }

  /** Posts the next call when the thread is free; starts a thread when none serves. */
  #pump(): void {
    if (this.#closed || this.#running || this.#queue.length === 0) return;
    const thread = this.#thread;
    if (!thread) {
      this.#ensureThread();
      return;
    }
    const call = this.#queue.shift()!;
    this.#running = call;
    call.timer = setTimeout(() => this.#expire(call), this.#budgetMs);
    try {
      thread.postMessage({
        type: 'call',
        id: call.id,
        method: call.method,
        args: call.args,
        nowMs: this.#deps.clock.now(),
      } satisfies ToReader);
    } catch (e) {
      // Arguments structured clone refuses: the caller's bug, reported on this call alone.
      clearTimeout(call.timer);
      this.#running = undefined;
      call.reject(revivedError('internal', `${call.method}'s arguments cannot cross threads: ${(e as Error).message}`));
      this.#pump();
    }
  }

  /** The running call is past its budget: fail it, abandon its thread, start a fresh one. */
  #expire(call: Call): void {
    if (this.#running !== call) return;
    this.#running = undefined;
    call.reject(queryTimeoutError(call.method, this.#budgetMs));
    const thread = this.#thread;
    this.#thread = undefined;
    if (thread) {
      this.#abandoned.add(thread);
      // The exit comes once the statement returns; until then the thread keeps a core busy.
      thread.unref();
      void thread.terminate();
    }
    this.#log?.warn(
      { method: call.method, budgetMs: this.#budgetMs, abandoned: this.#abandoned.size },
      'admin read ran past its budget: its thread is abandoned, a fresh one serves the next calls',
    );
    this.#ensureThread();
  }

  /** Starts a thread unless one serves or is starting, or too many abandoned ones are still running. */
  #ensureThread(): void {
    if (this.#closed || this.#thread || this.#starting || this.#abandoned.size > this.#maxAbandoned) return;
    this.#starting = this.#spawn().then(
      (thread) => {
        this.#starting = undefined;
        this.#thread = thread;
        this.#pump();
      },
      (e: AppError) => {
        this.#starting = undefined;
        if (this.#closed) return;
        this.#log?.error({ err: e }, 'admin reader thread failed to start');
        // The calls waiting for it fail as the start did; the next call tries again.
        for (const c of this.#queue.splice(0)) c.reject(e);
      },
    );
  }

  /** A new thread with the database open, or the error its open failed with. */
  #spawn(): Promise<Worker> {
    const w = new Worker(THREAD_URL, { workerData: this.#init });
    this.#threadsStarted++;
    return new Promise<Worker>((resolve, reject) => {
      let ready = false;
      w.on('message', (m: FromReader) => {
        if (m.type === 'ready') {
          ready = true;
          if (this.#closed) {
            void closeThread(w);
            reject(readerClosedError());
          } else resolve(w);
        } else if (m.type === 'failed') reject(revivedError(m.code, m.message));
        else if ((m.type === 'result' || m.type === 'error') && w === this.#thread) this.#settle(m);
      });
      w.on('error', (e) => {
        // An uncaught exception ends the thread ('exit' follows); the call it ran fails there.
        this.#log?.error({ err: e }, 'admin reader thread error');
        if (!ready) reject(revivedError('storage_error', `the admin reader thread failed to start: ${e.message}`));
      });
      w.on('exit', () => {
        if (!ready) reject(revivedError('storage_error', 'the admin reader thread exited before it was ready'));
        if (this.#abandoned.delete(w)) {
          // One fewer abandoned statement: a thread may start now for the calls waiting.
          this.#ensureThread();
          return;
        }
        if (w !== this.#thread) return;
        this.#thread = undefined;
        const running = this.#running;
        this.#running = undefined;
        if (running) {
          clearTimeout(running.timer);
          running.reject(revivedError('storage_error', `the admin reader thread exited during ${running.method}`));
        }
        if (!this.#closed) this.#ensureThread();
      });
    });
  }

  #settle(m: Extract<FromReader, { type: 'result' | 'error' }>): void {
    const call = this.#running;
    if (!call || call.id !== m.id) return;
    clearTimeout(call.timer);
    this.#running = undefined;
    if (m.type === 'result') call.resolve(m.value);
    else call.reject(revivedError(m.code, m.message));
    this.#pump();
  }
}

function exitOf(w: Worker): Promise<void> {
  return new Promise((resolve) => {
    w.once('exit', () => resolve());
  });
}

/**
 * Structured clone turns a Buffer into a plain Uint8Array (over a copy of its bytes): make each one
 * a Buffer again, as the Store's types say (request bodies, attempts' response excerpts). Walks
 * arrays, Maps and plain objects, in place.
 */
export function reviveBuffers(v: unknown): unknown {
  if (v instanceof Uint8Array) return Buffer.isBuffer(v) ? v : Buffer.from(v.buffer, v.byteOffset, v.byteLength);
  if (Array.isArray(v)) {
    for (let i = 0; i < v.length; i++) v[i] = reviveBuffers(v[i]);
  } else if (v instanceof Map) {
    for (const [k, x] of v) v.set(k, reviveBuffers(x));
  } else if (v !== null && typeof v === 'object') {
    const o = v as Record<string, unknown>;
    for (const k of Object.keys(o)) o[k] = reviveBuffers(o[k]);
  }
  return v;
}

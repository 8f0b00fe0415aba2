import { statfs } from 'node:fs/promises';
import { dirname } from 'node:path';
import { Worker } from 'node:worker_threads';
import type { Config } from '../../config/config.js';
import { AppError } from '../../shared/errors.js';
import type { Logger } from '../../shared/logger.js';
import type { CapturedRequest, IngestSink, StorageHealth } from '../store.js';
import { closeThread, readyOf } from './threads.js';
import {
  mergeRejection,
  type FromWriter,
  type IngestItem,
  type RejectionCount,
  type ToWriter,
  type WriterInit,
} from './writer-protocol.js';

interface Pending {
  resolve: () => void;
  reject: (e: AppError) => void;
}

export interface SqliteIngestOptions {
  config: Pick<Config, 'db' | 'durability' | 'lockTimeoutMs' | 'minFreeDisk'>;
  logger: Logger;
  /** How often free disk space is measured (statfs). */
  diskCheckEveryMs?: number;
  /** Called after each committed batch (the drain worker wakes for new deliveries). */
  onCommitted?: () => void;
}

const DISK_CHECK_MS = 1000;
const failureMessage = {
  store_busy: 'storage is busy, retry later',
  storage_full: 'storage cannot take writes',
  storage_error: 'storage cannot take writes',
  unknown_bucket: 'no such bucket',
} as const;

/** Pause before a crashed writer thread is started again; until then ingest answers 503. */
const WRITER_RESTART_MS = 1000;
const threadUrl = (name: string) => new URL(`./${name}.js`, import.meta.url);

/**
 * The main-thread side of group commit. Requests captured during one event-loop turn are posted to
 * the writer thread as one message; each `submit()` resolves when its transaction has committed.
 */
export class SqliteIngest implements IngestSink {
  readonly #opts: SqliteIngestOptions;
  readonly #log: Logger;
  readonly #pending = new Map<number, Pending>();
  /** Resolved by close() once every submitted request has settled. */
  #drained: (() => void) | undefined;
  #outbox: IngestItem[] = [];
  #transfer: ArrayBuffer[] = [];
  #rejections = new Map<string, RejectionCount>();
  #seq = 0;
  #writer!: Worker;
  #checkpointer!: Worker;
  #flushScheduled = false;
  #diskTimer: NodeJS.Timeout | undefined;
  #rejectionTimer: NodeJS.Timeout | undefined;
  #restartTimer: NodeJS.Timeout | undefined;
  #lowDisk: { free: number } | undefined;
  #lastFailure: { code: string; message: string } | undefined;
  #closed = false;
  #writerAlive = false;

  private constructor(opts: SqliteIngestOptions) {
    this.#opts = opts;
    this.#log = opts.logger;
  }

  static async start(opts: SqliteIngestOptions): Promise<SqliteIngest> {
    const ingest = new SqliteIngest(opts);
    await ingest.#spawn();
    await ingest.#checkDisk();
    ingest.#diskTimer = setInterval(() => void ingest.#checkDisk(), opts.diskCheckEveryMs ?? DISK_CHECK_MS);
    ingest.#diskTimer.unref();
    ingest.#rejectionTimer = setInterval(() => ingest.#flushRejections(), 1000);
    ingest.#rejectionTimer.unref();
    return ingest;
  }

  async #spawn(): Promise<void> {
    const init = this.#init();
    this.#checkpointer = new Worker(threadUrl('checkpoint-thread'), { workerData: init });
    this.#checkpointer.unref();
    await Promise.all([this.#spawnWriter(), readyOf(this.#checkpointer)]);
    // Checkpoints are housekeeping: if that thread dies, ingest goes on and the WAL grows until
    // the next start; log it loudly rather than crash the process.
    this.#checkpointer.on('error', (e) => this.#log.error({ err: e }, 'checkpoint thread error'));
  }

  #init(): WriterInit {
    return { path: this.#opts.config.db, durability: this.#opts.config.durability };
  }

  async #spawnWriter(): Promise<void> {
    const writer = new Worker(threadUrl('writer-thread'), { workerData: this.#init() });
    await readyOf(writer);
    this.#writer = writer;
    this.#writerAlive = true;
    writer.on('message', (msg: FromWriter) => this.#onMessage(msg));
    writer.on('error', (e) => this.#log.error({ err: e }, 'writer thread error'));
    writer.on('exit', (code) => {
      this.#writerAlive = false;
      // Whatever was still waiting gets its 503 (and a close() waiting on it can finish).
      this.#failAll('storage_error', 'writer thread exited');
      if (this.#closed) return;
      this.#log.error({ code }, 'writer thread exited; requests in flight get 503; restarting it in 1 s');
      this.#restartWriterLater();
    });
  }

  #restartWriterLater(): void {
    this.#restartTimer = setTimeout(() => {
      this.#restartTimer = undefined;
      if (this.#closed) return;
      this.#spawnWriter().then(
        () => {
          // close() may have run while the new thread was starting.
          if (this.#closed) void closeThread(this.#writer);
        },
        (e: unknown) => {
          this.#log.error({ err: e }, 'writer thread restart failed; trying again');
          this.#restartWriterLater();
        },
      );
    }, WRITER_RESTART_MS);
    this.#restartTimer.unref();
  }

  #onMessage(msg: FromWriter): void {
    if (msg.type === 'committed') {
      this.#lastFailure = undefined;
      for (const seq of msg.seqs) this.#settle(seq)?.resolve();
      this.#opts.onCommitted?.();
    } else if (msg.type === 'failed') {
      if (msg.code === 'storage_full' || msg.code === 'storage_error') this.#lastFailure = { code: msg.code, message: msg.message };
      if (msg.code !== 'unknown_bucket')
        this.#log.warn({ code: msg.code, count: msg.seqs.length, msg: msg.message }, 'batch not committed');
      const err = new AppError(msg.code, failureMessage[msg.code]);
      for (const seq of msg.seqs) this.#settle(seq)?.reject(err);
    }
  }

  #failAll(code: 'storage_error', message: string): void {
    this.#lastFailure = { code, message };
    const err = new AppError(code, 'storage cannot take writes');
    for (const seq of [...this.#pending.keys()]) this.#settle(seq)?.reject(err);
  }

  /** Takes a request out of the pending set, waking close() when the last one settles. */
  #settle(seq: number): Pending | undefined {
    const p = this.#pending.get(seq);
    this.#pending.delete(seq);
    if (this.#pending.size === 0) this.#drained?.();
    return p;
  }

  async #checkDisk(): Promise<void> {
    try {
      const s = await statfs(dirname(this.#opts.config.db));
      const free = s.bavail * s.bsize;
      const wasLow = this.#lowDisk !== undefined;
      this.#lowDisk = free < this.#opts.config.minFreeDisk ? { free } : undefined;
      if (wasLow !== (this.#lowDisk !== undefined)) {
        this.#log.warn(
          { free, floor: this.#opts.config.minFreeDisk },
          this.#lowDisk ? 'free disk under floor: ingest paused' : 'free disk recovered',
        );
      }
    } catch (e) {
      this.#log.warn({ err: e }, 'statfs failed');
    }
  }

  health(): StorageHealth {
    if (!this.#writerAlive) return { ok: false, code: 'storage_error', reason: 'writer thread is not running' };
    if (this.#lowDisk) {
      return {
        ok: false,
        code: 'storage_full',
        reason: `free disk ${this.#lowDisk.free} bytes is under the floor of ${this.#opts.config.minFreeDisk}`,
      };
    }
    if (this.#lastFailure) return { ok: false, code: this.#lastFailure.code, reason: this.#lastFailure.message };
    return { ok: true };
  }

  /**
   * Whether a new request may be taken at all. A recent write failure does not refuse: the next
   * batch is the probe that notices recovery (a freed disk) without a restart.
   */
  accepting(): StorageHealth {
    if (!this.#writerAlive) return this.health();
    if (this.#lowDisk) return this.health();
    return { ok: true };
  }

  submit(req: CapturedRequest, options: { createDelivery: boolean }): Promise<void> {
    if (this.#closed || !this.#writerAlive) return Promise.reject(new AppError('storage_error', 'storage is closing'));
    const seq = ++this.#seq;
    // Structured clone would copy a view's whole backing ArrayBuffer (a pool slab or socket read
    // buffer), so hand the writer an exact-size buffer and transfer it instead of cloning.
    let body: Uint8Array = req.body;
    if (body.byteOffset !== 0 || body.byteLength !== body.buffer.byteLength || !(body.buffer instanceof ArrayBuffer)) {
      body = new Uint8Array(body);
    }
    this.#transfer.push(body.buffer as ArrayBuffer);
    this.#outbox.push({
      seq,
      id: req.id,
      bucket: req.bucket,
      receivedAt: req.receivedAt,
      method: req.method,
      path: req.path,
      query: req.query,
      rawHeaders: req.rawHeaders,
      body,
      peer: req.peer,
      ...(req.rawTrailers && req.rawTrailers.length > 0 ? { rawTrailers: req.rawTrailers } : {}),
      createDelivery: options.createDelivery,
      ...(req.disposition !== undefined ? { disposition: req.disposition } : {}),
      ...(req.verdict !== undefined ? { verdict: req.verdict } : {}),
      ...(req.dedup !== undefined ? { dedup: req.dedup } : {}),
      deadline: Date.now() + this.#opts.config.lockTimeoutMs,
    });
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      setImmediate(() => this.#flushOutbox());
    }
    return new Promise<void>((resolve, reject) => this.#pending.set(seq, { resolve, reject }));
  }

  #flushOutbox(): void {
    this.#flushScheduled = false;
    if (this.#outbox.length === 0) return;
    const msg: ToWriter = { type: 'ingest', items: this.#outbox };
    const transfer = this.#transfer;
    this.#outbox = [];
    this.#transfer = [];
    this.#writer.postMessage(msg, transfer);
  }

  countRejection(bucket: string, reason: string): void {
    mergeRejection(this.#rejections, [bucket, reason, 1, Date.now()]);
  }

  #flushRejections(): void {
    if (this.#rejections.size === 0 || !this.#writerAlive) return;
    const msg: ToWriter = { type: 'rejections', counts: [...this.#rejections.values()] };
    this.#rejections = new Map();
    this.#writer.postMessage(msg);
  }

  async close(): Promise<void> {
    if (this.#closed) return;
    this.#flushOutbox();
    this.#flushRejections();
    this.#closed = true;
    clearInterval(this.#diskTimer);
    clearInterval(this.#rejectionTimer);
    clearTimeout(this.#restartTimer);
    // Let every submitted request settle before the writer closes its connection.
    if (this.#pending.size > 0) await new Promise<void>((r) => (this.#drained = r));
    await Promise.all([closeThread(this.#checkpointer), this.#writerAlive ? closeThread(this.#writer) : Promise.resolve()]);
  }
}

/**
 * The admin reader thread: a read-only SqliteStore on a connection of its own, serving the Store
 * read methods it was started with, one call at a time, by name. better-sqlite3 runs each
 * statement synchronously, so a long one (a body search over many rows) holds this thread, never
 * the main one, where ingest runs. The main side (sqlite-reader.ts) enforces the time budget: a
 * statement cannot be interrupted (better-sqlite3 exposes no sqlite3_interrupt), so past the budget
 * it ends this thread and starts another.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { AppError } from '../../shared/errors.js';
import type { Store } from '../store.js';
import type { FromReader, ReaderInit, ToReader } from './reader-protocol.js';
import { sqliteStorageErrorCode } from './sqlite-error.js';
import { SqliteStore } from './sqlite-store.js';

const port = parentPort!;
const init = workerData as ReaderInit;
const post = (msg: FromReader) => port.postMessage(msg);
const allowed = new Set(init.methods);

/** An error as a code and message: AppErrors keep theirs, SQLite's get the storage code. */
function describe(e: unknown): { code: string; message: string } {
  if (e instanceof AppError) return { code: e.code, message: e.message };
  const message = e instanceof Error ? e.message : String(e);
  return { code: sqliteStorageErrorCode(e) ?? 'internal', message };
}

// The caller's now, for the reads that look back from it (tail): set by each call.
let nowMs = Date.now();

async function main(): Promise<void> {
  let store: SqliteStore;
  try {
    store = await SqliteStore.openReadOnly({ path: init.path, busyTimeoutMs: init.busyTimeoutMs, clock: { now: () => nowMs } });
  } catch (e) {
    post({ type: 'failed', ...describe(e) });
    port.close();
    return;
  }
  port.on('message', (msg: ToReader) => {
    if (msg.type === 'close') {
      void store.close().finally(() => {
        post({ type: 'closed' });
        port.close();
      });
      return;
    }
    void answer(store, msg);
  });
  post({ type: 'ready' });
}

async function answer(store: SqliteStore, call: Extract<ToReader, { type: 'call' }>): Promise<void> {
  let value: unknown;
  try {
    if (!allowed.has(call.method)) throw new AppError('internal', `the admin reader does not serve ${call.method}`);
    nowMs = call.nowMs;
    const method = store[call.method as keyof Store] as (...args: unknown[]) => Promise<unknown>;
    value = await method.apply(store, call.args);
  } catch (e) {
    post({ type: 'error', id: call.id, ...describe(e) });
    return;
  }
  try {
    post({ type: 'result', id: call.id, value });
  } catch (e) {
    // A value structured clone refuses (a function, a class with private state): a bug here, said plainly.
    post({
      type: 'error',
      id: call.id,
      code: 'internal',
      message: `${call.method}'s result cannot cross threads: ${(e as Error).message}`,
    });
  }
}

void main();

/**
 * Starting and stopping the SQLite helper threads (writer, checkpointer): each posts `ready` once
 * its connection is open, and `closed` after a `close` message.
 */
import type { Worker } from 'node:worker_threads';
import { AppError } from '../../shared/errors.js';
import { sqliteStorageErrorCode } from './sqlite-error.js';

/** Resolves when the thread says it is ready; rejects with an AppError naming the SQLite code if it failed to start. */
export function readyOf(w: Worker): Promise<void> {
  return new Promise((resolve, reject) => {
    // A SqliteError thrown in a thread arrives as a plain `{ code }` object (its class and message
    // do not survive the structured clone): make it an error that says what failed.
    const onError = (e: unknown) => {
      if (e instanceof Error) return reject(e);
      const code = (e as { code?: unknown } | null)?.code;
      reject(
        new AppError(
          sqliteStorageErrorCode(e) ?? 'storage_error',
          `a storage thread failed to open the database${typeof code === 'string' ? `: ${code}` : ''}`,
          { cause: e },
        ),
      );
    };
    const onMsg = (m: { type: string }) => {
      if (m.type === 'ready') {
        w.off('error', onError);
        w.off('message', onMsg);
        resolve();
      }
    };
    w.on('message', onMsg);
    w.once('error', onError);
  });
}

/** Asks the thread to close its connection, then waits for it to exit. */
export function closeThread(w: Worker): Promise<void> {
  return new Promise((resolve) => {
    const done = () => resolve();
    w.once('exit', done);
    w.on('message', (m: { type: string }) => {
      if (m.type === 'closed') void w.terminate().then(done, done);
    });
    w.postMessage({ type: 'close' });
  });
}

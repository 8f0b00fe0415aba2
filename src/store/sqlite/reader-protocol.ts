/** Messages between the main thread and the admin reader thread (structured-clone safe). */

export interface ReaderInit {
  path: string;
  /** The Store methods the thread serves; any other name is refused. */
  methods: readonly string[];
  /** busy_timeout of the read-only connection, ms (a reader waits only while the WAL index is rebuilt). */
  busyTimeoutMs: number;
}

export type ToReader =
  /** One call at a time: the main thread posts the next only after this one's answer. `nowMs`: the caller's clock. */
  { type: 'call'; id: number; method: string; args: unknown[]; nowMs: number } | { type: 'close' };

export type FromReader =
  | { type: 'ready' }
  /** The thread could not open the database; it exits after this. */
  | { type: 'failed'; code: string; message: string }
  | { type: 'result'; id: number; value: unknown }
  | { type: 'error'; id: number; code: string; message: string }
  | { type: 'closed' };

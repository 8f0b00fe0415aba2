import { randomUUID } from 'node:crypto';
import { mkdir, open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * A body without a declared length (chunked) that grows past the spool threshold goes to an
 * anonymous file instead of memory: opened in the spool folder, unlinked at once and kept by its
 * handle, so a crash leaves nothing behind. A body refused at limit + 1 then costs a few blocks
 * of memory instead of the limit (reliability case 11); a body that completes is read back
 * whole, as the insert needs it.
 *
 * Writes are queued in order; `backlog` is the bytes queued but not yet written, for the caller's
 * backpressure. Any write error (ENOSPC above all) is kept and reported by `collect()`.
 */
export class Spool {
  #handle: Promise<FileHandle>;
  #queue: Promise<unknown>;
  #written = 0;
  #backlog = 0;
  #error: NodeJS.ErrnoException | undefined;
  #onDrain: (() => void) | undefined;
  #pathLeft: string | undefined;

  constructor(dir: string) {
    const path = join(dir, `${randomUUID()}.body`);
    // The folder is made on first use (and again if someone removed it while we ran).
    const opening = open(path, 'w+', 0o600).catch(async (e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
      await mkdir(dir, { recursive: true, mode: 0o700 });
      return open(path, 'w+', 0o600);
    });
    this.#handle = opening.then(async (fh) => {
      // Unlinked while open: the bytes live as long as the handle. Where the platform refuses,
      // the file is removed when the spool is closed.
      await unlink(path).catch(() => (this.#pathLeft = path));
      return fh;
    });
    this.#queue = this.#handle.catch((e: NodeJS.ErrnoException) => {
      this.#error ??= e;
    });
  }

  get backlog(): number {
    return this.#backlog;
  }

  get failed(): NodeJS.ErrnoException | undefined {
    return this.#error;
  }

  /** Queues `buf` for writing at the end of the file. The buffer must not be reused by the caller. */
  write(buf: Buffer): void {
    this.#backlog += buf.length;
    const position = this.#written;
    this.#written += buf.length;
    this.#queue = this.#queue.then(async () => {
      try {
        if (this.#error) return;
        const fh = await this.#handle;
        let off = 0;
        while (off < buf.length) {
          const { bytesWritten } = await fh.write(buf, off, buf.length - off, position + off);
          off += bytesWritten;
        }
      } catch (e) {
        this.#error ??= e as NodeJS.ErrnoException;
      } finally {
        this.#backlog -= buf.length;
        if (this.#backlog === 0) {
          const f = this.#onDrain;
          this.#onDrain = undefined;
          f?.();
        }
      }
    });
  }

  /** Calls `f` once every queued write has finished (at once when none is queued). */
  onDrain(f: () => void): void {
    if (this.#backlog === 0) f();
    else this.#onDrain = f;
  }

  /** Waits for the queued writes and returns the whole file; throws the first write error. Closes the spool. */
  async collect(): Promise<Buffer> {
    try {
      await this.#queue;
      if (this.#error) throw this.#error;
      const fh = await this.#handle;
      const out = Buffer.allocUnsafe(this.#written);
      let off = 0;
      while (off < out.length) {
        const { bytesRead } = await fh.read(out, off, out.length - off, off);
        if (bytesRead === 0) throw Object.assign(new Error(`spool file ended at ${off} of ${out.length} bytes`), { code: 'EIO' });
        off += bytesRead;
      }
      return out;
    } finally {
      await this.close();
    }
  }

  /** Drops the spooled bytes. Never throws. */
  async close(): Promise<void> {
    await this.#queue.catch(() => {});
    const fh = await this.#handle.catch(() => undefined);
    await fh?.close().catch(() => {});
    if (this.#pathLeft) await unlink(this.#pathLeft).catch(() => {});
  }
}

/** Bodies without a Content-Length spool to disk once they pass this many bytes. */
export const SPOOL_THRESHOLD_BYTES = 1024 * 1024; // 1 MiB
/** Reading from the client pauses while this many spooled bytes wait to be written. */
export const SPOOL_HIGH_WATER_BYTES = 1024 * 1024; // 1 MiB

/** The default spool folder for a SQLite database (config.spoolDir holds the one in use). */
export { spoolDirFor } from '../config/config.js';

/** storage_full for a full disk or quota, storage_error otherwise. */
export function spoolErrorCode(e: NodeJS.ErrnoException | undefined): 'storage_full' | 'storage_error' {
  return e?.code === 'ENOSPC' || e?.code === 'EDQUOT' ? 'storage_full' : 'storage_error';
}

import { randomUUID } from 'node:crypto';
import { closeSync, constants, createReadStream, openSync, statSync, writeSync } from 'node:fs';
import { mkdir, open, unlink, type FileHandle } from 'node:fs/promises';
import { join } from 'node:path';
import { isUtf8 } from 'node:buffer';

/**
 * `requests import` reads its source once, into a private copy, and checks and stores from that
 * copy only: a file rewritten (or a pipe fed) while the import runs cannot change what is stored,
 * so "the whole file is checked first; a bad record stores nothing" holds for the bytes stored.
 *
 * The copy is a file in the spool folder beside the database (`<db>-spool`, as ingest's spooled
 * bodies), mode 0600, unlinked as soon as it is open and kept by its handle: a crash leaves
 * nothing behind, and the bytes cost disk, not memory (64 KiB chunks both ways).
 */
export class ImportCopy {
  readonly #fh: FileHandle;
  readonly #pathLeft: string | undefined;
  readonly size: number;

  private constructor(fh: FileHandle, size: number, pathLeft: string | undefined) {
    this.#fh = fh;
    this.size = size;
    this.#pathLeft = pathLeft;
  }

  /** Copies `source` (a file, a FIFO, /dev/stdin) into `dir`, reading it once; `signal` stops the reading. */
  static async from(source: string, dir: string, signal?: AbortSignal): Promise<ImportCopy> {
    const path = join(dir, `${randomUUID()}.import`);
    const fh = await open(path, 'wx+', 0o600).catch(async (e: NodeJS.ErrnoException) => {
      if (e.code !== 'ENOENT') throw e;
      await mkdir(dir, { recursive: true, mode: 0o700 });
      return open(path, 'wx+', 0o600);
    });
    // Unlinked while open; where the platform refuses, close() removes it.
    const pathLeft = await unlink(path).then(
      () => undefined,
      () => path,
    );
    let size = 0;
    const wake = () => wakePipeReader(source);
    signal?.addEventListener('abort', wake, { once: true });
    try {
      for await (const chunk of createReadStream(source, {
        highWaterMark: CHUNK_BYTES,
        ...(signal ? { signal } : {}),
      }) as AsyncIterable<Buffer>) {
        let off = 0;
        while (off < chunk.length) {
          const { bytesWritten } = await fh.write(chunk, off, chunk.length - off, size + off);
          off += bytesWritten;
        }
        size += chunk.length;
      }
    } catch (e) {
      await fh.close().catch(() => {});
      if (pathLeft) await unlink(pathLeft).catch(() => {});
      throw e;
    } finally {
      signal?.removeEventListener('abort', wake);
    }
    return new ImportCopy(fh, size, pathLeft);
  }

  /** The copy's bytes, in order, in chunks of up to 64 KiB. */
  async *chunks(): AsyncGenerator<Buffer> {
    let position = 0;
    while (position < this.size) {
      const buf = Buffer.allocUnsafe(Math.min(CHUNK_BYTES, this.size - position));
      const { bytesRead } = await this.#fh.read(buf, 0, buf.length, position);
      if (bytesRead === 0) throw Object.assign(new Error(`import copy ended at ${position} of ${this.size} bytes`), { code: 'EIO' });
      position += bytesRead;
      yield bytesRead === buf.length ? buf : buf.subarray(0, bytesRead);
    }
  }

  /**
   * The copy's lines (split at LF, a CR before it dropped), numbered from 1, each checked to be
   * UTF-8 (a stray byte would otherwise become U+FFFD unseen). A long line is gathered as a list of
   * chunks and joined once: linear in its length.
   */
  async *lines(): AsyncGenerator<{ line: number; text: string } | { line: number; notUtf8: true }> {
    let parts: Buffer[] = [];
    let line = 0;
    const emit = (bytes: Buffer) => {
      line++;
      const end = bytes.length > 0 && bytes[bytes.length - 1] === 0x0d ? bytes.length - 1 : bytes.length;
      const text = bytes.subarray(0, end);
      return isUtf8(text) ? { line, text: text.toString('utf8') } : { line, notUtf8: true as const };
    };
    for await (const chunk of this.chunks()) {
      let start = 0;
      for (let nl = chunk.indexOf(0x0a); nl >= 0; nl = chunk.indexOf(0x0a, start)) {
        const piece = chunk.subarray(start, nl);
        yield emit(parts.length === 0 ? piece : Buffer.concat([...parts, piece]));
        parts = [];
        start = nl + 1;
      }
      if (start < chunk.length) parts.push(chunk.subarray(start));
    }
    if (parts.length > 0) yield emit(Buffer.concat(parts));
  }

  /** The whole copy in memory (a HAR is one JSON document). */
  async readAll(): Promise<Buffer> {
    const parts: Buffer[] = [];
    for await (const chunk of this.chunks()) parts.push(chunk);
    return Buffer.concat(parts, this.size);
  }

  /** Drops the copy. Never throws. */
  async close(): Promise<void> {
    await this.#fh.close().catch(() => {});
    if (this.#pathLeft) await unlink(this.#pathLeft).catch(() => {});
  }
}

const CHUNK_BYTES = 64 * 1024; // 64 KiB

/**
 * A read of a pipe (a FIFO, or /dev/stdin fed by one) that has no data yet waits in a thread of
 * libuv's pool, and Node cannot exit while it does (it joins the pool at exit): an import stopped
 * by Ctrl-C or SIGTERM would hang there while the writer lives (SIGTERM reaches only us). One byte
 * written into the pipe ends that read; the aborted stream asks for no more. Nothing else is touched.
 */
function wakePipeReader(source: string): void {
  try {
    if (!statSync(source).isFIFO()) return;
    const fd = openSync(source, constants.O_WRONLY | constants.O_NONBLOCK);
    try {
      writeSync(fd, '\n');
    } finally {
      closeSync(fd);
    }
  } catch {
    // No reader any more (ENXIO), or the pipe is full (EAGAIN, so the read is not waiting): fine.
  }
}

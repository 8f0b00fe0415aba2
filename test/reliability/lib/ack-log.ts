import { createHash } from 'node:crypto';
import { appendFileSync, writeFileSync } from 'node:fs';

/**
 * What the sender knows about one request it sent, enough to check the stored row without
 * keeping the body: method, raw path and query as they went on the wire, a digest of the raw
 * header list (names and values in order, latin1, as Node's rawHeaders reads them) and the body's
 * sha256 and size.
 */
export interface SentRequest {
  /** The load generator's sequence number, also sent as the `x-reliability-seq` header. */
  seq: number;
  bucket: string;
  method: string;
  /** The sub-path after `/b/<bucket>`, raw, as the receiver stores it. */
  path: string;
  /** The raw query without `?`; null when the target had no `?`. */
  query: string | null;
  headersDigest: string;
  sha256: string;
  size: number;
}

/** A sent request the receiver acknowledged, with the id from its answer. */
export interface AckEntry extends SentRequest {
  id: string;
  status: number;
}

/** sha256 over the raw header list as a flat [name, value, …] array, JSON-encoded (as ingest stores it). */
export function headerListDigest(flat: readonly string[]): string {
  return createHash('sha256').update(JSON.stringify(flat)).digest('hex');
}

export function sha256Hex(bytes: Uint8Array): string {
  return createHash('sha256').update(bytes).digest('hex');
}

/**
 * Every acknowledged request, in the order the acks arrived. Kept in memory for the invariant
 * check and appended (NDJSON, synchronously, one line per ack) to a file when given one, so a
 * failed run leaves the evidence behind.
 */
export class AckLog {
  readonly #entries: AckEntry[] = [];
  readonly #byId = new Map<string, AckEntry>();
  readonly #file: string | undefined;
  /** Acks whose id was seen before (the receiver must never hand out one id twice). */
  duplicateIds = 0;

  constructor(file?: string) {
    this.#file = file;
    if (file) writeFileSync(file, '');
  }

  append(entry: AckEntry): void {
    if (this.#byId.has(entry.id)) this.duplicateIds++;
    this.#entries.push(entry);
    this.#byId.set(entry.id, entry);
    if (this.#file) appendFileSync(this.#file, `${JSON.stringify(entry)}\n`);
  }

  get size(): number {
    return this.#entries.length;
  }

  get(id: string): AckEntry | undefined {
    return this.#byId.get(id);
  }

  /** Entries from position `from` on (the acks since an earlier check). */
  since(from: number): AckEntry[] {
    return this.#entries.slice(from);
  }

  all(): readonly AckEntry[] {
    return this.#entries;
  }
}

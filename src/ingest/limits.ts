import { METHODS } from 'node:http';

/** Request-shape limits, enforced in code (Node's own parser limits are raised above them). */
export const MAX_REQUEST_LINE = 16 * 1024; // 16 KiB: request line and URL, else 414
export const MAX_HEADER_BYTES = 64 * 1024; // 64 KiB of header names and values in total, else 431
export const MAX_HEADER_COUNT = 2000; // more headers than this, else 431
/**
 * Methods ingest answers 405: TRACE echoes the request back (cross-site tracing), CONNECT asks for a
 * tunnel. `requests import` refuses them too, so no stored request carries one.
 */
export const REFUSED_METHODS: ReadonlySet<string> = new Set(['TRACE', 'CONNECT']);
/**
 * Methods Node's parser (llhttp) reads at all, case-sensitive: any other token (`FOO`, `get`) is
 * answered 400 before a route runs, so ingest can never have stored it. 34 on Node 20.
 */
export const PARSED_METHODS: ReadonlySet<string> = new Set(METHODS);

/**
 * Whether a header value (a latin1 byte string) holds only the bytes both ends accept: HTAB, SP to
 * `~`, and 0x80-0xFF (obs-text). Node's parser refuses every other byte at ingest (llhttp's
 * HEADER_CHARS: NUL, the other C0 controls, ESC and DEL give HPE_INVALID_HEADER_TOKEN), and undici
 * refuses the same set before sending (`isValidHeaderValue`, /[^\t\x20-\x7e\x80-\xff]/). One pass.
 */
export function isFieldValue(value: string): boolean {
  for (let i = 0; i < value.length; i++) {
    const c = value.charCodeAt(i);
    if (c === 0x09 || (c >= 0x20 && c <= 0x7e) || (c >= 0x80 && c <= 0xff)) continue;
    return false;
  }
  return true;
}

/**
 * Node's parser limit (request line + headers) sits above ours, so our code sees the request and
 * answers with the precise status instead of Node's blanket 431.
 */
export const NODE_MAX_HEADER_SIZE = MAX_REQUEST_LINE + MAX_HEADER_BYTES + 2 * MAX_HEADER_COUNT * 4 + 1024;

/** Bytes of a line's start kept to tell a request line from a header line (a method is shorter). */
const LINE_HEAD_BYTES = 32;

/**
 * The first bytes (latin1) of the line in progress after `chunk[0, end)`, given those before it:
 * the start of the last line begun in the chunk, or the earlier start carried on. Bytes from LF to
 * LF, so a body in between reads as lines too; only the line in progress matters.
 */
export function lineHeadAfter(before: string, chunk: Buffer, end: number): string {
  if (end <= 0) return before;
  const lf = chunk.lastIndexOf(10, end - 1);
  if (lf !== -1) return chunk.toString('latin1', lf + 1, Math.min(end, lf + 1 + LINE_HEAD_BYTES));
  if (before.length >= LINE_HEAD_BYTES) return before;
  return before + chunk.toString('latin1', 0, Math.min(end, LINE_HEAD_BYTES - before.length));
}

/**
 * A request line starts with a method token and a space; a header or trailer line with a name token
 * and a colon (llhttp refuses space before the colon, and obs-fold lines).
 */
export function isRequestLine(head: string): boolean {
  return /^[!#$%&'*+.^_`|~0-9A-Za-z-]+ /.test(head);
}

/** Bytes a header list takes on the wire: `name: value\r\n` per header. */
export function headerBytes(rawHeaders: readonly string[]): number {
  let n = 0;
  for (let i = 0; i < rawHeaders.length; i++) n += rawHeaders[i]!.length;
  return n + (rawHeaders.length / 2) * 4;
}

/**
 * More than one Host header: RFC 9112 §3.2 requires a 400 ("any that contains more than one Host
 * header field line"), since proxies and servers may each pick a different one.
 */
export function repeatedHost(rawHeaders: readonly string[]): boolean {
  let seen = 0;
  for (let i = 0; i < rawHeaders.length; i += 2) if (rawHeaders[i]!.toLowerCase() === 'host' && ++seen > 1) return true;
  return false;
}

/** Transfer-Encoding values other than exactly `chunked` (e.g. `gzip, chunked`) get 501. */
export function unsupportedTransferEncoding(rawHeaders: readonly string[]): string | undefined {
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (rawHeaders[i]!.toLowerCase() !== 'transfer-encoding') continue;
    const value = rawHeaders[i + 1]!.trim().toLowerCase();
    if (value !== 'chunked') return value;
  }
  return undefined;
}

/** Body bytes in flight across all requests; a request that would exceed the budget gets 503. */
export class InflightBudget {
  #used = 0;
  constructor(readonly limit: number) {}
  get used(): number {
    return this.#used;
  }
  tryReserve(bytes: number): boolean {
    if (this.#used + bytes > this.limit) return false;
    this.#used += bytes;
    return true;
  }
  release(bytes: number): void {
    this.#used -= bytes;
  }
}

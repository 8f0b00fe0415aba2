/**
 * Reading `requests export` output back (`requests import`), pure: parsed JSON in, the request to
 * store out, or an error naming what is wrong. NDJSON records and HAR entries written by hookbucket
 * come back exactly; a HAR from another tool works too (path and query from its URL, a leading
 * `/b/<bucket>` dropped, HTTP/2 pseudo-headers skipped).
 */
import {
  headerBytes,
  isFieldValue,
  MAX_HEADER_BYTES,
  MAX_HEADER_COUNT,
  PARSED_METHODS,
  REFUSED_METHODS,
  repeatedHost,
  unsupportedTransferEncoding,
} from '../ingest/limits.js';

export interface ImportedRequest {
  method: string;
  /** Raw sub-path after /b/<bucket>, '' when none. */
  path: string;
  query: string | null;
  /** Flat [name, value, …], values as latin1 byte strings. */
  rawHeaders: string[];
  body: Buffer;
  /** Chunked trailers, flat [name, value, …]; set only when the record has some. */
  rawTrailers?: string[];
}

export class ImportFormatError extends Error {}

/**
 * Every check here runs in one pass over its input: a hostile 1 MB record costs a millisecond,
 * not the quadratic backtracking of a regex like /^[A-Za-z0-9+/\r\n]*={0,2}\s*$/ (200 KB of
 * newlines then `!` took 10.6 s). In the regexes left, no two repeats can match the same
 * character, so none backtracks.
 */
const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** A request-target part: no whitespace, controls, or characters past one byte. */
const TARGET_PART = /^[^\s\0-\x1f\x7f\u0100-\uffff]*$/;
/** 1*DIGIT (RFC 9110 §8.6), at most 15 digits so that it is a safe integer. */
const DIGITS = /^[0-9]{1,15}$/;

function str(v: unknown, what: string): string {
  if (typeof v !== 'string') throw new ImportFormatError(`${what} must be a string`);
  return v;
}

/**
 * The header list's names and values: names are tokens, values hold only the bytes ingest accepts
 * and undici sends (isFieldValue: no NUL, CR, LF, other C0 controls, ESC or DEL; latin1 code units).
 */
export function checkHeaderList(rawHeaders: readonly string[], what = 'header'): void {
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (!TOKEN.test(rawHeaders[i]!)) throw new ImportFormatError(`${what} name ${JSON.stringify(rawHeaders[i])} is not an HTTP token`);
    if (!isFieldValue(rawHeaders[i + 1]!)) {
      throw new ImportFormatError(
        `${what} ${rawHeaders[i]} has a value with a control byte (NUL, CR, LF, ESC, DEL, …) or a character past \\u00ff (values are latin1 byte strings)`,
      );
    }
  }
}

/**
 * Content-Length and Transfer-Encoding as ingest would have taken them: at most one
 * Content-Length, equal to the body's length; never both (RFC 9112 §6.3: the shape of request
 * smuggling; Node's parser answers 400 to either).
 */
function checkFraming(rawHeaders: readonly string[], bodyLength: number): void {
  let lengths = 0;
  let chunked = false;
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!.toLowerCase();
    if (name === 'transfer-encoding') chunked = true;
    if (name !== 'content-length') continue;
    const value = rawHeaders[i + 1]!;
    if (++lengths > 1) throw new ImportFormatError('more than one Content-Length header');
    if (!DIGITS.test(value)) throw new ImportFormatError(`Content-Length ${JSON.stringify(value)} is not a byte count`);
    if (Number(value) !== bodyLength) throw new ImportFormatError(`Content-Length ${value} disagrees with the body of ${bodyLength} bytes`);
  }
  if (chunked && lengths > 0)
    throw new ImportFormatError('Transfer-Encoding together with Content-Length (ingest refuses it: RFC 9112 §6.3)');
}

/**
 * What a record must be to be stored: what a socket could carry, what ingest would have accepted
 * (the same method list, header limits, Host and Transfer-Encoding rules), and what undici will
 * send when the worker forwards it.
 */
function check(method: string, path: string, query: string | null, rawHeaders: string[], body: Buffer): void {
  if (!TOKEN.test(method)) throw new ImportFormatError(`method ${JSON.stringify(method)} is not an HTTP token`);
  // Node's parser answers 400 to a method it does not know, and it is case-sensitive (`get` is not GET).
  if (!PARSED_METHODS.has(method))
    throw new ImportFormatError(
      `method ${JSON.stringify(method)} is not one Node's HTTP parser accepts (ingest answers 400; methods are case-sensitive)`,
    );
  if (REFUSED_METHODS.has(method)) throw new ImportFormatError(`method ${method} is refused at ingest (405) and never forwarded`);
  if (path !== '' && !path.startsWith('/')) throw new ImportFormatError(`path ${JSON.stringify(path)} must be empty or start with /`);
  if (!TARGET_PART.test(path) || path.includes('?'))
    throw new ImportFormatError(`path ${JSON.stringify(path)} has characters a request target cannot carry`);
  if (query !== null && !TARGET_PART.test(query))
    throw new ImportFormatError(`query ${JSON.stringify(query)} has characters a request target cannot carry`);
  checkHeaderList(rawHeaders);
  if (rawHeaders.length / 2 > MAX_HEADER_COUNT) throw new ImportFormatError(`more than ${MAX_HEADER_COUNT} headers (ingest answers 431)`);
  if (headerBytes(rawHeaders) > MAX_HEADER_BYTES)
    throw new ImportFormatError(`headers over ${MAX_HEADER_BYTES} bytes (ingest answers 431)`);
  if (repeatedHost(rawHeaders)) throw new ImportFormatError('more than one Host header (ingest answers 400)');
  const te = unsupportedTransferEncoding(rawHeaders);
  if (te !== undefined) throw new ImportFormatError(`Transfer-Encoding ${JSON.stringify(te)} (ingest answers 501; only chunked)`);
  checkFraming(rawHeaders, body.length);
}

/** Base64 digit values by character code; -1 for characters outside the RFC 4648 §4 alphabet. */
const BASE64_DIGITS = (() => {
  const t = new Int8Array(128).fill(-1);
  const alphabet = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  for (let i = 0; i < alphabet.length; i++) t[alphabet.charCodeAt(i)] = i;
  return t;
})();

/**
 * Strict base64 (RFC 4648 §4) in one pass, or undefined: the standard alphabet (not base64url);
 * CR and LF skipped anywhere, as in line-wrapped (MIME) base64, and no other whitespace; whole
 * groups of four; `=` only as one or two padding characters at the end; and the unused bits before
 * the padding zero (§3.5), so that each byte string has one encoding. `"A"` is refused, not read
 * as no bytes; so are `"QQ"` (unpadded) and `"QR=="`.
 */
export function decodeBase64(text: string): Buffer | undefined {
  let digits = 0;
  let pad = 0;
  let last = 0;
  let breaks = false;
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c === 0x0a || c === 0x0d) {
      breaks = true;
      continue;
    }
    if (c === 0x3d) {
      if (++pad > 2) return undefined;
      continue;
    }
    const v = c < 128 ? BASE64_DIGITS[c]! : -1;
    if (v < 0 || pad > 0) return undefined;
    last = v;
    digits++;
  }
  if ((digits + pad) % 4 !== 0) return undefined;
  if ((pad === 1 && (last & 0x03) !== 0) || (pad === 2 && (last & 0x0f) !== 0)) return undefined;
  const out = Buffer.from(breaks ? text.replace(/[\r\n]+/g, '') : text, 'base64');
  // Node's decoder skips what it does not know; the scan above left it nothing to skip.
  return out.length === ((digits + pad) / 4) * 3 - pad ? out : undefined;
}

/** Lone surrogates cannot be UTF-8: Buffer.from would store U+FFFD in their place. */
function isWellFormed(text: string): boolean {
  return (text as unknown as { isWellFormed(): boolean }).isWellFormed();
}

/**
 * Trailers are stored as evidence and never sent, but hold only what ingest would have taken: the
 * same bytes as header values, within the same limits (ingest answers 431 above them).
 */
function withTrailers(rawTrailers: string[]): { rawTrailers?: string[] } {
  checkHeaderList(rawTrailers, 'trailer');
  if (rawTrailers.length / 2 > MAX_HEADER_COUNT) throw new ImportFormatError(`more than ${MAX_HEADER_COUNT} trailers (ingest answers 431)`);
  if (headerBytes(rawTrailers) > MAX_HEADER_BYTES)
    throw new ImportFormatError(`trailers over ${MAX_HEADER_BYTES} bytes (ingest answers 431)`);
  return rawTrailers.length > 0 ? { rawTrailers } : {};
}

function decodeBody(text: string, encoding: unknown, what: string): Buffer {
  if (encoding === undefined || encoding === null || encoding === 'utf8' || encoding === 'utf-8') {
    if (!isWellFormed(text)) throw new ImportFormatError(`${what} has a lone surrogate (\\ud800-\\udfff), which UTF-8 cannot hold`);
    return Buffer.from(text, 'utf8');
  }
  if (encoding === 'base64') {
    const body = decodeBase64(text);
    if (body === undefined) {
      throw new ImportFormatError(
        `${what} is not valid base64 (RFC 4648 alphabet, whole groups of four, = padding only at the end; line breaks allowed)`,
      );
    }
    return body;
  }
  throw new ImportFormatError(`unknown body encoding ${JSON.stringify(encoding)} (utf8 or base64)`);
}

/** One NDJSON record (`requests show --json` field names). */
export function fromNdjsonRecord(rec: unknown): ImportedRequest {
  if (rec === null || typeof rec !== 'object' || Array.isArray(rec)) throw new ImportFormatError('not a JSON object');
  const o = rec as Record<string, unknown>;
  const method = str(o.method, 'method');
  const path = o.path === undefined ? '' : str(o.path, 'path');
  const query = o.query === undefined || o.query === null ? null : str(o.query, 'query');
  if (!Array.isArray(o.headers)) throw new ImportFormatError('headers must be a list of [name, value] pairs');
  const rawHeaders: string[] = [];
  for (const h of o.headers) {
    if (!Array.isArray(h) || h.length !== 2 || typeof h[0] !== 'string' || typeof h[1] !== 'string') {
      throw new ImportFormatError('headers must be a list of [name, value] pairs');
    }
    rawHeaders.push(h[0], h[1]);
  }
  const body =
    o.body === undefined || o.body === null ? Buffer.alloc(0) : decodeBody(str(o.body, 'body'), o.body_encoding ?? o.encoding, 'body');
  check(method, path, query, rawHeaders, body);
  const rawTrailers: string[] = [];
  if (o.trailers !== undefined && o.trailers !== null) {
    if (!Array.isArray(o.trailers)) throw new ImportFormatError('trailers must be a list of [name, value] pairs');
    for (const t of o.trailers) {
      if (!Array.isArray(t) || t.length !== 2 || typeof t[0] !== 'string' || typeof t[1] !== 'string') {
        throw new ImportFormatError('trailers must be a list of [name, value] pairs');
      }
      rawTrailers.push(t[0], t[1]);
    }
  }
  return { method, path, query, rawHeaders, body, ...withTrailers(rawTrailers) };
}

/** Splits a URL string without normalising it: `new URL()` would turn `/a/%2e%2e/b` into `/b`. */
export function splitRawUrl(url: string): { path: string; query: string | null } {
  let rest = url.replace(/#.*$/s, '');
  const scheme = /^[a-z][a-z0-9+.-]*:\/\/[^/?]*/i.exec(rest);
  if (scheme) rest = rest.slice(scheme[0].length);
  const q = rest.indexOf('?');
  return q < 0 ? { path: rest, query: null } : { path: rest.slice(0, q), query: rest.slice(q + 1) };
}

/** One HAR 1.2 entry. */
export function fromHarEntry(entry: unknown): ImportedRequest {
  if (entry === null || typeof entry !== 'object') throw new ImportFormatError('not a HAR entry object');
  const e = entry as Record<string, unknown>;
  const req = e.request as Record<string, unknown> | undefined;
  if (req === undefined || req === null || typeof req !== 'object') throw new ImportFormatError('entry has no request');
  const method = str(req.method, 'request.method');
  const ext = e._hookbucket as Record<string, unknown> | undefined;
  let path: string;
  let query: string | null;
  if (ext && typeof ext === 'object' && 'path' in ext) {
    path = str(ext.path, '_hookbucket.path');
    query = ext.query === null || ext.query === undefined ? null : str(ext.query, '_hookbucket.query');
  } else {
    const t = splitRawUrl(str(req.url, 'request.url'));
    const bucketPrefix = /^\/b\/[^/]+/.exec(t.path);
    path = bucketPrefix ? t.path.slice(bucketPrefix[0].length) : t.path;
    query = t.query;
  }
  if (!Array.isArray(req.headers)) throw new ImportFormatError('request.headers must be a list of {name, value}');
  const rawHeaders: string[] = [];
  for (const h of req.headers as unknown[]) {
    const name = str((h as Record<string, unknown> | null)?.name, 'header name');
    const value = str((h as Record<string, unknown> | null)?.value, 'header value');
    if (name.startsWith(':')) continue; // HTTP/2 pseudo-headers in browser HARs
    rawHeaders.push(name, value);
  }
  const post = req.postData as Record<string, unknown> | undefined;
  const body =
    post && typeof post === 'object' && post.text !== undefined
      ? decodeBody(str(post.text, 'postData.text'), post._encoding ?? post.encoding, 'postData.text')
      : Buffer.alloc(0);
  check(method, path, query, rawHeaders, body);
  // HAR has no trailers; hookbucket's export writes them as `request._trailers`, {name, value} like headers.
  const rawTrailers: string[] = [];
  if (req._trailers !== undefined && req._trailers !== null) {
    if (!Array.isArray(req._trailers)) throw new ImportFormatError('request._trailers must be a list of {name, value}');
    for (const t of req._trailers as unknown[]) {
      rawTrailers.push(
        str((t as Record<string, unknown> | null)?.name, 'trailer name'),
        str((t as Record<string, unknown> | null)?.value, 'trailer value'),
      );
    }
  }
  return { method, path, query, rawHeaders, body, ...withTrailers(rawTrailers) };
}

/** The entries of a HAR document. */
export function harEntries(doc: unknown): unknown[] {
  const entries = (doc as { log?: { entries?: unknown } } | null)?.log?.entries;
  if (!Array.isArray(entries)) throw new ImportFormatError('not a HAR file: no log.entries list');
  return entries;
}

/**
 * Which format a file is, from its first non-blank line: an NDJSON record is a whole JSON object
 * with a `method` on that line; anything else is read as one HAR document.
 */
export function detectFormat(firstLine: string): 'ndjson' | 'har' {
  try {
    const v: unknown = JSON.parse(firstLine);
    if (v !== null && typeof v === 'object' && !Array.isArray(v) && typeof (v as { method?: unknown }).method === 'string') return 'ndjson';
  } catch {
    // not a whole JSON value on one line: a HAR document (or not valid at all, which HAR parsing reports)
  }
  return 'har';
}

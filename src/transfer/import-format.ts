/**
 * Reading `requests export` output back (`requests import`), pure: parsed JSON in, the request to
 * store out, or an error naming what is wrong. NDJSON records and HAR entries written by hookbucket
 * come back exactly; a HAR from another tool works too (path and query from its URL, a leading
 * `/b/<bucket>` dropped, HTTP/2 pseudo-headers skipped).
 */

export interface ImportedRequest {
  method: string;
  /** Raw sub-path after /b/<bucket>, '' when none. */
  path: string;
  query: string | null;
  /** Flat [name, value, …], values as latin1 byte strings. */
  rawHeaders: string[];
  body: Buffer;
}

export class ImportFormatError extends Error {}

const TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/** Bytes a header value can hold on the wire (latin1 code units; no CR, LF or NUL). */
const HEADER_VALUE = /^[^\r\n\0\u0100-\uffff]*$/;
/** A request-target part: no whitespace, controls, or characters past one byte. */
const TARGET_PART = /^[^\s\0-\x1f\x7f\u0100-\uffff]*$/;

function str(v: unknown, what: string): string {
  if (typeof v !== 'string') throw new ImportFormatError(`${what} must be a string`);
  return v;
}

function check(method: string, path: string, query: string | null, rawHeaders: string[]): void {
  if (!TOKEN.test(method)) throw new ImportFormatError(`method ${JSON.stringify(method)} is not an HTTP token`);
  if (path !== '' && !path.startsWith('/')) throw new ImportFormatError(`path ${JSON.stringify(path)} must be empty or start with /`);
  if (!TARGET_PART.test(path) || path.includes('?')) throw new ImportFormatError(`path ${JSON.stringify(path)} has characters a request target cannot carry`);
  if (query !== null && !TARGET_PART.test(query)) throw new ImportFormatError(`query ${JSON.stringify(query)} has characters a request target cannot carry`);
  for (let i = 0; i < rawHeaders.length; i += 2) {
    if (!TOKEN.test(rawHeaders[i]!)) throw new ImportFormatError(`header name ${JSON.stringify(rawHeaders[i])} is not an HTTP token`);
    if (!HEADER_VALUE.test(rawHeaders[i + 1]!)) {
      throw new ImportFormatError(`header ${rawHeaders[i]} has a value with CR, LF, NUL or a character past \\u00ff (values are latin1 byte strings)`);
    }
  }
}

function decodeBody(text: string, encoding: unknown, what: string): Buffer {
  if (encoding === undefined || encoding === null || encoding === 'utf8' || encoding === 'utf-8') return Buffer.from(text, 'utf8');
  if (encoding === 'base64') {
    if (!/^[A-Za-z0-9+/\r\n]*={0,2}\s*$/.test(text)) throw new ImportFormatError(`${what} is not valid base64`);
    return Buffer.from(text, 'base64');
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
  const body = o.body === undefined || o.body === null ? Buffer.alloc(0) : decodeBody(str(o.body, 'body'), o.body_encoding ?? o.encoding, 'body');
  check(method, path, query, rawHeaders);
  return { method, path, query, rawHeaders, body };
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
    post && typeof post === 'object' && post.text !== undefined ? decodeBody(str(post.text, 'postData.text'), post._encoding ?? post.encoding, 'postData.text') : Buffer.alloc(0);
  check(method, path, query, rawHeaders);
  return { method, path, query, rawHeaders, body };
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

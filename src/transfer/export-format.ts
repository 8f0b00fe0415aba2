import { isUtf8 } from 'node:buffer';
import type { StoredRequest } from '../store/store.js';
import { AppError } from '../shared/errors.js';
import { REDACTED, redactHeaders, redactQuery, redactUrl } from '../policy/redact.js';
import { bashQuote, printfBytes } from './shell-quote.js';
import { VERSION } from '../shared/version.js';

/**
 * `requests export` formats, pure: a stored request in, text out. Every format keeps what the
 * round trip needs byte-exact: the method, the raw path and query (still percent-encoded, never
 * normalised: `/a/%2e%2e/b` stays), the raw header list (order, case, repeats; values as latin1
 * byte strings, as `requests show --json` documents) and the body bytes (UTF-8 text, or base64
 * when the bytes are not valid UTF-8).
 */

export type ExportFormat = 'ndjson' | 'har' | 'curl';
export const EXPORT_FORMATS: readonly ExportFormat[] = ['ndjson', 'har', 'curl'];

function bodyText(body: Buffer): { text: string; encoding: 'utf8' | 'base64' } {
  return isUtf8(body) ? { text: body.toString('utf8'), encoding: 'utf8' } : { text: body.toString('base64'), encoding: 'base64' };
}

function pairs(rawHeaders: readonly string[]): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i + 1 < rawHeaders.length; i += 2) out.push([rawHeaders[i]!, rawHeaders[i + 1]!]);
  return out;
}

/** The target after the bucket: raw path (`/` when none) and raw query. */
export function rawTarget(path: string, query: string | null): string {
  return `${path}${query === null ? '' : `?${query}`}`;
}

/** NDJSON: one object per line, the field names of `requests show --json`. */
export function ndjsonLine(r: StoredRequest): string {
  const b = bodyText(r.body);
  return `${JSON.stringify({
    id: r.id,
    bucket: r.bucket,
    received_at: new Date(r.receivedAt).toISOString(),
    method: r.method,
    path: r.path,
    query: r.query,
    headers: pairs(r.rawHeaders),
    body: b.text,
    body_encoding: b.encoding,
    trailers: pairs(r.rawTrailers ?? []),
    size: r.size,
    sha256: r.sha256,
    state: r.state,
    // Evidence of what ingest made of it; `requests import` ignores them (imported rows are unverified).
    disposition: r.disposition,
    verification: r.verdict === null ? null : { scheme: r.verdict.scheme, result: r.verdict.result, reason: r.verdict.reason },
    dedup_key: r.dedupKey,
    duplicate_of: r.duplicateOf,
  })}\n`;
}

export const HAR_CREATOR = { name: 'hookbucket', version: VERSION };

/** HAR 1.2 is one JSON document; it is written as head, entries joined by commas, tail. */
export function harHead(): string {
  return `{"log":{"version":"1.2","creator":${JSON.stringify(HAR_CREATOR)},"entries":[\n`;
}

export function harTail(): string {
  return ']}}\n';
}

/** The query as HAR's decoded name/value list (informative; the raw query is in `_hookbucket`). */
function queryString(query: string | null): Array<{ name: string; value: string }> {
  if (!query) return [];
  const out: Array<{ name: string; value: string }> = [];
  for (const part of query.split('&')) {
    if (part === '') continue;
    const eq = part.indexOf('=');
    const decode = (s: string) => {
      try {
        return decodeURIComponent(s.replace(/\+/g, ' '));
      } catch {
        return s;
      }
    };
    out.push(eq < 0 ? { name: decode(part), value: '' } : { name: decode(part.slice(0, eq)), value: decode(part.slice(eq + 1)) });
  }
  return out;
}

/**
 * One HAR entry. `request.headers` is HAR's own ordered list (repeats and case kept), so it is the
 * raw header list; `request.url` is `baseUrl` + raw path + raw query, never normalised. The raw
 * path and query also go in `_hookbucket`, because a URL is all a HAR tool may keep intact.
 * Non-UTF-8 bodies are base64 in `postData.text` with `_encoding: "base64"` beside it; chunked
 * trailers, which HAR cannot express, go in `request._trailers` as {name, value} like the headers.
 */
export function harEntry(r: StoredRequest, baseUrl: string): string {
  const headers = pairs(r.rawHeaders).map(([name, value]) => ({ name, value }));
  const contentType = headers.find((h) => h.name.toLowerCase() === 'content-type')?.value ?? '';
  const request: Record<string, unknown> = {
    method: r.method,
    url: baseUrl + rawTarget(r.path, r.query),
    httpVersion: 'HTTP/1.1',
    cookies: [],
    headers,
    queryString: queryString(r.query),
    headersSize: -1,
    bodySize: r.size,
  };
  if (r.body.length > 0) {
    const b = bodyText(r.body);
    request.postData = { mimeType: contentType, text: b.text, ...(b.encoding === 'base64' ? { _encoding: 'base64' } : {}) };
  }
  // HAR has no trailers: a custom field (HAR 1.2 allows `_`-prefixed ones), only when there were any.
  if (r.rawTrailers && r.rawTrailers.length > 0) request._trailers = pairs(r.rawTrailers).map(([name, value]) => ({ name, value }));
  return JSON.stringify({
    startedDateTime: new Date(r.receivedAt).toISOString(),
    time: 0,
    request,
    // Not a forwarded exchange: HAR requires a response, and status 0 means none was recorded.
    response: {
      status: 0,
      statusText: '',
      httpVersion: '',
      cookies: [],
      headers: [],
      content: { size: 0, mimeType: '' },
      redirectURL: '',
      headersSize: -1,
      bodySize: -1,
    },
    cache: {},
    timings: { send: 0, wait: 0, receive: 0 },
    _hookbucket: {
      id: r.id,
      bucket: r.bucket,
      received_at: new Date(r.receivedAt).toISOString(),
      path: r.path,
      query: r.query,
      size: r.size,
      sha256: r.sha256,
      state: r.state,
    },
  });
}

/**
 * The refusal of a curl export without a base URL (CLI `--base-url`, API `base_url`). The commands
 * used to go back to the bucket itself, so running the script stored and delivered every request
 * again; now the target is always said out loud.
 */
export function curlNeedsBaseUrl(flag: '--base-url' | 'base_url', bucketUrl: string): AppError {
  const eg = (url: string) => (flag === '--base-url' ? `--base-url ${url}` : `base_url=${encodeURIComponent(url)}`);
  return new AppError(
    'usage',
    `${flag === '--base-url' ? '--format curl' : 'format=curl'} needs ${flag}: where the commands send the requests, e.g. a local consumer (${eg('http://localhost:3000/webhooks')}). ` +
      `Sent back to the bucket, every request is stored and delivered again; to do that on purpose, say so: ${eg(bucketUrl)}`,
  );
}

/**
 * The script's head: what it is, where it sends, and a warning that it holds credentials (every
 * header and body as stored), or with --redact which of them were replaced.
 */
export function curlPreamble(o: { baseUrl: string; redacted: boolean }): string {
  const lines = [
    '#!/usr/bin/env bash',
    "# hookbucket requests export --format curl: one command per request (bash: $'…' quoting)",
    `# sends every request to ${redactUrl(o.baseUrl).replace(/[\x00-\x1f\x7f]/g, '?')} + its sub-path and query`,
    o.redacted
      ? `# --redact: credential headers and secret query values are replaced by ${REDACTED}; bodies are as stored`
      : '# WARNING: this script contains credentials (Authorization, cookies, signatures, API keys, secret query',
    o.redacted
      ? '# and may still hold secrets: keep it private, and put real values back where the target needs them'
      : '# values) exactly as received: keep it private, or export again with --redact',
  ];
  return `${lines.join('\n')}\n`;
}

/**
 * A stored request with its credentials replaced by placeholders (`--redact`): the values of
 * headers and trailers whose names are secret, and secret query values, by the rule human output
 * uses (src/policy/redact.ts). The method, path, body, size and sha256 stay as stored (the body is
 * not changed, so its digest still holds); every format is written from the result.
 */
export function redactRequest(r: StoredRequest): StoredRequest {
  const flat = (pairs: Array<[string, string]>) => pairs.flat();
  return {
    ...r,
    rawHeaders: flat(redactHeaders(pairs(r.rawHeaders))),
    ...(r.rawTrailers ? { rawTrailers: flat(redactHeaders(pairs(r.rawTrailers))) } : {}),
    query: r.query === null ? null : redactQuery(r.query),
  };
}

/**
 * A runnable curl command that sends the request again to `baseUrl` + raw path + raw query:
 * - the stored headers in order, as `-H`, except Host (curl sends the target's own, first);
 * - curl's own User-Agent, Accept, and for a body Content-Type and Expect, are suppressed
 *   (`-H 'Name:'`) unless stored, so nothing is added; a stored Content-Length is sent as stored
 *   (it equals the body length), which also keeps its place;
 * - never both Content-Length and Transfer-Encoding (a row stored before import refused the pair):
 *   the Content-Length goes and curl frames the body as the Transfer-Encoding says. RFC 9112 §6.3:
 *   Transfer-Encoding overrides Content-Length, so the chunked framing is how the request was
 *   read, and an intermediary that forwards such a message must remove the Content-Length; sending
 *   both is a request-smuggling shape that servers refuse (Node answers 400);
 * - the body through stdin (`--data-binary @-`) from bash's builtin printf, so no body size meets
 *   the argument-length limit: `printf '%s' '<text>'` for UTF-8 without NUL, octal escapes otherwise;
 * - `-g` (no URL globbing of [] {}) and `--path-as-is` (no /./ or /../ squashing);
 * - `-w '\n'`: a newline after each response.
 */
export function curlCommand(r: StoredRequest, baseUrl: string): string {
  const headers = pairs(r.rawHeaders);
  const has = (name: string) => headers.some(([n]) => n.toLowerCase() === name);
  const sendsBody = r.body.length > 0;
  // -w '\n': a newline after each response, so responses do not run together (or into the prompt).
  const args: string[] = ['curl', '-sS', '-g', '--path-as-is', '-w', bashQuote('\\n')];
  if (r.method === 'HEAD' && !sendsBody) args.push('-I');
  // curl's own choice is GET without a body and POST with one; -X names any other.
  else if (r.method !== (sendsBody ? 'POST' : 'GET')) args.push('-X', bashQuote(r.method));
  const suppress = ['user-agent', 'accept', ...(sendsBody ? ['content-type', 'expect'] : [])];
  const canonical: Record<string, string> = {
    'user-agent': 'User-Agent',
    accept: 'Accept',
    'content-type': 'Content-Type',
    expect: 'Expect',
  };
  for (const name of suppress) if (!has(name)) args.push('-H', bashQuote(`${canonical[name]}:`));
  const framedByTransferEncoding = has('transfer-encoding');
  for (const [name, value] of headers) {
    const lower = name.toLowerCase();
    if (lower === 'host' || (lower === 'content-length' && framedByTransferEncoding)) continue;
    // `Name;` is curl's way to send a header with an empty value (`Name:` would remove it).
    args.push('-H', bashQuote(value === '' ? `${name};` : `${name}: ${value}`));
  }
  if (sendsBody) args.push('--data-binary', '@-');
  args.push(bashQuote(baseUrl + rawTarget(r.path, r.query)));
  const comment = `# ${r.id} ${new Date(r.receivedAt).toISOString()} ${r.method} ${rawTarget(r.path || '/', r.query)}`.replace(
    /[\r\n]/g,
    ' ',
  );
  if (!sendsBody) return `${comment}\n${args.join(' ')}\n`;
  // UTF-8 text goes as is inside single quotes (the export is written as UTF-8, so bash reads the
  // same bytes back); anything else, NUL included, as printf octal escapes.
  const feed =
    isUtf8(r.body) && !r.body.includes(0)
      ? `printf '%s' '${r.body.toString('utf8').replace(/'/g, `'\\''`)}'`
      : `printf ${printfBytes(r.body)}`;
  return `${comment}\n${feed} | ${args.join(' ')}\n`;
}

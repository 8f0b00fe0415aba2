/**
 * How stored requests are shown to people. Pure: bytes and headers in, text out.
 * Human output redacts credentials by default (policy/redact.ts) and escapes every value that came
 * from a sender (policy/terminal-text.ts); --raw, --json and export keep the stored bytes.
 */
import { REDACTED, redactHeaders, redactJson, redactQuery } from '../policy/redact.js';
import { escapeJsonText, escapeTerminal } from '../policy/terminal-text.js';
import { isUtf8 } from '../json/request-json.js';

export { REDACTED };

/** Header pairs for display, credentials replaced unless `reveal`. Not escaped: callers format them. */
export function displayHeaders(rawHeaders: readonly string[], reveal: boolean): Array<[string, string]> {
  const pairs: Array<[string, string]> = [];
  for (let i = 0; i < rawHeaders.length; i += 2) pairs.push([rawHeaders[i]!, rawHeaders[i + 1]!]);
  return reveal ? pairs : redactHeaders(pairs);
}

/** `  Name: value` lines for people: redacted unless `reveal`, escaped always. */
export function headerLines(rawHeaders: readonly string[], reveal: boolean): string[] {
  return displayHeaders(rawHeaders, reveal).map(([n, v]) => `  ${escapeTerminal(n)}: ${escapeTerminal(v)}`);
}

/** The request target for people: secret query values redacted unless `reveal`. Escaped by the caller (table()) or here. */
export function targetText(path: string, query: string | null, reveal: boolean): string {
  return `${path || '/'}${query === null ? '' : `?${reveal ? query : redactQuery(query)}`}`;
}

export { headerPairs, isUtf8 } from '../json/request-json.js';

/** Hex dump lines: offset, 16 bytes in hex, printable ASCII. */
export function hexDump(buf: Buffer, max = 512): string[] {
  const lines: string[] = [];
  for (let off = 0; off < Math.min(buf.length, max); off += 16) {
    const slice = buf.subarray(off, Math.min(off + 16, buf.length));
    const hex = [...slice].map((b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = [...slice].map((b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${off.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines;
}

/**
 * The body for people: pretty JSON (its strings JSON-escaped, the rest as --json escapes it), a
 * form with secret values redacted, text escaped (LF and TAB kept for layout), binary and invalid
 * UTF-8 as hex (and base64), never raw.
 */
export function renderBody(body: Buffer, contentType: string | undefined, reveal: boolean): string[] {
  if (body.length === 0) return ['(empty body)'];
  const gzip = body.length >= 2 && body[0] === 0x1f && body[1] === 0x8b;
  if (!gzip && isUtf8(body)) {
    const text = body.toString('utf8');
    if (/json/i.test(contentType ?? '') || /^\s*[[{]/.test(text)) {
      try {
        const parsed: unknown = JSON.parse(text);
        return escapeJsonText(JSON.stringify(reveal ? parsed : redactJson(parsed), null, 2)).split('\n');
      } catch {
        // not JSON after all: show as text
      }
    }
    const shown = !reveal && /application\/x-www-form-urlencoded/i.test(contentType ?? '') ? redactQuery(text, 'form') : text;
    return escapeTerminal(shown, { newline: true, tab: true }).split('\n');
  }
  const shown = hexDump(body);
  const lines = [`(binary${gzip ? ', gzip-compressed as received' : ''}: ${body.length} bytes; --raw writes the exact bytes)`, ...shown];
  if (body.length > 512) lines.push(`… ${body.length - 512} more bytes not shown`);
  lines.push('base64:', body.length <= 3072 ? body.toString('base64') : `${body.subarray(0, 3072).toString('base64')}… (first 3072 bytes)`);
  return lines;
}

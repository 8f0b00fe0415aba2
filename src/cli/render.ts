/**
 * How stored requests are shown to people. Pure: bytes and headers in, text out.
 * Human output redacts credentials by default; --raw, --json and export keep the stored bytes.
 */

const CREDENTIAL_HEADER = /^(authorization|proxy-authorization|cookie|set-cookie|x-api-key|api-key|x-auth-token|x-access-token)$|signature|api[-_]?key|secret|token/i;
const SECRET_FIELD = /(password|passwd|secret|token|api[-_]?key|authorization|signature|private[-_]?key|client[-_]?secret)/i;
export const REDACTED = '[redacted]';

export function isCredentialHeader(name: string): boolean {
  return CREDENTIAL_HEADER.test(name);
}

/** Header pairs for display, credentials replaced unless `reveal`. */
export function displayHeaders(rawHeaders: readonly string[], reveal: boolean): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  for (let i = 0; i < rawHeaders.length; i += 2) {
    const name = rawHeaders[i]!;
    const value = rawHeaders[i + 1]!;
    out.push([name, !reveal && isCredentialHeader(name) ? REDACTED : value]);
  }
  return out;
}

export function headerPairs(rawHeaders: readonly string[]): Array<[string, string]> {
  return displayHeaders(rawHeaders, true);
}

export function isUtf8(body: Buffer): boolean {
  // TextDecoder with fatal: true rejects invalid sequences (Buffer.toString would replace them).
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(body);
    return true;
  } catch {
    return false;
  }
}

function redactJson(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(redactJson);
  if (value !== null && typeof value === 'object') {
    return Object.fromEntries(
      Object.entries(value as Record<string, unknown>).map(([k, v]) => [
        k,
        SECRET_FIELD.test(k) && (typeof v === 'string' || typeof v === 'number') ? REDACTED : redactJson(v),
      ]),
    );
  }
  return value;
}

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

/** The body for people: pretty JSON, text as is, binary as hex (and base64). */
export function renderBody(body: Buffer, contentType: string | undefined, reveal: boolean): string[] {
  if (body.length === 0) return ['(empty body)'];
  const gzip = body.length >= 2 && body[0] === 0x1f && body[1] === 0x8b;
  if (!gzip && isUtf8(body)) {
    const text = body.toString('utf8');
    if (/json/i.test(contentType ?? '') || /^\s*[[{]/.test(text)) {
      try {
        const parsed: unknown = JSON.parse(text);
        return JSON.stringify(reveal ? parsed : redactJson(parsed), null, 2).split('\n');
      } catch {
        // not JSON after all: show as text
      }
    }
    return text.split('\n');
  }
  const shown = hexDump(body);
  const lines = [`(binary${gzip ? ', gzip-compressed as received' : ''}: ${body.length} bytes; --raw writes the exact bytes)`, ...shown];
  if (body.length > 512) lines.push(`… ${body.length - 512} more bytes not shown`);
  lines.push('base64:', body.length <= 3072 ? body.toString('base64') : `${body.subarray(0, 3072).toString('base64')}… (first 3072 bytes)`);
  return lines;
}

/**
 * Stored bytes as page text. JSX escapes `<`, `&` and quotes, so no stored byte becomes markup;
 * this adds what escaping for HTML does not cover: control bytes (an ANSI `\x1b[2J`), C1, bidi
 * overrides and invisible characters are shown as visible `\xNN` / `\uNNNN` escapes
 * (src/policy/terminal-text.ts), so a page shows what a sender sent, not what it wanted to look like.
 */
import { escapeBytes, escapeJsonText, escapeTerminal } from '../policy/terminal-text.js';

/** One-line text (a header value, a path): every control byte escaped. */
export function inline(text: string): string {
  return escapeTerminal(text);
}

/** Multi-line text (a body): line breaks and tabs kept, every other control byte escaped. */
export function block(text: string): string {
  return escapeTerminal(text, { newline: true, tab: true });
}

/** JSON.stringify output: C0 is escaped by JSON already; C1, bidi and invisibles as \uXXXX. */
export function jsonText(json: string): string {
  return escapeJsonText(json);
}

/** Bytes that may not be UTF-8 (a latin1 header value, a response excerpt): invalid bytes as \xNN. */
export function bytesText(bytes: Uint8Array): string {
  return escapeBytes(bytes, { newline: true, tab: true });
}

/** A classic hex dump: offset, 16 bytes in hex, and the printable ASCII beside them. */
export function hexDump(bytes: Uint8Array): string {
  const lines: string[] = [];
  for (let off = 0; off < bytes.length; off += 16) {
    const row = bytes.subarray(off, off + 16);
    const hex = Array.from(row, (b) => b.toString(16).padStart(2, '0')).join(' ');
    const ascii = Array.from(row, (b) => (b >= 0x20 && b < 0x7f ? String.fromCharCode(b) : '.')).join('');
    lines.push(`${off.toString(16).padStart(8, '0')}  ${hex.padEnd(47)}  ${ascii}`);
  }
  return lines.join('\n');
}

/** Milliseconds as a short age: 45s, 12m, 3h 5m, 2d 4h. */
export function age(ms: number): string {
  const s = Math.max(0, Math.floor(ms / 1000));
  if (s < 60) return `${s}s`;
  const m = Math.floor(s / 60);
  if (m < 60) return `${m}m`;
  const h = Math.floor(m / 60);
  if (h < 48) return `${h}h ${m % 60}m`;
  return `${Math.floor(h / 24)}d ${h % 24}h`;
}

export function isoTime(ms: number): string {
  return new Date(ms).toISOString();
}

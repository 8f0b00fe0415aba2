/**
 * Quoting for bash command lines. Strings here are byte strings read as latin1 (header values,
 * raw paths), so a character is one byte on the wire; `$'…'` with `\xHH` gives bytes outside
 * printable ASCII back exactly.
 */

const SAFE = /^[A-Za-z0-9_@%+=:,./-]+$/;
const PRINTABLE = /^[\x20-\x7e]*$/;

/** One shell word whose bytes are `text`'s latin1 code units. */
export function bashQuote(text: string): string {
  if (SAFE.test(text)) return text;
  if (PRINTABLE.test(text)) return `'${text.replace(/'/g, `'\\''`)}'`;
  let out = "$'";
  for (let i = 0; i < text.length; i++) {
    const c = text.charCodeAt(i);
    if (c > 0xff) throw new RangeError('bashQuote takes byte strings (latin1), not UTF-16 text');
    const ch = text[i]!;
    if (ch === '\\' || ch === "'") out += `\\${ch}`;
    else if (c >= 0x20 && c < 0x7f) out += ch;
    else out += `\\x${c.toString(16).padStart(2, '0')}`;
  }
  return `${out}'`;
}

/** A printf format string (single-quoted) that prints exactly `bytes`: octal escapes for the rest. */
export function printfBytes(bytes: Buffer): string {
  let out = '';
  for (const b of bytes) {
    if (b === 0x25) out += '%%';
    else if (b === 0x5c) out += '\\\\';
    else if (b === 0x27) out += `'\\''`;
    else if (b >= 0x20 && b < 0x7f) out += String.fromCharCode(b);
    else out += `\\${b.toString(8).padStart(3, '0')}`;
  }
  return `'${out}'`;
}

/** One shell word for text typed by a person (any characters; written out as UTF-8). */
export function shellWord(text: string): string {
  return SAFE.test(text) ? text : `'${text.replace(/'/g, `'\\''`)}'`;
}

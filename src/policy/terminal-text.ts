/**
 * Text for a terminal: stored requests carry whatever a sender chose, and `\e]0;TITLE\a\e[2J`
 * printed raw retitles the window and clears the screen; C1 `\x9b` is a CSI on many terminals;
 * bidi overrides (Trojan Source, CVE-2021-42574) make text read differently than it is. Pure: no
 * I/O, imports nothing.
 *
 * What is escaped, and why:
 * - C0 U+0000–U+001F (LF and TAB only when the caller's layout needs them) and DEL U+007F: terminal
 *   control codes. C1 U+0080–U+009F: CSI, OSC, NEL on terminals that honour 8-bit controls.
 * - Bidi_Control, all of it: U+061C, U+200E–U+200F, U+202A–U+202E, U+2066–U+2069. They reorder
 *   what follows on screen.
 * - Invisible characters that make two different strings look alike: U+200B–U+200D (zero-width
 *   space, non-joiner, joiner; an emoji joined by U+200D shows its parts), U+2060–U+2064 (word
 *   joiner and invisible operators), U+FEFF (zero-width no-break space / BOM), and the tag
 *   characters U+E0000–U+E007F (invisible "ASCII smuggling").
 * - U+2028/U+2029: line and paragraph separators, a line break some terminals and viewers honour.
 * - Lone surrogates (only a JSON import can store one): a terminal would show U+FFFD and hide which.
 * - `\` itself as `\\`, so the escaped text reads back to exactly one original.
 *
 * Form: `\xNN` for a code point below U+0080, `\uNNNN` (or `\u{NNNNN}`) above. A byte that is not
 * valid UTF-8 (escapeBytes) is `\xNN` with NN ≥ 80, which no code point escape produces.
 */

/** Everything escaped for a terminal, backslash included; linear (one character class, no backtracking). */
const UNSAFE = /[\x00-\x1f\x7f-\x9f\\\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u{e0000}-\u{e007f}\ud800-\udfff]/gu;

/** What JSON.stringify leaves raw that a terminal would act on: C0, `"` and `\` it escapes itself. */
const JSON_UNSAFE = /[\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff\u{e0000}-\u{e007f}\ud800-\udfff]/gu;

export interface EscapeOptions {
  /** Keep LF as a line break (multi-line output such as a text body). Default false. */
  newline?: boolean;
  /** Keep TAB (indentation in a text body). Default false. */
  tab?: boolean;
  /**
   * Escape `\` as `\\` (default true). False only for a last-line guard over text whose values
   * were escaped already, where doubling would garble the escapes it holds.
   */
  backslash?: boolean;
}

function hex(n: number, width: number): string {
  return n.toString(16).padStart(width, '0');
}

function escapeCodePoint(cp: number): string {
  if (cp < 0x80) return `\\x${hex(cp, 2)}`;
  return cp > 0xffff ? `\\u{${hex(cp, 5)}}` : `\\u${hex(cp, 4)}`;
}

/** `text` with every character above shown as a visible escape. */
export function escapeTerminal(text: string, opts: EscapeOptions = {}): string {
  const keepNewline = opts.newline === true;
  const keepTab = opts.tab === true;
  const backslash = opts.backslash !== false;
  return text.replace(UNSAFE, (c) => {
    if (c === '\\') return backslash ? '\\\\' : c;
    if (c === '\n' && keepNewline) return c;
    if (c === '\t' && keepTab) return c;
    return escapeCodePoint(c.codePointAt(0)!);
  });
}

/** True when escapeTerminal would change nothing but backslashes: the text is safe to print as is. */
export function isTerminalSafe(text: string, opts: EscapeOptions = {}): boolean {
  return escapeTerminal(text, { ...opts, backslash: false }) === text;
}

/**
 * JSON text (JSON.stringify's output) with DEL, C1, bidi, invisible characters, line separators
 * and lone surrogates as `\uXXXX`. Those can only sit inside JSON strings, where `\uXXXX` means the
 * same character, so the text parses back to the identical value. Astral tags become a surrogate
 * pair, as JSON's `\u` takes four digits.
 */
export function escapeJsonText(json: string): string {
  return json.replace(JSON_UNSAFE, (c) => {
    let out = '';
    for (let i = 0; i < c.length; i++) out += `\\u${hex(c.charCodeAt(i), 4)}`;
    return out;
  });
}

/**
 * Bytes for a terminal: valid UTF-8 decoded and escaped as escapeTerminal does, each byte that is
 * not part of a valid sequence as `\xNN`. One pass, no lookbehind: linear in the length.
 */
export function escapeBytes(bytes: Uint8Array, opts: EscapeOptions = {}): string {
  let out = '';
  let runStart = 0;
  const decoder = new TextDecoder('utf-8');
  const flush = (end: number) => {
    if (end > runStart) out += escapeTerminal(decoder.decode(bytes.subarray(runStart, end)), opts);
  };
  let i = 0;
  while (i < bytes.length) {
    const n = validSequenceLength(bytes, i);
    if (n > 0) {
      i += n;
      continue;
    }
    flush(i);
    out += `\\x${hex(bytes[i]!, 2)}`;
    i += 1;
    runStart = i;
  }
  flush(i);
  return out;
}

/** Length of the valid UTF-8 sequence at `i` (RFC 3629 table 3-7), or 0 when the byte starts none. */
function validSequenceLength(b: Uint8Array, i: number): number {
  const b0 = b[i]!;
  if (b0 < 0x80) return 1;
  const cont = (k: number, lo = 0x80, hi = 0xbf) => i + k < b.length && b[i + k]! >= lo && b[i + k]! <= hi;
  if (b0 >= 0xc2 && b0 <= 0xdf) return cont(1) ? 2 : 0;
  if (b0 === 0xe0) return cont(1, 0xa0) && cont(2) ? 3 : 0;
  if ((b0 >= 0xe1 && b0 <= 0xec) || b0 === 0xee || b0 === 0xef) return cont(1) && cont(2) ? 3 : 0;
  if (b0 === 0xed) return cont(1, 0x80, 0x9f) && cont(2) ? 3 : 0; // no surrogates
  if (b0 === 0xf0) return cont(1, 0x90) && cont(2) && cont(3) ? 4 : 0;
  if (b0 >= 0xf1 && b0 <= 0xf3) return cont(1) && cont(2) && cont(3) ? 4 : 0;
  if (b0 === 0xf4) return cont(1, 0x80, 0x8f) && cont(2) && cont(3) ? 4 : 0;
  return 0;
}

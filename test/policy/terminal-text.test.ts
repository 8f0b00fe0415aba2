import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { escapeBytes, escapeJsonText, escapeTerminal, isTerminalSafe } from '../../src/policy/terminal-text.js';

describe('escapeTerminal: every character a terminal acts on is shown, \\ doubled', () => {
  const cases: Array<[string, string, string]> = [
    ['plain text stays', 'push to main', 'push to main'],
    ['non-ASCII letters stay', 'café 東京 😀', 'café 東京 😀'],
    ['OSC title and clear screen', '\x1b]0;TITLE\x07\x1b[2J', '\\x1b]0;TITLE\\x07\\x1b[2J'],
    ['NUL, BS, VT, FF, CR, unit separator', '\x00\x08\x0b\x0c\r\x1f', '\\x00\\x08\\x0b\\x0c\\x0d\\x1f'],
    ['LF and TAB escaped by default', 'a\nb\tc', 'a\\x0ab\\x09c'],
    ['DEL', 'a\x7fb', 'a\\x7fb'],
    ['C1 CSI and NEL as code points', '\u009b2J\u0085', '\\u009b2J\\u0085'],
    ['bidi overrides and isolates', '\u202aa\u202bb\u202cc\u202dd\u202ee', '\\u202aa\\u202bb\\u202cc\\u202dd\\u202ee'],
    ['bidi isolates U+2066–2069', '\u2066\u2067\u2068\u2069', '\\u2066\\u2067\\u2068\\u2069'],
    ['bidi marks ALM, LRM, RLM', '\u061c\u200e\u200f', '\\u061c\\u200e\\u200f'],
    ['zero-width space, joiners', 'a\u200bb\u200cc\u200dd', 'a\\u200bb\\u200cc\\u200dd'],
    ['word joiner, invisible operators, BOM', '\u2060\u2064\ufeff', '\\u2060\\u2064\\ufeff'],
    ['line and paragraph separators', '\u2028\u2029', '\\u2028\\u2029'],
    ['tag characters (astral)', 'a\u{e0041}b', 'a\\u{e0041}b'],
    ['lone surrogates', 'x\ud800y\udfffz', 'x\\ud800y\\udfffz'],
    ['backslash doubled', 'C:\\dir\\x1b', 'C:\\\\dir\\\\x1b'],
    ['a literal "\\x1b" and a real ESC read differently', '\\x1b\x1b', '\\\\x1b\\x1b'],
  ];
  for (const [name, input, expected] of cases) it(name, () => assert.equal(escapeTerminal(input), expected));

  it('keeps LF and TAB when the layout needs them, and only those', () => {
    assert.equal(escapeTerminal('a\nb\tc\r\n', { newline: true, tab: true }), 'a\nb\tc\\x0d\n');
    assert.equal(escapeTerminal('a\nb\tc', { newline: true }), 'a\nb\\x09c');
  });

  it('backslash: false (the last-line guard) leaves \\ alone and is idempotent', () => {
    const once = escapeTerminal('\\ \x1b', { backslash: false });
    assert.equal(once, '\\ \\x1b');
    assert.equal(escapeTerminal(once, { backslash: false }), once);
  });

  it('isTerminalSafe', () => {
    assert.equal(isTerminalSafe('a\\b c'), true);
    assert.equal(isTerminalSafe('a\u202eb'), false);
    assert.equal(isTerminalSafe('a\nb', { newline: true }), true);
  });
});

describe('escapeBytes: invalid UTF-8 as \\xNN, valid text escaped as escapeTerminal does', () => {
  const cases: Array<[string, number[], string]> = [
    ['ASCII', [0x61, 0x62], 'ab'],
    ['valid two-byte é', [0xc3, 0xa9], 'é'],
    ['lone 0x9b byte (not C1 U+009B)', [0x61, 0x9b, 0x62], 'a\\x9bb'],
    ['C1 U+009B as valid UTF-8', [0xc2, 0x9b], '\\u009b'],
    ['overlong encoding of /', [0xc0, 0xaf], '\\xc0\\xaf'],
    ['UTF-8 encoded surrogate', [0xed, 0xa0, 0x80], '\\xed\\xa0\\x80'],
    ['truncated sequence at the end', [0x61, 0xe2, 0x82], 'a\\xe2\\x82'],
    ['above U+10FFFF', [0xf4, 0x90, 0x80, 0x80], '\\xf4\\x90\\x80\\x80'],
    ['ESC inside valid text', [0x1b, 0x5b, 0x32, 0x4a], '\\x1b[2J'],
    ['four-byte emoji', [0xf0, 0x9f, 0x98, 0x80], '😀'],
    ['0xff', [0xff], '\\xff'],
  ];
  for (const [name, bytes, expected] of cases) it(name, () => assert.equal(escapeBytes(Uint8Array.from(bytes)), expected));
});

describe('escapeJsonText: what JSON.stringify leaves raw becomes \\uXXXX, and the value parses back identical', () => {
  const values: Array<[string, unknown, string[]]> = [
    ['DEL and C1', { s: 'a\x7fb\u009bc\u0085' }, ['\\u007f', '\\u009b', '\\u0085']],
    ['bidi', ['\u202e', '\u2066'], ['\\u202e', '\\u2066']],
    ['zero-width and BOM', { '\u200bkey': '\ufeff' }, ['\\u200bkey', '\\ufeff']],
    ['line separators', '\u2028\u2029', ['\\u2028', '\\u2029']],
    ['astral tag as a surrogate pair', 'x\u{e0041}', ['\\udb40\\udc41']],
    ['C0 stays as JSON.stringify wrote it', '\x1b\n', ['\\u001b', '\\n']],
    ['lone surrogate (JSON.stringify escapes it already)', '\ud800', ['\\ud800']],
    ['plain values untouched', { a: 1, b: [true, null, 'text é'] }, []],
  ];
  for (const [name, value, expected] of values) {
    it(name, () => {
      for (const indent of [undefined, 2]) {
        const text = escapeJsonText(JSON.stringify(value, null, indent));
        assert.deepEqual(JSON.parse(text), value, 'round trip');
        for (const e of expected) assert.ok(text.includes(e), `${text} holds ${e}`);
        assert.ok(isTerminalSafe(text, { newline: true }), `${text} is safe for a terminal`);
      }
    });
  }
});

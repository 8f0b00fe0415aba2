import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { runCli } from '../helpers/cli.js';

/**
 * docs/cli.md against the real binary: every command and subcommand that `--help` lists has a
 * section headed with its name in backticks (`## \`serve\``, `### \`bucket create\``), and every long
 * option its `--help` shows (`--no-*` forms included; `--help` itself excepted) appears in that
 * section. The root's options belong under `## Global options`. The commands and options come from
 * the help text alone, so a command or option added later is checked without changing this file.
 */

const ROOT = fileURLToPath(new URL('../../../', import.meta.url)); // from dist/test/docs
const CLI_MD = readFileSync(`${ROOT}docs/cli.md`, 'utf8');

interface Help {
  path: string[];
  options: string[];
  commands: string[];
}

/** The lines of one `Name:` block of commander's help (up to the next blank line or block). */
function block(help: string, title: string): string[] {
  const lines = help.split('\n');
  const start = lines.indexOf(`${title}:`);
  if (start < 0) return [];
  const out: string[] = [];
  for (const line of lines.slice(start + 1)) {
    if (line.trim() === '' || /^\S/.test(line)) break;
    out.push(line);
  }
  return out;
}

/**
 * Long options of a help text. An option's own line is indented exactly two spaces and starts with
 * `-`; a wrapped description line is indented further, so a `--flag` mentioned in a description is
 * never taken for an option. The flags end at the first run of two spaces.
 */
export function longOptions(help: string): string[] {
  const found = new Set<string>();
  for (const line of block(help, 'Options')) {
    const m = /^ {2}(-\S.*?)(?: {2,}|$)/.exec(line);
    if (!m) continue;
    for (const flag of (m[1] ?? '').matchAll(/--[a-z0-9][a-z0-9-]*/g)) found.add(flag[0]);
  }
  found.delete('--help');
  return [...found].sort();
}

/** Subcommand names of a help text, without commander's own `help`. */
export function subcommands(help: string): string[] {
  return block(help, 'Commands')
    .map((line) => /^ {2}([a-z][a-z0-9-]*)/.exec(line)?.[1])
    .filter((name): name is string => name !== undefined && name !== 'help');
}

async function walk(path: string[]): Promise<Help[]> {
  const r = await runCli([...path, '--help']);
  assert.equal(r.code, 0, `hookbucket ${path.join(' ')} --help exited ${r.code}: ${r.stderr}`);
  const here: Help = { path, options: longOptions(r.text), commands: subcommands(r.text) };
  const below = await Promise.all(here.commands.map((c) => walk([...path, c])));
  return [here, ...below.flat()];
}

/** The section of docs/cli.md under a heading: from it to the next heading of its level or above. */
export function section(markdown: string, heading: RegExp): string | undefined {
  const lines = markdown.split('\n');
  let inFence = false;
  const headings: { index: number; level: number; text: string }[] = [];
  lines.forEach((line, index) => {
    if (line.startsWith('```')) inFence = !inFence;
    const m = inFence ? null : /^(#{1,6}) (.*)$/.exec(line);
    if (m) headings.push({ index, level: (m[1] ?? '').length, text: m[2] ?? '' });
  });
  const at = headings.findIndex((h) => heading.test(h.text));
  const start = headings[at];
  if (!start) return undefined;
  const next = headings.slice(at + 1).find((h) => h.level <= start.level);
  return lines.slice(start.index, next?.index ?? lines.length).join('\n');
}

function headingFor(path: string[]): RegExp {
  if (path.length === 0) return /^Global options$/;
  return new RegExp(`^\`${path.join(' ')}\`$`);
}

/** `--retain` must appear as itself: `--retain-state` or `--no-retain` do not count for it. */
export function mentions(text: string, option: string): boolean {
  return new RegExp(`(?<![\\w-])${option}(?![\\w-])`).test(text);
}

describe('docs/cli.md', () => {
  it('parses commander help: option lines only, not options named in wrapped descriptions', () => {
    const help = [
      'Usage: hookbucket x [options]',
      '',
      'Options:',
      '  --db <path|url>            a file, or a URL; not with',
      '                             --api (env HOOKBUCKET_DB)',
      '  -V, --version              output the version number',
      '  --no-worker                no worker',
      '  --a-very-long-option-name-that-pushes-the-description <value>',
      '                             described below it, mentioning --not-an-option',
      '  -h, --help                 display help for command',
      '',
      'Commands:',
      '  create [options] <name>    create; see',
      '                             help for more',
      '  help [command]             display help for command',
      '',
      'Examples:',
      '  $ hookbucket x --example',
    ].join('\n');
    assert.deepEqual(longOptions(help), ['--a-very-long-option-name-that-pushes-the-description', '--db', '--no-worker', '--version']);
    assert.deepEqual(subcommands(help), ['create']);
    assert.equal(mentions('`--retain-state` and `--no-retain`', '--retain'), false);
    assert.equal(mentions('`--retain 30d`', '--retain'), true);
    assert.equal(section('## `a`\nx\n### `a b`\ny\n## `c`\nz', /^`a`$/), '## `a`\nx\n### `a b`\ny');
  });

  it('documents every command and every long option that --help shows, in that command’s section', async () => {
    const helps = await walk([]);
    // The walk found the tree, not just the root: a parse that found nothing would pass vacuously.
    assert.ok(helps.length >= 20, `only ${helps.length} commands found in --help`);
    assert.ok(
      helps.some((h) => h.path.join(' ') === 'bucket create' && h.options.includes('--destination')),
      'bucket create --destination not found in --help',
    );
    const missing: string[] = [];
    let checked = 0;
    for (const h of helps) {
      const name = h.path.length ? `hookbucket ${h.path.join(' ')}` : 'hookbucket (global options)';
      const text = section(CLI_MD, headingFor(h.path));
      if (text === undefined) {
        missing.push(`${name}: no section headed ${headingFor(h.path).source}`);
        continue;
      }
      for (const option of h.options) {
        checked++;
        if (!mentions(text, option)) missing.push(`${name}: ${option}`);
      }
    }
    assert.ok(checked >= 150, `only ${checked} options checked`);
    assert.deepEqual(missing, [], `missing from docs/cli.md:\n  ${missing.join('\n  ')}`);
  });
});

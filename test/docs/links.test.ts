import assert from 'node:assert/strict';
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';

/**
 * The README, CONTRIBUTING.md and docs/*.md stand on their own: every relative link names a file
 * of the repository (and, with a #fragment, a heading of that file), and nothing points outside
 * the repository.
 */

const ROOT = fileURLToPath(new URL('../../../', import.meta.url)); // from dist/test/docs

const PAGES = [
  'README.md',
  'CONTRIBUTING.md',
  ...readdirSync(`${ROOT}docs`)
    .filter((f) => f.endsWith('.md'))
    .map((f) => `docs/${f}`),
];

/** GitHub's heading anchors: lower case, punctuation dropped, each space a hyphen, repeats numbered. */
export function anchors(markdown: string): Set<string> {
  const seen = new Map<string, number>();
  const out = new Set<string>();
  let inFence = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) inFence = !inFence;
    const m = inFence ? null : /^#{1,6} (.*)$/.exec(line);
    if (!m) continue;
    const base = (m[1] ?? '')
      .trim()
      .toLowerCase()
      .replace(/[^\p{L}\p{N}\s_-]/gu, '')
      .replace(/ /g, '-');
    const n = seen.get(base) ?? 0;
    seen.set(base, n + 1);
    out.add(n === 0 ? base : `${base}-${n}`);
  }
  return out;
}

/** Markdown links `[text](target)` outside code fences and code spans. */
export function links(markdown: string): string[] {
  const out: string[] = [];
  let inFence = false;
  for (const line of markdown.split('\n')) {
    if (line.startsWith('```')) inFence = !inFence;
    if (inFence) continue;
    const prose = line.replace(/`[^`]*`/g, '``');
    for (const m of prose.matchAll(/\]\(([^)\s]+)\)/g)) out.push(m[1] ?? '');
  }
  return out;
}

function resolve(page: string, target: string): string {
  const dir = page.includes('/') ? page.slice(0, page.lastIndexOf('/') + 1) : '';
  const parts: string[] = [];
  for (const p of `${dir}${target}`.split('/')) {
    if (p === '..' && parts.length > 0 && parts[parts.length - 1] !== '..') parts.pop();
    else if (p === '..') parts.push('..');
    else if (p !== '.' && p !== '') parts.push(p);
  }
  return parts.join('/');
}

describe('documentation links', () => {
  it('reads anchors and links as GitHub does', () => {
    assert.deepEqual(
      [...anchors('# A\n## Schedule, outcomes, Retry-After, budget, rate\n## `bucket create`\n```\n# not a heading\n```\n## A')],
      ['a', 'schedule-outcomes-retry-after-budget-rate', 'bucket-create', 'a-1'],
    );
    assert.deepEqual(links('see [x](docs/cli.md#exit-codes) and `[y](not-a-link)`\n```\n[z](nor-this)\n```'), ['docs/cli.md#exit-codes']);
    assert.equal(resolve('docs/cli.md', '../README.md'), 'README.md');
    assert.equal(resolve('README.md', '../shared/STYLE.md'), '../shared/STYLE.md');
  });

  it('every relative link names a file of the repository and a heading in it', () => {
    const broken: string[] = [];
    let checked = 0;
    for (const page of PAGES) {
      const text = readFileSync(`${ROOT}${page}`, 'utf8');
      for (const target of links(text)) {
        if (/^[a-z]+:/i.test(target)) continue; // http(s), mailto: checked below for leaving the repository
        checked++;
        const [file = '', fragment] = target.split('#');
        const path = file === '' ? page : resolve(page, file);
        if (path.startsWith('..') || !existsSync(`${ROOT}${path}`)) {
          broken.push(`${page}: ${target} (no file ${path})`);
          continue;
        }
        if (fragment && path.endsWith('.md') && !anchors(readFileSync(`${ROOT}${path}`, 'utf8')).has(fragment)) {
          broken.push(`${page}: ${target} (no heading #${fragment} in ${path})`);
        }
      }
    }
    assert.ok(checked >= 30, `only ${checked} links checked`);
    assert.deepEqual(broken, []);
  });

  it('refers to nothing outside the repository', () => {
    const outside: string[] = [];
    for (const page of PAGES) {
      const text = readFileSync(`${ROOT}${page}`, 'utf8');
      for (const [i, line] of text.split('\n').entries()) {
        if (/\.\.\/shared|STYLE\.md|\/work\/|file:\/\//.test(line)) outside.push(`${page}:${i + 1}: ${line.trim()}`);
      }
      for (const target of links(text)) if (resolve(page, target.split('#')[0] ?? '').startsWith('..')) outside.push(`${page}: ${target}`);
    }
    assert.deepEqual(outside, []);
  });
});

import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

/** The repository root, from dist/test/helpers/ where this runs. */
export const REPO = fileURLToPath(new URL('../../../', import.meta.url));

/** Every .ts file under `dir` (repository-relative), recursively, sorted. */
export function sourceFiles(dir: string): string[] {
  const out: string[] = [];
  for (const e of readdirSync(join(REPO, dir), { withFileTypes: true })) {
    const path = join(dir, e.name);
    if (e.isDirectory()) out.push(...sourceFiles(path));
    else if (e.name.endsWith('.ts') || e.name.endsWith('.tsx')) out.push(path);
  }
  return out.sort();
}

/**
 * The module specifiers a TypeScript source file imports or re-exports (static `import … from`,
 * `export … from`, side-effect `import '…'` and dynamic `import('…')`), type-only ones included.
 */
export function specifiersOf(source: string): string[] {
  const re = /(?:\bfrom\s*|\bimport\s*\(?\s*)(['"])([^'"\n]+)\1/g;
  const out: string[] = [];
  for (const m of source.matchAll(re)) out.push(m[2]!);
  return out;
}

export interface ImportEdge {
  file: string;
  specifier: string;
  /** Repository-relative target of a relative specifier (.js mapped to .ts); null for a package or node: module. */
  target: string | null;
}

/** The imports of one repository-relative source file. */
export function importsOf(file: string): ImportEdge[] {
  const source = readFileSync(join(REPO, file), 'utf8');
  return specifiersOf(source).map((specifier) => ({
    file,
    specifier,
    target: specifier.startsWith('.') ? relative(REPO, resolve(REPO, dirname(file), specifier)).replace(/\.js$/, '.ts') : null,
  }));
}

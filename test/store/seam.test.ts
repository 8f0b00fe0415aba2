import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { importsOf, sourceFiles } from '../helpers/imports.js';

/**
 * Dialects sit behind one seam: outside src/store/, code reaches the database through the store
 * contract, and only open-store.ts (which picks the dialect) imports a dialect folder.
 */
describe('the store seam', () => {
  it('outside src/store, nothing imports from a dialect folder (only src/store/open-store.ts does)', () => {
    const files = sourceFiles('src').filter((f) => !f.startsWith('src/store/'));
    assert.ok(files.length > 50, `found ${files.length} files`);
    const bad = files.flatMap(importsOf).filter((e) => e.target !== null && /^src\/store\/(sqlite|postgres)\//.test(e.target));
    assert.deepEqual(
      bad.map((e) => `${e.file} → ${e.specifier}`),
      [],
    );
  });

  it('the neutral files of src/store (and src/store/kysely/) import no dialect, but open-store.ts and storage-error.ts (which asks each dialect for its pure error classifier)', () => {
    const neutral = sourceFiles('src/store').filter(
      (f) => /^src\/store\/(kysely\/)?[^/]+\.ts$/.test(f) && f !== 'src/store/open-store.ts' && f !== 'src/store/storage-error.ts',
    );
    assert.ok(
      neutral.includes('src/store/store.ts') &&
        neutral.includes('src/store/bucket-row.ts') &&
        neutral.includes('src/store/kysely/request-queries.ts'),
    );
    const bad = neutral.flatMap(importsOf).filter((e) => e.target !== null && /^src\/store\/(sqlite|postgres)\//.test(e.target));
    assert.deepEqual(
      bad.map((e) => `${e.file} → ${e.specifier}`),
      [],
    );
  });

  it('one dialect folder never imports from the other (what they share lives in src/store)', () => {
    const bad = (['sqlite', 'postgres'] as const).flatMap((dialect) => {
      const other = dialect === 'sqlite' ? 'postgres' : 'sqlite';
      const files = sourceFiles(`src/store/${dialect}`);
      assert.ok(files.length >= 5, `${dialect}: found ${files.length} files`);
      return files.flatMap(importsOf).filter((e) => e.target?.startsWith(`src/store/${other}/`));
    });
    assert.deepEqual(
      bad.map((e) => `${e.file} → ${e.specifier}`),
      [],
    );
  });

  it('storage-error.ts loads no driver: the classifiers it asks import only types', () => {
    const classifiers = importsOf('src/store/storage-error.ts').filter(
      (e) => e.target !== null && /^src\/store\/(sqlite|postgres)\//.test(e.target),
    );
    assert.ok(classifiers.length >= 1);
    for (const c of classifiers)
      assert.deepEqual(
        importsOf(c.target!).filter((e) => e.target === null),
        [],
        c.target!,
      );
  });
});

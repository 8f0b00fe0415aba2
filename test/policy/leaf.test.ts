import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { importsOf, sourceFiles, specifiersOf } from '../helpers/imports.js';

/**
 * The layout's arrows point down: pure policy is a leaf that imports only itself and shared/, the
 * store contract imports no drain module,.
 * These read the sources, so an import added against the arrows fails here.
 */
describe('import direction', () => {
  it('the import scanner sees static, type-only, re-export, side-effect and dynamic imports', () =>
    assert.deepEqual(
      specifiersOf(
        [
          "import { a } from '../store/store.js';",
          'import type { B } from "./b.js";',
          "export { c } from '../drain/c.js';",
          "import '../cli/d.js';",
          "const e = await import('../ingest/e.js');",
          'import {\n  f,\n  g,\n} from "../config/f.js";',
        ].join('\n'),
      ),
      ['../store/store.js', './b.js', '../drain/c.js', '../cli/d.js', '../ingest/e.js', '../config/f.js'],
    ));

  it('src/policy imports nothing but src/policy and src/shared (no store, drain, cli, ingest, config, no package)', () => {
    const files = sourceFiles('src/policy');
    assert.ok(files.length >= 10, `found ${files.length} policy files`);
    const outside = files.flatMap(importsOf).filter((e) => e.target === null || !/^src\/(policy|shared)\//.test(e.target));
    assert.deepEqual(
      outside.map((e) => `${e.file} → ${e.specifier}`),
      [],
    );
  });

  it('src/store/store.ts (the contract) imports no drain module and no dialect', () => {
    const bad = importsOf('src/store/store.ts').filter(
      (e) => e.target === null || /^src\/(drain|cli|ingest)\/|^src\/store\/(sqlite|postgres)\//.test(e.target),
    );
    assert.deepEqual(
      bad.map((e) => e.specifier),
      [],
    );
  });
});

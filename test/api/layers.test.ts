import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { importsOf, sourceFiles } from '../helpers/imports.js';

/**
 * Arrows point down (docs/architecture.md): the admin API and the modules it shares with the CLI
 * (the input parsers in src/options, the --json shapes in src/json) import nothing from the CLI
 * or the composition roots, so the CLI's behaviour reaches the API only through shared code.
 */
describe('admin api: layering', () => {
  it('src/api, src/json and src/options import nothing from src/cli, src/main.ts, src/app.ts or src/server.ts', () => {
    const files = [...sourceFiles('src/api'), ...sourceFiles('src/json'), ...sourceFiles('src/options')];
    assert.ok(files.length >= 8, `found ${files.length} files`);
    const upward = files
      .flatMap(importsOf)
      .filter(
        (e) => e.target !== null && (e.target.startsWith('src/cli/') || ['src/main.ts', 'src/app.ts', 'src/server.ts'].includes(e.target)),
      );
    assert.deepEqual(upward, []);
  });
});

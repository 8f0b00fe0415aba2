import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { importsOf, sourceFiles } from '../helpers/imports.js';

/**
 * Arrows point down (docs/architecture.md): the CLI's remote store (src/remote) sits beside the
 * store contract and reads the shared JSON shapes; it imports nothing from the CLI, the API's
 * server side, the database dialects or the composition roots.
 */
describe('src/remote: layering', () => {
  it('imports nothing from src/cli, src/api, src/admin, a dialect, src/main.ts, src/app.ts or src/server.ts', () => {
    const files = sourceFiles('src/remote');
    assert.ok(files.length >= 4, `found ${files.length} files`);
    const banned = (t: string) =>
      ['src/cli/', 'src/api/', 'src/admin/', 'src/store/sqlite/', 'src/store/postgres/', 'src/store/kysely/'].some((p) =>
        t.startsWith(p),
      ) || ['src/main.ts', 'src/app.ts', 'src/server.ts', 'src/store/open-store.ts'].includes(t);
    assert.deepEqual(
      files.flatMap(importsOf).filter((e) => e.target !== null && banned(e.target)),
      [],
    );
    // undici is its one HTTP client.
    assert.ok(files.flatMap(importsOf).some((e) => e.specifier === 'undici'));
  });
});

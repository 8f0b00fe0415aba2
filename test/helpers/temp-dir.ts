import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

/** A fresh folder for one test's database; remove() deletes it. */
export function tempDir(prefix = 'hookbucket-test-'): { dir: string; db: string; remove: () => void } {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  return { dir, db: join(dir, 'test.db'), remove: () => rmSync(dir, { recursive: true, force: true }) };
}

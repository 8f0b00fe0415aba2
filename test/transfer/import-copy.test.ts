import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, writeFileSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { ImportCopy } from '../../src/transfer/import-copy.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('ImportCopy: the source read once into an unlinked private file', () => {
  let t: ReturnType<typeof tempDir>;
  let spool: string;
  before(() => {
    t = tempDir();
    spool = join(t.dir, 'test.db-spool');
  });
  after(() => t.remove());

  const collect = async (copy: ImportCopy) => {
    const out: Array<string | number> = [];
    for await (const l of copy.lines()) out.push('text' in l ? l.text : -l.line);
    return out;
  };

  it('keeps the bytes read, whatever happens to the source afterwards; leaves no file behind', async () => {
    const src = join(t.dir, 'a.ndjson');
    writeFileSync(src, 'one\ntwo\n');
    const copy = await ImportCopy.from(src, spool);
    try {
      assert.ok(existsSync(spool), 'the spool folder is made on first use');
      assert.deepEqual(readdirSync(spool), [], 'the copy is unlinked while open');
      writeFileSync(src, 'rewritten\n');
      assert.deepEqual(await collect(copy), ['one', 'two']);
      assert.equal((await copy.readAll()).toString(), 'one\ntwo\n');
      // Read twice, as the import's two passes do: the same bytes.
      assert.deepEqual(await collect(copy), ['one', 'two']);
    } finally {
      await copy.close();
    }
    assert.deepEqual(readdirSync(spool), []);
  });

  it('splits lines at LF, drops a CR before it, keeps a last line without LF, joins a line longer than a chunk, flags bytes that are not UTF-8', async () => {
    const src = join(t.dir, 'b.ndjson');
    const long = 'x'.repeat(200 * 1024 + 7);
    writeFileSync(src, Buffer.concat([Buffer.from(`a\r\n\n${long}\né ✓\n`), Buffer.from([0x7b, 0xff, 0x7d, 0x0a]), Buffer.from('last')]));
    const copy = await ImportCopy.from(src, spool);
    try {
      assert.equal(copy.size, 4 + long.length + 1 + Buffer.byteLength('é ✓\n') + 4 + 4);
      assert.deepEqual(await collect(copy), ['a', '', long, 'é ✓', -5, 'last']);
    } finally {
      await copy.close();
    }
  });

  it('reads a FIFO: a pipe can be read once only, and once is all it takes', async () => {
    const fifo = join(t.dir, 'in.fifo');
    execFileSync('mkfifo', [fifo]);
    const [copy] = await Promise.all([ImportCopy.from(fifo, spool), writeFile(fifo, 'p1\np2\n')]);
    try {
      assert.deepEqual(await collect(copy), ['p1', 'p2']);
    } finally {
      await copy.close();
    }
  });

  it('a source that cannot be read leaves nothing in the spool folder', async () => {
    await assert.rejects(ImportCopy.from(join(t.dir, 'missing.ndjson'), spool), { code: 'ENOENT' });
    await assert.rejects(ImportCopy.from(t.dir, spool), { code: 'EISDIR' });
    assert.deepEqual(readdirSync(spool), []);
  });
});

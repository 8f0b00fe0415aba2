import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import { readdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { Spool, spoolDirFor, spoolErrorCode } from '../../src/ingest/spool.js';
import { tempDir } from '../helpers/temp-dir.js';

/** Open file descriptors of this process (Linux): a spool that leaked its handle would show here. */
const openFds = () => readdirSync('/proc/self/fd').length;

describe('Spool', () => {
  const t = tempDir();
  after(() => t.remove());

  it('counts queued bytes as backlog and calls onDrain once they are written', async () => {
    const s = new Spool(join(t.dir, 'spool-d'));
    s.write(randomBytes(2 * 1024 * 1024));
    assert.equal(s.backlog, 2 * 1024 * 1024, 'queued, not yet written');
    let drained = 0;
    await new Promise<void>((resolve) =>
      s.onDrain(() => {
        drained++;
        resolve();
      }),
    );
    assert.equal(drained, 1);
    assert.equal(s.backlog, 0);
    // Nothing queued: onDrain calls back at once.
    s.onDrain(() => drained++);
    assert.equal(drained, 2);
    await s.close();
  });

  it('collect() and close() give the file handle back', async () => {
    const before = openFds();
    const a = new Spool(join(t.dir, 'spool-e'));
    a.write(randomBytes(100_000));
    await a.collect();
    const b = new Spool(join(t.dir, 'spool-e'));
    b.write(randomBytes(100_000));
    await new Promise<void>((resolve) => b.onDrain(resolve));
    assert.equal(openFds(), before + 1, 'the open spool holds one descriptor');
    await b.close();
    await b.close();
    assert.equal(openFds(), before);
  });

  it('gives back the written pieces in order, and leaves no file in its folder', async () => {
    const dir = join(t.dir, 'spool-a');
    const s = new Spool(dir);
    const pieces = [randomBytes(1), randomBytes(70_000), Buffer.alloc(0), randomBytes(3 * 1024 * 1024), randomBytes(5)];
    for (const p of pieces) s.write(p);
    // Opened and unlinked at once: the folder (made on first use) is empty while bytes are held.
    await new Promise<void>((resolve) => s.onDrain(resolve));
    assert.equal(s.backlog, 0);
    assert.deepEqual(readdirSync(dir), []);
    const got = await s.collect();
    assert.ok(got.equals(Buffer.concat(pieces)));
    assert.deepEqual(readdirSync(dir), []);
  });

  it('an empty spool collects to an empty body', async () => {
    const s = new Spool(join(t.dir, 'spool-b'));
    assert.equal((await s.collect()).length, 0);
  });

  it('a folder that cannot be made is a write error, reported by collect() and failed', async () => {
    const blocker = join(t.dir, 'not-a-folder');
    writeFileSync(blocker, 'x');
    const s = new Spool(join(blocker, 'spool'));
    s.write(Buffer.from('abc'));
    await assert.rejects(s.collect(), (e: NodeJS.ErrnoException) => e.code === 'ENOTDIR');
    assert.equal(s.failed?.code, 'ENOTDIR');
    assert.equal(spoolErrorCode(s.failed), 'storage_error');
  });

  it('names ENOSPC and EDQUOT storage_full, and puts the folder beside the database', () => {
    assert.equal(spoolErrorCode(Object.assign(new Error(), { code: 'ENOSPC' })), 'storage_full');
    assert.equal(spoolErrorCode(Object.assign(new Error(), { code: 'EDQUOT' })), 'storage_full');
    assert.equal(spoolErrorCode(Object.assign(new Error(), { code: 'EIO' })), 'storage_error');
    assert.equal(spoolDirFor('data/hookbucket.db'), 'data/hookbucket.db-spool');
    assert.notEqual(spoolDirFor(':memory:'), ':memory:-spool');
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { loadConfig } from '../../src/config/config.js';
import { systemClock } from '../../src/shared/clock.js';
import { dialectOf, openStore } from '../../src/store/open-store.js';
import { runInProcess } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('openStore: the one place that picks a dialect from --db', () => {
  let t: ReturnType<typeof tempDir>;
  before(() => (t = tempDir()));
  after(() => t.remove());

  it('a postgres:// or postgresql:// URL (any case) is PostgreSQL; anything else is a SQLite path', () => {
    for (const db of ['postgres://h/db', 'postgresql://u:p@h:5432/db', 'PostgreSQL://h/db']) assert.equal(dialectOf(db), 'postgres', db);
    for (const db of ['data/hookbucket.db', ':memory:', '/srv/postgres/hb.db', './postgres:x.db'])
      assert.equal(dialectOf(db), 'sqlite', db);
  });

  it('a PostgreSQL URL opens nothing until asked, and shows its location without the password', () => {
    const opened = openStore(loadConfig({ HOOKBUCKET_DB: 'postgres://app:s3cret@127.0.0.1:5432/hb' }, {}), { clock: systemClock });
    assert.equal(opened.dialect, 'postgres');
    assert.equal(opened.location, 'postgres://app:[redacted]@127.0.0.1:5432/hb');
  });

  it('opens nothing until asked, then the SQLite store and drain store on the same file', async () => {
    const opened = openStore(loadConfig({ HOOKBUCKET_DB: t.db }, {}), { clock: systemClock });
    assert.equal(opened.dialect, 'sqlite');
    assert.equal(opened.location, t.db);
    const store = await opened.store();
    try {
      await store.createBucket({ name: 'seam' });
      const drain = await opened.drainStore({ checkpoints: false });
      try {
        assert.deepEqual(
          (await drain.listBuckets()).map((b) => b.name),
          ['seam'],
        );
      } finally {
        await drain.close();
      }
    } finally {
      await store.close();
    }
  });

  it('the CLI says storage_error for a PostgreSQL server it cannot reach, and never prints the password', async () => {
    // Port 1 on loopback: nothing listens there, so the connection is refused at once.
    const r = await runInProcess(['--db', 'postgresql://app:s3cret@127.0.0.1:1/hb', 'bucket', 'list']);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^error \[storage_error\]: /);
    assert.doesNotMatch(r.stderr + r.stdout, /s3cret/);
  });
});

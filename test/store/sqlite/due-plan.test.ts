import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { systemClock } from '../../../src/shared/clock.js';
import { createBucketDue, DUE_BUCKETS_SQL, NEXT_DUE_SQL } from '../../../src/store/sqlite/bucket-due.js';
import { openSqlite, type SqliteDb } from '../../../src/store/sqlite/open.js';
import { SqliteStore } from '../../../src/store/sqlite/sqlite-store.js';
import { tempDir } from '../../helpers/temp-dir.js';

/**
 * The drain's due questions must be a range of bucket_due_next, never a walk over every bucket:
 * with 10,000 idle buckets a scan of buckets in every pass is the cost issue 11 removed. Checked
 * with and without ANALYZE statistics (which made SQLite prefer scanning buckets).
 */
describe('due query plans', () => {
  const t = tempDir();
  let raw: SqliteDb;
  const now = Date.UTC(2026, 11, 3, 12);

  before(async () => {
    const store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
    await store.createBucket({ name: 'template' });
    await store.close();
    raw = openSqlite(t.db, { durability: 'full', busyTimeoutMs: 5000 });
    const cols = (raw.prepare('pragma table_info(buckets)').all() as Array<{ name: string }>)
      .map((c) => c.name)
      .filter((c) => c !== 'name');
    const copy = raw.prepare(
      `insert into buckets (name, ${cols.join(', ')}) select ?, ${cols.join(', ')} from buckets where name = 'template'`,
    );
    const due = raw.prepare('insert into bucket_due (bucket, next_due_at) values (?, ?)');
    raw.transaction(() => {
      for (let i = 0; i < 2000; i++) {
        const name = `b${String(i).padStart(4, '0')}`;
        copy.run(name);
        // Idle (null) but for three: one due, one due later, one due but paused.
        due.run(name, i === 7 ? now - 5 : i === 8 ? now + 60_000 : i === 9 ? now - 1 : null);
      }
      raw.prepare(`update buckets set paused = 1 where name = 'b0009'`).run();
    })();
  });
  after(() => {
    raw.close();
    t.remove();
  });

  const plan = (sql: string) => (raw.prepare(`explain query plan ${sql}`).all(now) as Array<{ detail: string }>).map((r) => r.detail);

  for (const analyzed of [false, true]) {
    it(`walks the next_due_at range, then looks each due bucket up${analyzed ? ' (after ANALYZE)' : ''}`, () => {
      if (analyzed) raw.exec('analyze');
      for (const sql of [DUE_BUCKETS_SQL, NEXT_DUE_SQL]) {
        const p = plan(sql);
        assert.match(p[0]!, /^SEARCH d USING (COVERING )?INDEX bucket_due_next \(next_due_at[<>]\?\)$/, p.join(' | '));
        assert.match(p[1]!, /^SEARCH b USING INDEX sqlite_autoindex_buckets_1 \(name=\?\)$/, p.join(' | '));
        assert.equal(p.length, 2, p.join(' | '));
      }
      const due = createBucketDue(raw);
      assert.deepEqual(due.dueBuckets(now), ['b0007']);
      assert.equal(due.nextAfter(now), now + 60_000);
    });
  }
});

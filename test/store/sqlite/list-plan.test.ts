import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { systemClock } from '../../../src/shared/clock.js';
import { openSqlite, type SqliteDb } from '../../../src/store/sqlite/open.js';
import type { IdRange } from '../../../src/store/request-rows.js';
import { explainPlan, planRequestQueries } from '../../../src/store/sqlite/request-query.js';
import { SqliteStore } from '../../../src/store/sqlite/sqlite-store.js';
import type { RequestFilter } from '../../../src/store/store.js';
import { tempDir } from '../../helpers/temp-dir.js';

/**
 * The first page of `requests list` must be index ranges walked in id order: with a million rows a
 * sort (USE TEMP B-TREE) or a scan of the bucket would cost seconds, not milliseconds. These are
 * the exact queries queryPage runs (planRequestQueries is what it executes), on a migrated schema.
 */
describe('requests list query plans', () => {
  const t = tempDir();
  let raw: SqliteDb;
  const now = Date.UTC(2026, 11, 2, 12);
  const page: IdRange = { order: 'desc', limit: 51 };

  before(async () => {
    const store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 5000, clock: systemClock });
    await store.close();
    raw = openSqlite(t.db, { durability: 'full', busyTimeoutMs: 5000 });
  });
  after(() => {
    raw.close();
    t.remove();
  });

  const plan = (filter: RequestFilter, paused = false, range: IdRange = page) =>
    planRequestQueries('b', filter, paused, range).map((q) => ({ source: q.source, detail: explainPlan(raw, q).join('\n') }));

  it('state + time: one range of deliveries_latest_state per state, no sort', () => {
    const plans = plan({ states: ['exhausted'], sinceMs: now - 3_600_000, untilMs: now });
    assert.equal(plans.length, 1);
    const d = plans[0]!.detail;
    assert.match(
      d,
      /SEARCH d USING (COVERING )?INDEX deliveries_latest_state \(bucket=\? AND state=\? AND request_id>\? AND request_id<\?\)/,
    );
    assert.match(d, /SEARCH r USING INDEX sqlite_autoindex_requests_1 \(id=\?\)/);
    assert.doesNotMatch(d, /TEMP B-TREE/);
    assert.doesNotMatch(d, /SCAN/);
  });

  it('several states (and held in a paused bucket) are one such range each', () => {
    const plans = plan({ states: ['exhausted', 'failed', 'held'], sinceMs: now - 3_600_000 }, true);
    assert.deepEqual(plans.map((p) => p.source).sort(), ['exhausted', 'failed', 'pending', 'retrying']);
    for (const p of plans) {
      assert.match(p.detail, /deliveries_latest_state \(bucket=\? AND state=\? AND request_id>\?\)/, p.source);
      assert.doesNotMatch(p.detail, /TEMP B-TREE/, p.source);
    }
  });

  it('with a cursor, and with row filters on top, the range and order stay', () => {
    const plans = plan(
      { states: ['failed'], methods: ['POST'], pathGlob: '/a/*', headers: [{ name: 'x', value: 'y' }], status: { class: 4 } },
      false,
      {
        ...page,
        before: '019ae0c4-0000-7000-8000-000000000000',
      },
    );
    assert.match(plans[0]!.detail, /deliveries_latest_state \(bucket=\? AND state=\? AND request_id<\?\)/);
    assert.doesNotMatch(plans[0]!.detail, /TEMP B-TREE/);
  });

  it('no state filter and `none` walk requests_bucket_id in id order', () => {
    for (const filter of [{}, { sinceMs: now - 60_000 }, { states: ['none'] as const }, { status: { code: 503 } }] as RequestFilter[]) {
      const [p] = plan(filter);
      assert.match(p!.detail, /SEARCH r USING (COVERING )?INDEX requests_bucket_id \(bucket=\?/, JSON.stringify(filter));
      assert.doesNotMatch(p!.detail, /TEMP B-TREE/, JSON.stringify(filter));
    }
  });

  it('oldest-first iteration (export, replay selection) is the same ranges ascending, no sort', () => {
    const plans = plan({ states: ['delivered', 'none'] }, false, {
      order: 'asc',
      limit: 500,
      after: '019ae0c4-0000-7000-8000-000000000000',
    });
    assert.equal(plans.length, 2);
    for (const p of plans) assert.doesNotMatch(p.detail, /TEMP B-TREE/, p.source);
  });

  it('a state that cannot hold rows plans no query (pending while paused, held while running)', () => {
    assert.deepEqual(plan({ states: ['pending', 'retrying'] }, true), []);
    assert.deepEqual(plan({ states: ['held'] }, false), []);
  });
});

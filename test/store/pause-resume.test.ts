import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { ManualClock } from '../../src/shared/clock.js';
import { SqliteStore } from '../../src/store/sqlite/sqlite-store.js';
import { pausedMsAt } from '../../src/store/store.js';
import { tempDir } from '../helpers/temp-dir.js';

const MINUTE = 60_000;

describe('pauseBucket / resumeBucket', () => {
  const t = tempDir();
  const start = Date.UTC(2026, 11, 2, 12);
  const clock = new ManualClock(start);
  let store: SqliteStore;
  before(async () => {
    store = await SqliteStore.open({ path: t.db, durability: 'full', busyTimeoutMs: 2000, clock });
    await store.createBucket({ name: 'held' });
  });
  after(async () => {
    await store.close();
    t.remove();
  });

  it('pause records when; a second pause keeps the first time', async () => {
    const p = await store.pauseBucket('held');
    assert.deepEqual([p.paused, p.pausedAt, p.pausedTotalMs, p.updatedAt], [true, start, 0, start]);
    clock.advance(2 * MINUTE);
    const again = await store.pauseBucket('held');
    assert.deepEqual([again.paused, again.pausedAt, again.updatedAt], [true, start, start], 'idempotent: nothing written');
    assert.equal(pausedMsAt(again, clock.now()), 2 * MINUTE, 'the current pause counts while it lasts');
  });

  it('resume adds the paused time to pausedTotalMs and clears pausedAt', async () => {
    clock.advance(3 * MINUTE); // 5 minutes since the pause
    const r = await store.resumeBucket('held');
    assert.deepEqual([r.paused, r.pausedAt, r.pausedTotalMs, r.updatedAt], [false, null, 5 * MINUTE, start + 5 * MINUTE]);

    clock.advance(MINUTE);
    const notPaused = await store.resumeBucket('held');
    assert.equal(notPaused.pausedTotalMs, 5 * MINUTE, 'resuming a running bucket adds nothing');
    assert.equal(notPaused.updatedAt, start + 5 * MINUTE);
  });

  it('a second pause adds to the total; time between pauses is not counted', async () => {
    await store.pauseBucket('held'); // at +6m
    clock.advance(90_000);
    const r = await store.resumeBucket('held');
    assert.equal(r.pausedTotalMs, 5 * MINUTE + 90_000);
    assert.equal(pausedMsAt(r, clock.now() + 10 * MINUTE), 5 * MINUTE + 90_000, 'no pause open: later time adds nothing');
    assert.deepEqual(await store.getBucket('held').then((b) => [b?.paused, b?.pausedAt, b?.pausedTotalMs]), [
      false,
      null,
      5 * MINUTE + 90_000,
    ]);
  });

  it('an unknown bucket is not_found', async () => {
    await assert.rejects(store.pauseBucket('nope'), { code: 'not_found' });
    await assert.rejects(store.resumeBucket('nope'), { code: 'not_found' });
  });
});

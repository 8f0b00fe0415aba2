import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { openSqlite } from '../../../src/store/sqlite/open.js';
import { tempDir } from '../../helpers/temp-dir.js';

describe('openSqlite', () => {
  const t = tempDir();
  after(() => t.remove());

  // The writer and checkpoint threads open with busy_timeout 0: if opening wrote (setting
  // auto_vacuum runs a write transaction), a restart beside another writer failed with SQLITE_BUSY
  // (found by reliability case 1: `serve` exited 1 about one restart in 15 after kill -9).
  it('opens an existing file without taking the write lock', () => {
    const first = openSqlite(t.db, { durability: 'full', busyTimeoutMs: 0 });
    first.exec('create table t (x integer)');
    assert.equal(first.pragma('auto_vacuum', { simple: true }), 2);
    first.exec('BEGIN IMMEDIATE');
    try {
      const second = openSqlite(t.db, { durability: 'full', busyTimeoutMs: 0 });
      assert.equal(second.pragma('auto_vacuum', { simple: true }), 2);
      assert.equal(second.pragma('journal_mode', { simple: true }), 'wal');
      second.close();
    } finally {
      first.exec('ROLLBACK');
      first.close();
    }
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it, type TestContext } from 'node:test';
import { openStoreReads } from '../../src/api/open-store-reads.js';
import { STORE_READ_METHODS } from '../../src/api/store-reads.js';
import { AppError } from '../../src/shared/errors.js';
import { openStoreReader } from '../../src/store/open-store.js';
import type { StoreReaderOptions } from '../../src/store/store-reader.js';
import { PG_SKIP_REASON, pgTestServer, withPgClient } from '../helpers/pg-database.js';
import { until } from '../helpers/until.js';
import { openFixture, seedMany, type Fixture } from './store-reads-fixture.js';

/**
 * The admin reader under a slow read: a body search for bytes that no body holds, over ROWS
 * requests of BODY_BYTES each, reads every body (about 120 MB). Real data, no hook in the code.
 * Budgets are a tenth of what the same search took here, so "past the budget" holds on a fast
 * machine as on a slow one; no assertion is on a duration.
 */
const ROWS = 30_000;
const BODY_BYTES = 4096;
const ABSENT = { search: 'bytes no body holds: 7f3c9e1a' };

function isAppError(code: string) {
  return (e: unknown) => {
    assert.ok(e instanceof AppError, String(e));
    assert.equal(e.code, code, e.message);
    return true;
  };
}

/** Counts the main thread's timer callbacks (every 1 ms when the event loop is free) while `fn` runs. */
async function ticksDuring<T>(fn: () => Promise<T>): Promise<{ value: T; ticks: number; ms: number }> {
  let ticks = 0;
  const timer = setInterval(() => ticks++, 1);
  const start = performance.now();
  try {
    const value = await fn();
    return { value, ticks, ms: performance.now() - start };
  } finally {
    clearInterval(timer);
  }
}

for (const dialect of pgTestServer() === undefined ? (['sqlite'] as const) : (['sqlite', 'postgres'] as const)) {
  describe(`the admin reader's budget (${dialect})`, () => {
    let f: Fixture;
    /** How long the slow search took on the reader with a large budget, ms. */
    let slowMs = 0;
    const open = (options: Partial<StoreReaderOptions<(typeof STORE_READ_METHODS)[number]>>) =>
      openStoreReader(
        f.config,
        { clock: f.clock, useCallerClock: f.useCallerClock },
        { methods: STORE_READ_METHODS, budgetMs: 60_000, ...options },
      );

    before(async () => {
      f = await openFixture(dialect);
      await seedMany(f.store, 'big', ROWS, BODY_BYTES);
      // Once through the main store first: the file is in the page cache for every run after.
      await f.store.countRequests('big', ABSENT);
    });
    after(async () => {
      await f?.close();
    });

    it("a slow read leaves the main thread's event loop free: its timers keep firing meanwhile", async (t: TestContext) => {
      const reads = await openStoreReads(f.config, { budgetMs: 60_000, clock: f.clock, useCallerClock: f.useCallerClock });
      try {
        const off = await ticksDuring(() => reads.listRequests('big', ABSENT, { limit: 10 }));
        assert.deepEqual(off.value.requests, []);
        slowMs = off.ms;
        // The same search on the main store, for contrast: on SQLite it holds the event loop.
        const main = await ticksDuring(() => f.store.listRequests('big', ABSENT, { limit: 10 }));
        t.diagnostic(
          `search of ${ROWS} x ${BODY_BYTES} B bodies: reader ${off.ms.toFixed(0)} ms with ${off.ticks} main-thread ticks; main store ${main.ms.toFixed(0)} ms with ${main.ticks} ticks`,
        );
        assert.ok(off.ticks >= 10, `${off.ticks} ticks of a 1 ms interval during the read`);
        if (dialect === 'sqlite')
          assert.equal(main.ticks, 0, "the main store's synchronous search holds every timer (the contrast this reader exists for)");
      } finally {
        await reads.close();
      }
    });

    it('past its budget a read fails with query_timeout, and the call behind it is answered on a fresh thread', async (t: TestContext) => {
      assert.ok(slowMs > 0, 'the first test measured the search');
      const budgetMs = Math.max(5, Math.floor(slowMs / 10));
      const reads = await open({ budgetMs });
      try {
        const slow = reads.listRequests('big', ABSENT, { limit: 10 });
        const behind = reads.getBucket('big');
        await assert.rejects(slow, (e: unknown) => {
          isAppError('query_timeout')(e);
          assert.match((e as Error).message, new RegExp(`listRequests ran past its ${budgetMs} ms budget`));
          return true;
        });
        if (dialect === 'sqlite') {
          // Right after the timeout: the old thread is abandoned (its statement still running) and a fresh one is starting.
          assert.deepEqual({ ...reads.status(), queued: 0 }, { threadsStarted: 2, abandoned: 1, queued: 0, running: 0 });
        } else {
          const e = await slow.then(
            () => undefined,
            (x: Error) => x,
          );
          assert.match(String(e?.message), /cancelled by the database/, 'statement_timeout ended it on the server');
        }
        assert.equal((await behind)?.name, 'big');
        assert.equal((await reads.getBucket('big'))?.name, 'big', 'and the next call too');
        if (dialect === 'sqlite') {
          await until(() => reads.status().abandoned === 0, 'the abandoned thread to exit once its statement ended');
          assert.equal(reads.status().threadsStarted, 2);
        } else {
          await until(
            async () =>
              (
                await withPgClient(f.config.db, (c) =>
                  c.query(
                    `select count(*)::int as n from pg_stat_activity where application_name = 'hookbucket-admin-reads' and state = 'active'`,
                  ),
                )
              ).rows[0].n === 0,
            'no statement of the reader still running on the server',
          );
        }
        t.diagnostic(`budget ${budgetMs} ms (a tenth of ${slowMs.toFixed(0)} ms)`);
      } finally {
        await reads.close();
      }
    });

    it('at most maxQueued calls wait for their turn; one more fails at once with admin_busy', async () => {
      const reads = await open({ maxQueued: 2 });
      try {
        // SQLite runs one call at a time, PostgreSQL as many as its pool has connections (2).
        const running = dialect === 'sqlite' ? 1 : 2;
        const calls = Array.from({ length: running }, () => reads.countRequests('big', ABSENT));
        const waiting = [reads.getBucket('big'), reads.listBuckets()] as const;
        assert.deepEqual({ queued: reads.status().queued, running: reads.status().running }, { queued: 2, running });
        await assert.rejects(reads.getBucket('big'), (e: unknown) => {
          isAppError('admin_busy')(e);
          assert.match((e as Error).message, /2 already waiting/);
          return true;
        });
        assert.deepEqual(await Promise.all(calls), Array(running).fill(0));
        const bucket = await waiting[0];
        const list = await waiting[1];
        assert.equal(bucket?.name, 'big');
        assert.deepEqual(
          list.map((b) => b.name),
          ['big'],
        );
        assert.equal((await reads.getBucket('big'))?.name, 'big', 'room again once they are done');
      } finally {
        await reads.close();
      }
    });

    if (dialect === 'sqlite') {
      it('maxAbandoned: no fresh thread while too many abandoned statements still run; calls wait for one to end', async () => {
        const budgetMs = Math.max(5, Math.floor(slowMs / 10));
        const reads = await open({ budgetMs, maxAbandoned: 0 });
        try {
          await assert.rejects(reads.listRequests('big', ABSENT, { limit: 10 }), isAppError('query_timeout'));
          const next = reads.getBucket('big');
          assert.deepEqual(reads.status(), { threadsStarted: 1, abandoned: 1, queued: 1, running: 0 });
          assert.equal((await next)?.name, 'big', 'served once the abandoned thread has exited');
          assert.deepEqual(reads.status(), { threadsStarted: 2, abandoned: 0, queued: 0, running: 0 });
        } finally {
          await reads.close();
        }
      });

      it('close() during a slow read fails it (and the calls waiting) and returns', async () => {
        const reads = await open({});
        const slow = assert.rejects(
          reads.listRequests('big', ABSENT, { limit: 10 }),
          (e: unknown) => isAppError('storage_error')(e) && /closed/.test((e as Error).message),
        );
        const waiting = assert.rejects(reads.getBucket('big'), isAppError('storage_error'));
        await reads.close();
        await slow;
        await waiting;
        assert.equal(reads.status().queued, 0);
      });
    }
  });
}

if (pgTestServer() === undefined) {
  describe("the admin reader's budget (postgres)", () => {
    it('skipped', { skip: PG_SKIP_REASON }, () => undefined);
  });
}

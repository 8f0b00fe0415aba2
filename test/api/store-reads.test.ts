import assert from 'node:assert/strict';
import { writeFileSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { openStoreReads, type OpenedStoreReads } from '../../src/api/open-store-reads.js';
import { STORE_READ_METHODS, type StoreReadMethod, type StoreReads } from '../../src/api/store-reads.js';
import { AppError } from '../../src/shared/errors.js';
import { openStoreReader } from '../../src/store/open-store.js';
import type { ReadableMethod } from '../../src/store/store-reader.js';
import { captured, DIALECT_NAMES, openFixture, seed, T0, type Fixture, type Seeded } from './store-reads-fixture.js';
import { PG_SKIP_REASON, pgTestServer } from '../helpers/pg-database.js';
import { tempDir } from '../helpers/temp-dir.js';

type Case = { [M in StoreReadMethod]: [M, (s: Seeded) => Parameters<StoreReads[M]>] }[StoreReadMethod];

const NOW = T0 + 10 * 60_000;

/** Each read method with real arguments, some of them more than once (filters, misses). */
const CASES: Case[] = [
  ['getBucket', () => ['alpha']],
  ['getBucket', () => ['beta']],
  ['getBucket', () => ['missing']],
  ['listBuckets', () => []],
  ['bucketCounts', () => ['alpha']],
  ['bucketCounts', () => ['beta']],
  ['allBucketCounts', () => []],
  ['unattributedRejections', () => []],
  ['listRequests', () => ['alpha', {}, { limit: 5 }]],
  ['listRequests', (s) => ['alpha', {}, { limit: 5, before: s.alpha[8]! }]],
  ['listRequests', () => ['alpha', { search: '"needle":true' }, { limit: 50 }]],
  ['listRequests', () => ['alpha', { states: ['delivered', 'retrying'], methods: ['POST'] }, { limit: 50 }]],
  ['listRequests', () => ['alpha', { pathGlob: '/p/*', status: { class: 5 } }, { limit: 50 }]],
  ['listRequests', () => ['beta', { states: ['held'] }, { limit: 50 }]],
  ['requestBatch', () => ['alpha', {}, null]],
  ['requestBatch', () => ['alpha', { search: '"needle":true' }, null, { limit: 2 }]],
  ['requestBatch', (s) => ['alpha', {}, { newest: s.alpha[12]!, after: s.alpha[3]!, left: 5 }]],
  ['requestBatch', () => ['beta', { states: ['held'] }, null]],
  ['countRequests', () => ['alpha', {}]],
  ['countRequests', () => ['alpha', { sinceMs: T0 + 2, untilMs: T0 + 9, headers: [{ name: 'content-type', value: 'application/json' }] }]],
  ['getRequest', (s) => [s.binaryId]],
  ['getRequest', (s) => [s.largeId]],
  ['getRequest', (s) => [s.alpha[2]!]],
  ['getRequest', () => ['01900000-0000-7000-8000-000000000000']],
  ['bucketOverview', () => [{ limit: 50, sinceMs: T0 - 60_000, binMs: 60_000, bins: 12 }]],
  ['bucketOverview', () => [{ after: 'alpha', limit: 1, sinceMs: T0, binMs: 1_000, bins: 5 }]],
  ['bucketOverview', () => [{ after: 'zzz', limit: 5, sinceMs: T0, binMs: 1, bins: 0 }]],
  ['statsSamples', () => [{ sinceMs: T0 - 60_000, untilMs: NOW }]],
  ['statsSamples', () => [{ bucket: 'alpha', sinceMs: T0, untilMs: T0 + 61_000 }]],
  ['requestHistory', (s) => [s.alpha[0]!]],
  ['requestHistory', (s) => [s.alpha[7]!]],
  ['getReplay', (s) => [s.replayId]],
  ['getReplay', () => ['01900000-0000-7000-8000-000000000000']],
  ['listReplays', () => [{ limit: 10 }]],
  ['listReplays', () => [{ bucket: 'beta', limit: 10 }]],
  ['replayProgress', (s) => [s.replayId]],
  ['activeWorker', () => [NOW]],
  ['activeWorker', () => [NOW + 24 * 3_600_000]],
  ['processes', () => [NOW]],
  ['processes', () => [NOW, { limit: 1 }]],
  ['tail', () => ['alpha', { requestId: '', sinceMs: 0, seen: [] }]],
  ['tail', (s) => ['alpha', { requestId: s.alpha[10]!, sinceMs: T0 + 60_000, seen: [] }]],
  ['tail', () => [['alpha', 'beta', 'gone'], { requestId: '', sinceMs: 0, seen: [] }]],
  ['tailRequestsPage', (s) => ['alpha', s.alpha[3]!, 4]],
  ['tailAttemptsPage', () => ['alpha', { after: { startedAt: 0, id: '' }, finishedFrom: T0 }, 3]],
];

const call = (target: StoreReads, m: StoreReadMethod, args: unknown[]) => (target[m] as (...a: unknown[]) => Promise<unknown>)(...args);

/** An awaited rejection as `{ code, message }` (AppErrors), for comparing a reader's errors with the store's. */
async function failure(p: Promise<unknown>): Promise<{ code: string; message: string; isAppError: boolean }> {
  try {
    await p;
  } catch (e) {
    return { code: (e as AppError).code, message: (e as Error).message, isAppError: e instanceof AppError };
  }
  assert.fail('expected a rejection');
}

describe('the admin reader: the cases cover every read method', () => {
  it('each of STORE_READ_METHODS has at least one case', () => {
    const covered = new Set(CASES.map((c) => c[0]));
    assert.deepEqual(
      STORE_READ_METHODS.filter((m) => !covered.has(m)),
      [],
    );
  });
});

for (const dialect of DIALECT_NAMES) {
  describe(`the admin reader (${dialect}): the same answers as the Store`, () => {
    let f: Fixture;
    let s: Seeded;
    let reads: OpenedStoreReads;
    before(async () => {
      f = await openFixture(dialect);
      s = await seed(f);
      reads = await openStoreReads(f.config, { budgetMs: 30_000, clock: f.clock, useCallerClock: f.useCallerClock });
    });
    after(async () => {
      await reads?.close();
      await f?.close();
    });

    for (const [i, [method, argsOf]] of CASES.entries()) {
      it(`#${i} ${method}`, async () => {
        const args = argsOf(s);
        const expected = await call(f.store, method, args);
        const actual = await call(reads, method, args);
        assert.deepStrictEqual(actual, expected);
      });
    }

    it("bodies come back as Buffers, byte-exact (binary, empty, 100 KiB), and attempts' response excerpts too", async () => {
      const bin = await reads.getRequest(s.binaryId);
      assert.ok(bin && Buffer.isBuffer(bin.body));
      assert.ok(
        bin.body.equals(
          Buffer.concat([Buffer.from(Array.from({ length: 256 }, (_, i) => i)), Buffer.from([0, 0, 0xff, 0xfe, 0x0d, 0x0a])]),
        ),
      );
      const large = await reads.getRequest(s.largeId);
      assert.ok(large && Buffer.isBuffer(large.body) && large.body.equals(s.largeBody));
      const empty = await reads.getRequest(s.alpha[2]!);
      assert.ok(empty && Buffer.isBuffer(empty.body) && empty.body.length === 0);
      assert.deepEqual(empty.rawTrailers, ['X-Trailer', 'done']);
      const history = await reads.requestHistory(s.alpha[7]!);
      const excerpt = history[0]!.attemptLog[0]!.responseBody;
      assert.ok(Buffer.isBuffer(excerpt) && excerpt.length === 64 && excerpt[255 % 64] === 255 % 64);
      const tail = await reads.tail('alpha', { requestId: s.alpha.at(-1)!, sinceMs: 0, seen: [] });
      const attempts = tail.events.filter((e) => e.kind === 'attempt');
      assert.ok(attempts.length >= 9);
      for (const e of attempts) assert.ok(e.kind === 'attempt' && Buffer.isBuffer(e.attempt.responseBody), 'an excerpt is a Buffer');
    });

    it("tail looks back from the caller's clock, not the thread's", async () => {
      // The attempts were made at T0 + 1 min, months before the real now: read at the system time
      // they would be past tail's 15-minute look-back.
      const events = (await reads.tail('alpha', { requestId: s.alpha.at(-1)!, sinceMs: 0, seen: [] })).events;
      assert.equal(events.filter((e) => e.kind === 'attempt').length, 9);
    });

    it('a Map crosses intact (allBucketCounts)', async () => {
      const counts = await reads.allBucketCounts();
      assert.ok(counts instanceof Map);
      assert.equal(counts.get('alpha')?.requests, 15);
    });

    it("errors come back as AppErrors with the Store's code and message", async () => {
      for (const [m, args] of [
        ['listRequests', ['missing', {}, { limit: 5 }]],
        ['countRequests', ['missing', {}]],
        ['requestBatch', ['missing', {}, null]],
        ['tail', ['missing', { requestId: '', sinceMs: 0, seen: [] }]],
        ['statsSamples', [{ bucket: 'missing', sinceMs: 0, untilMs: NOW }]],
      ] as const) {
        const expected = await failure(call(f.store, m, [...args]));
        const actual = await failure(call(reads, m, [...args]));
        assert.deepEqual(actual, expected, m);
        assert.equal(actual.code, 'not_found');
        assert.ok(actual.isAppError);
      }
    });

    it('what the main store and ingest write afterwards is visible to the reader', async () => {
      await f.store.createBucket({ name: 'gamma', destination: null });
      assert.equal((await reads.getBucket('gamma'))?.name, 'gamma');
      const r = captured('gamma', T0 + 5_000, { body: Buffer.from([1, 2, 3, 0]) });
      await f.sink.submit(r, { createDelivery: false });
      const page = await reads.listRequests('gamma', {}, { limit: 10 });
      assert.deepEqual(
        page.requests.map((x) => x.id),
        [r.id],
      );
      assert.ok((await reads.getRequest(r.id))?.body.equals(Buffer.from([1, 2, 3, 0])));
      await f.store.pauseBucket('gamma');
      assert.equal((await reads.getBucket('gamma'))?.paused, true);
      assert.deepStrictEqual(await reads.bucketCounts('gamma'), await f.store.bucketCounts('gamma'));
    });

    it('the reader cannot write: its connection is read-only', async () => {
      // Not a read method: reached only by naming it past the types, as a bug would.
      const writer = await openStoreReader(
        f.config,
        { clock: f.clock, useCallerClock: f.useCallerClock },
        {
          methods: ['pauseBucket'] as unknown as ReadableMethod[],
          budgetMs: 30_000,
        },
      );
      try {
        const e = await failure((writer as unknown as { pauseBucket(n: string): Promise<unknown> }).pauseBucket('alpha'));
        assert.ok(e.isAppError, `${e.code}: ${e.message}`);
        assert.equal(e.code, 'storage_error');
        assert.match(e.message, /read-?only/i);
      } finally {
        await writer.close();
      }
      assert.equal((await f.store.getBucket('alpha'))?.paused, false);
    });

    it('after close(), calls fail with a clear error', async () => {
      const other = await openStoreReads(f.config, { budgetMs: 30_000, clock: f.clock, useCallerClock: f.useCallerClock });
      assert.equal((await other.getBucket('alpha'))?.name, 'alpha');
      await other.close();
      const e = await failure(other.getBucket('alpha'));
      assert.equal(e.code, 'storage_error');
      assert.match(e.message, /closed/);
    });
  });
}

if (pgTestServer() === undefined) {
  describe('the admin reader (postgres)', () => {
    it('skipped', { skip: PG_SKIP_REASON }, () => undefined);
  });
}

describe('the admin reader (sqlite): opening', () => {
  it('a missing database file is refused (the reader never creates one)', async () => {
    const t = tempDir('hookbucket-reads-missing-');
    try {
      const { loadConfig } = await import('../../src/config/config.js');
      const config = loadConfig({}, {}, { db: t.db, logLevel: 'silent' });
      const e = await failure(openStoreReads(config, { budgetMs: 1_000 }));
      assert.ok(e.isAppError);
      assert.equal(e.code, 'storage_error');
    } finally {
      t.remove();
    }
  });

  it("a database not migrated to this program's schema is refused with schema_mismatch, and left unmigrated", async () => {
    const t = tempDir('hookbucket-reads-old-');
    try {
      const raw = new BetterSqlite3(t.db);
      raw.pragma('journal_mode = WAL');
      raw.exec('create table hookbucket_migration (name text primary key, timestamp text)');
      raw.prepare('insert into hookbucket_migration values (?, ?)').run('2020-01-01-old', 'x');
      raw.close();
      const { loadConfig } = await import('../../src/config/config.js');
      const config = loadConfig({}, {}, { db: t.db, logLevel: 'silent' });
      const e = await failure(openStoreReads(config, { budgetMs: 1_000 }));
      assert.equal(e.code, 'schema_mismatch');
      assert.match(e.message, /2020-01-01-old/);
      const check = new BetterSqlite3(t.db, { readonly: true });
      assert.deepEqual(check.prepare(`select name from sqlite_master where type = 'table' order by name`).pluck().all(), [
        'hookbucket_migration',
      ]);
      check.close();
    } finally {
      t.remove();
    }
  });

  it('a file that is not a database is refused', async () => {
    const t = tempDir('hookbucket-reads-junk-');
    try {
      writeFileSync(t.db, 'not a database, just some text that is long enough to have a header '.repeat(20));
      const { loadConfig } = await import('../../src/config/config.js');
      const e = await failure(openStoreReads(loadConfig({}, {}, { db: t.db, logLevel: 'silent' }), { budgetMs: 1_000 }));
      assert.ok(e.isAppError);
      assert.equal(e.code, 'storage_error');
    } finally {
      t.remove();
    }
  });
});

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import BetterSqlite3 from 'better-sqlite3';
import { sql } from 'kysely';
import { migrationProvider as sqliteMigrations } from '../../../src/store/migrations/sqlite/index.js';
import { migrationProvider as pgMigrations } from '../../../src/store/migrations/postgres/index.js';
import { createPgPool, migratePostgres, pgKysely, pgStorageErrorCode } from '../../../src/store/postgres/pg-pool.js';
import { migrate as migrateSqlite } from '../../../src/store/sqlite/sqlite-store.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases, type TestDatabase } from '../../helpers/pg-database.js';
import { tempDir } from '../../helpers/temp-dir.js';

const server = pgTestServer();

function pool(url: string, max = 2) {
  return createPgPool({
    url,
    max,
    statementTimeoutMs: 30_000,
    idleInTransactionTimeoutMs: 30_000,
    connectTimeoutMs: 5_000,
    synchronousCommit: 'on',
    applicationName: 'hookbucket-test',
  });
}

test('both dialects have the same migration names', async () => {
  const a = Object.keys(await sqliteMigrations.getMigrations());
  const b = Object.keys(await pgMigrations.getMigrations());
  assert.deepEqual(b, a);
});

describe('PostgreSQL migrations', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
  let dbs: TestDatabase[] = [];
  before(async () => {
    await sweepStaleTestDatabases(server!);
  });
  after(async () => {
    for (const d of dbs) await d.drop();
    dbs = [];
  });

  test('reach the same tables and columns as SQLite, with bytea, double precision and numbers', async () => {
    const tdb = await createTestDatabase(server!);
    dbs.push(tdb);
    const p = pool(tdb.url);
    const db = pgKysely(p);
    try {
      await migratePostgres(db);
      const pgCols = await sql<{ table_name: string; column_name: string; data_type: string }>`
        select table_name, column_name, data_type from information_schema.columns
        where table_schema = 'public' and table_name not like 'hookbucket_migration%'`.execute(db);

      const t = tempDir();
      const raw = new BetterSqlite3(t.db);
      try {
        await migrateSqlite(raw);
        const tables = raw
          .prepare(
            `select name from sqlite_master where type = 'table' and name not like 'hookbucket_migration%' and name not like 'sqlite_%'`,
          )
          .all() as Array<{ name: string }>;
        const sqliteCols = new Set<string>();
        for (const { name } of tables) {
          for (const c of raw.prepare(`select name from pragma_table_info(?)`).all(name) as Array<{ name: string }>)
            sqliteCols.add(`${name}.${c.name}`);
        }
        const pgSet = new Set(pgCols.rows.map((r) => `${r.table_name}.${r.column_name}`));
        assert.deepEqual([...pgSet].sort(), [...sqliteCols].sort());
      } finally {
        raw.close();
        t.remove();
      }
      const types = new Set(pgCols.rows.map((r) => r.data_type));
      assert.ok(!types.has('real'), 'no float4 column');
      assert.ok(types.has('bytea') && types.has('double precision'));

      const now = 1_764_800_000_123;
      await sql`insert into buckets (name, max_body, created_at, updated_at, retry_budget) values ('b', 1048576, ${now}, ${now}, 0.1)`.execute(
        db,
      );
      const row = (
        await sql<{ created_at: unknown; retry_budget: unknown; n: unknown; s: unknown }>`
        select created_at, retry_budget, (select count(*) from buckets) as n, (select sum(max_body) from buckets) as s from buckets`.execute(
          db,
        )
      ).rows[0]!;
      assert.deepEqual(row, { created_at: now, retry_budget: 0.1, n: 1, s: 1048576 });

      const body = Buffer.from([0, 255, 13, 10, 128]);
      await sql`insert into requests (id, bucket, received_at, method, path, headers, body, size, sha256) values ('r1', 'b', ${now}, 'POST', '', '[]', ${body}, 5, 'x')`.execute(
        db,
      );
      const back = (await sql<{ body: Buffer }>`select body from requests where id = 'r1'`.execute(db)).rows[0]!.body;
      assert.ok(Buffer.isBuffer(back) && back.equals(body));

      // A row whose bucket does not exist is refused (a real foreign key).
      await assert.rejects(
        sql`insert into requests (id, bucket, received_at, method, path, headers, body, size, sha256) values ('r2', 'gone', ${now}, 'POST', '', '[]', ${body}, 5, 'x')`.execute(
          db,
        ),
        (e: unknown) => (e as { code?: string }).code === '23503',
      );
      // Running again is a no-op.
      await migratePostgres(db);
    } finally {
      await db.destroy();
    }
  });

  test('two processes starting at once run each migration once', async () => {
    const tdb = await createTestDatabase(server!);
    dbs.push(tdb);
    const script = fileURLToPath(new URL('./pg-migrate-child.js', import.meta.url));
    const run = () =>
      new Promise<{ code: number | null; out: string }>((resolve) => {
        const child = spawn(process.execPath, [script, tdb.url], { stdio: ['ignore', 'pipe', 'pipe'] });
        let out = '';
        child.stdout.on('data', (d) => (out += d));
        child.stderr.on('data', (d) => (out += d));
        child.on('exit', (code) => resolve({ code, out }));
      });
    const [a, b] = await Promise.all([run(), run()]);
    assert.equal(a.code, 0, a.out);
    assert.equal(b.code, 0, b.out);
    const p = pool(tdb.url);
    const db = pgKysely(p);
    try {
      const rows = (await sql<{ name: string }>`select name from hookbucket_migration order by name`.execute(db)).rows.map((r) => r.name);
      assert.deepEqual(rows, Object.keys(await pgMigrations.getMigrations()));
    } finally {
      await db.destroy();
    }
  });

  test('SQLSTATEs and driver errors map to stable storage codes', () => {
    assert.equal(pgStorageErrorCode({ code: '53100' }), 'storage_full');
    assert.equal(pgStorageErrorCode({ code: '57014' }), 'store_busy');
    assert.equal(pgStorageErrorCode({ code: '40P01' }), 'store_busy');
    assert.equal(pgStorageErrorCode({ code: '57P01' }), 'storage_error');
    assert.equal(pgStorageErrorCode({ code: '08006' }), 'storage_error');
    assert.equal(pgStorageErrorCode({ code: '55000', message: 'database "x" is not currently accepting connections' }), 'storage_error');
    assert.equal(pgStorageErrorCode({ code: '55000', message: 'currval of sequence "s" is not yet defined in this session' }), undefined);
    assert.equal(pgStorageErrorCode({ code: 'ECONNREFUSED' }), 'storage_error');
    assert.equal(pgStorageErrorCode({ code: 'EPIPE' }), 'storage_error');
    assert.equal(pgStorageErrorCode(new Error('Connection terminated unexpectedly')), 'storage_error');
    assert.equal(pgStorageErrorCode({ code: '23505' }), undefined);
    assert.equal(pgStorageErrorCode(new Error('boom')), undefined);
  });
});

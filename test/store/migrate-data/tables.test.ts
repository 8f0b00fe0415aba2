import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import pg from 'pg';
import { OTHER_TABLES, TABLES } from '../../../src/store/migrate-data/tables.js';
import { openSqlite } from '../../../src/store/sqlite/open.js';
import { migrate } from '../../../src/store/sqlite/sqlite-store.js';
import { createPgPool, migratePostgres, pgKysely } from '../../../src/store/postgres/pg-pool.js';
import { REPO } from '../../helpers/imports.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON } from '../../helpers/pg-database.js';
import { tempDir } from '../../helpers/temp-dir.js';

// migrate-data copies what tables.ts lists and nothing else, so a table that a migration adds and
// nobody lists would be lost silently in a migration. These tests fail loudly instead: list the
// new table in TABLES (copied, with its key and order) or OTHER_TABLES (excluded, with a reason).

const listed = new Set([...Object.keys(TABLES), ...Object.keys(OTHER_TABLES)]);

function unlisted(tables: string[]): string[] {
  return tables.filter((t) => !listed.has(t)).sort();
}

describe('migrate-data table plan', () => {
  it('lists exactly the tables of the Database interface in src/store/schema.ts', () => {
    const schema = readFileSync(join(REPO, 'src/store/schema.ts'), 'utf8');
    const body = /export interface Database \{([^}]*)\}/.exec(schema)?.[1];
    assert.ok(body !== undefined, 'interface Database not found in schema.ts');
    const names = [...body.matchAll(/^\s*(\w+)\s*:/gm)].map((m) => m[1]!).sort();
    assert.ok(names.includes('requests') && names.includes('deliveries'), names.join(','));
    assert.deepEqual(Object.keys(TABLES).sort(), names);
  });

  it('gives every excluded table a reason, and every copied one a key and a distinct order', () => {
    const orders = new Set<number>();
    for (const [name, plan] of [...Object.entries(TABLES), ...Object.entries(OTHER_TABLES)]) {
      if (plan.copy) {
        assert.ok(plan.key.length > 0, name);
        assert.ok(!orders.has(plan.order), `${name}: order ${plan.order} used twice`);
        orders.add(plan.order);
      } else {
        assert.ok(plan.reason.length > 10, `${name}: a reason`);
      }
    }
  });

  it('names every table the SQLite migrations create', async () => {
    const t = tempDir();
    const db = openSqlite(t.db, { durability: 'normal', busyTimeoutMs: 1000 });
    try {
      await migrate(db);
      const tables = (
        db.prepare(`select name from sqlite_master where type = 'table' and name not like 'sqlite_%'`).pluck().all() as string[]
      ).sort();
      assert.ok(tables.length >= 10, tables.join(','));
      assert.deepEqual(unlisted(tables), [], 'tables created by the SQLite migrations but not listed in src/store/migrate-data/tables.ts');
    } finally {
      db.close();
      t.remove();
    }
  });

  const server = pgTestServer();
  it('names every table the PostgreSQL migrations create', { skip: server === undefined ? PG_SKIP_REASON : false }, async () => {
    const tdb = await createTestDatabase(server!);
    const pool = createPgPool({
      url: tdb.url,
      max: 1,
      statementTimeoutMs: 60_000,
      idleInTransactionTimeoutMs: 60_000,
      connectTimeoutMs: 10_000,
      synchronousCommit: 'on',
      applicationName: 'test',
    });
    const db = pgKysely(pool);
    try {
      await migratePostgres(db);
      const client = new pg.Client({ connectionString: tdb.url });
      await client.connect();
      const { rows } = await client.query<{ table_name: string }>(
        `select table_name from information_schema.tables where table_schema = 'public'`,
      );
      await client.end();
      const tables = rows.map((r) => r.table_name).sort();
      assert.ok(tables.length >= 10, tables.join(','));
      assert.deepEqual(
        unlisted(tables),
        [],
        'tables created by the PostgreSQL migrations but not listed in src/store/migrate-data/tables.ts',
      );
    } finally {
      await db.destroy();
      await tdb.drop();
    }
  });
});

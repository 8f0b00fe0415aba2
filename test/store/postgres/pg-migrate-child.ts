// Child process of pg-migrations.test.ts: migrates the database named on the command line.
import { createPgPool, migratePostgres, pgKysely } from '../../../src/store/postgres/pg-pool.js';

const pool = createPgPool({
  url: process.argv[2]!,
  max: 2,
  statementTimeoutMs: 60_000,
  idleInTransactionTimeoutMs: 60_000,
  connectTimeoutMs: 10_000,
  synchronousCommit: 'on',
  applicationName: 'hookbucket-migrate-test',
});
const db = pgKysely(pool);
try {
  await migratePostgres(db);
} finally {
  await db.destroy();
}

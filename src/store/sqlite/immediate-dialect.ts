import { CompiledQuery, SqliteDialect, SqliteDriver, type DatabaseConnection, type Driver, type SqliteDialectConfig } from 'kysely';

/**
 * Kysely's SQLite dialect with every `transaction().execute()` opened as BEGIN IMMEDIATE.
 *
 * Kysely opens a plain (deferred) BEGIN: the transaction starts as a reader and asks for the write
 * lock at its first write. In WAL mode, if another connection committed since the read began, that
 * upgrade fails at once with SQLITE_BUSY_SNAPSHOT, busy_timeout or not: 2 of 20 `bucket pause`
 * calls failed so under ingest and drain load (issue 10). BEGIN IMMEDIATE takes the write lock
 * first, waiting in busy_timeout like any other writer, so what the transaction reads is still true
 * when it writes. Every transaction this store runs through Kysely reads and then writes, so all of
 * them take the lock up front; a read-only snapshot uses better-sqlite3's deferred transaction.
 */
export class ImmediateSqliteDialect extends SqliteDialect {
  readonly #config: SqliteDialectConfig;

  constructor(config: SqliteDialectConfig) {
    super(config);
    this.#config = config;
  }

  override createDriver(): Driver {
    return new ImmediateSqliteDriver(this.#config);
  }
}

class ImmediateSqliteDriver extends SqliteDriver {
  override async beginTransaction(connection: DatabaseConnection): Promise<void> {
    await connection.executeQuery(CompiledQuery.raw('begin immediate'));
  }
}

/**
 * A separate process that holds a SQLite lock on a database for a while, as another program
 * sharing the file would (reliability cases 7 and 9):
 *
 *   node sqlite-holder.js <db> write <ms>   BEGIN IMMEDIATE (the write lock), held <ms>, rolled back
 *   node sqlite-holder.js <db> read <ms>    BEGIN + a read (a snapshot that pins the WAL), held <ms>
 *
 * Prints `held` once the lock is taken and `released` when it lets go, then exits.
 */
import BetterSqlite3 from 'better-sqlite3';

const [db, mode, msText] = process.argv.slice(2);
const ms = Number(msText);
if (!db || (mode !== 'write' && mode !== 'read') || !Number.isFinite(ms) || ms < 0 || ms > 600_000) {
  process.stderr.write('usage: sqlite-holder.js <db> write|read <ms ≤ 600000>\n');
  process.exit(2);
}
const conn = new BetterSqlite3(db, { fileMustExist: true, timeout: 10_000 });
if (mode === 'write') {
  conn.exec('BEGIN IMMEDIATE');
} else {
  conn.exec('BEGIN');
  // The snapshot starts at the first read, not at BEGIN.
  conn.prepare('select count(*) from requests').get();
}
process.stdout.write('held\n');
setTimeout(() => {
  conn.exec('ROLLBACK');
  conn.close();
  process.stdout.write('released\n', () => process.exit(0));
}, ms);

/**
 * A separate process that holds a PostgreSQL lock a writer needs, as another program sharing the
 * database would (reliability case 7p):
 *
 *   node pg-holder.js <url> <ms>   BEGIN; LOCK TABLE requests IN EXCLUSIVE MODE; held <ms>; ROLLBACK
 *
 * EXCLUSIVE conflicts with the ROW EXCLUSIVE lock every INSERT takes, and lets plain reads go on.
 * Prints `held` once the lock is taken and `released` when it lets go, then exits.
 */
import pg from 'pg';

const [url, msText] = process.argv.slice(2);
const ms = Number(msText);
if (!url || !Number.isFinite(ms) || ms < 0 || ms > 600_000) {
  process.stderr.write('usage: pg-holder.js <postgres url> <ms ≤ 600000>\n');
  process.exit(2);
}
const c = new pg.Client({ connectionString: url });
await c.connect();
await c.query('begin');
await c.query('lock table requests in exclusive mode');
process.stdout.write('held\n');
setTimeout(() => {
  void c
    .query('rollback')
    .then(() => c.end())
    .then(() => process.stdout.write('released\n', () => process.exit(0)));
}, ms);

import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { BIN, runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/temp-dir.js';

/** Senders on loopback, each one request at a time. */
const SENDERS = 8;
/** The load stops at this many requests even if the backup is still running. */
const MAX_REQUESTS = 20_000;
/** Acknowledged requests before the backup starts. */
const BEFORE_BACKUP = 500;

/** The `path` of every request of `bucket` in a SQLite file (read-only). */
function pathsIn(file: string, bucket: string): Set<string> {
  const db = new BetterSqlite3(file, { readonly: true, fileMustExist: true });
  try {
    return new Set(db.prepare('select path from requests where bucket = ?').pluck().all(bucket) as string[]);
  } finally {
    db.close();
  }
}

describe('hookbucket backup while serve takes ingest load', () => {
  let s: TestServer;
  before(async () => {
    s = await startTestServer();
  });
  after(async () => {
    await s.stop();
  });

  it('copies every request acknowledged before it started, checks the copy, and ingest goes on meanwhile', async () => {
    assert.equal((await runCli(['--db', s.db, 'bucket', 'create', 'load'])).code, 0);
    let stop = false;
    let sent = 0;
    /** Paths acknowledged (200), in the order the acks arrived. */
    const acked: string[] = [];
    let failed = 0;
    const sender = async () => {
      while (!stop && sent < MAX_REQUESTS) {
        const path = `/e/${sent++}`;
        try {
          const res = await fetch(`${s.url}/b/load${path}`, {
            method: 'POST',
            body: `event ${path} `.repeat(20),
            headers: { 'content-type': 'text/plain' },
          });
          await res.arrayBuffer();
          if (res.status === 200) acked.push(path);
          else failed++;
        } catch {
          failed++;
        }
      }
    };
    const load = Promise.all(Array.from({ length: SENDERS }, sender));
    const file = join(s.dir, 'backup.db');
    let ackedBefore: string[];
    let ackedDuring: number;
    let r: Awaited<ReturnType<typeof runCli>>;
    try {
      while (acked.length < BEFORE_BACKUP && sent < MAX_REQUESTS) await new Promise((res) => setTimeout(res, 10));
      // Every ack that has arrived when the command is started: the copy's snapshot begins later.
      ackedBefore = [...acked];
      r = await runCli(['--db', s.db, 'backup', file, '--json']);
      ackedDuring = acked.length - ackedBefore.length;
    } finally {
      stop = true;
      await load;
    }
    assert.equal(r.code, 0, r.stderr);
    assert.equal(failed, 0);
    const out = r.json();
    assert.deepEqual(Object.keys(out).sort(), ['bytes', 'database', 'duration_ms', 'integrity', 'migration', 'path']);
    assert.equal(out.path, file);
    assert.equal(out.integrity, 'ok');
    assert.equal(out.bytes, statSync(file).size);
    assert.match(out.migration, /^\d{4}-\d{2}-\d{2}T\d{2}-/);
    assert.ok(sent < MAX_REQUESTS, 'the load ran out before the backup finished');
    // The backup ran under load: requests were acknowledged while it copied.
    assert.ok(ackedDuring > 0, 'no request was acknowledged while the backup ran');
    const inCopy = pathsIn(file, 'load');
    const missing = ackedBefore.filter((p) => !inCopy.has(p));
    assert.deepEqual(missing, [], `${missing.length} of ${ackedBefore.length} acknowledged requests are not in the copy`);
    assert.equal(statSync(file).mode & 0o777, 0o600);
    assert.deepEqual(
      readdirSync(s.dir).filter((f) => f.includes('.partial-')),
      [],
    );
    // The copy is a database hookbucket opens as it is.
    const list = await runCli(['--db', file, 'bucket', 'list', '--json']);
    assert.equal(list.code, 0, list.stderr);
  });
});

describe('hookbucket backup refusals', () => {
  const t = tempDir();
  const run = (...args: string[]) => runCli(['--db', t.db, ...args]);
  before(async () => {
    assert.equal((await run('bucket', 'create', 'a')).code, 0);
  });
  after(() => t.remove());

  it('refuses to overwrite without --force, replaces with it', async () => {
    const file = join(t.dir, 'exists.db');
    writeFileSync(file, 'not a database');
    const r = await run('backup', file);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error \[target_exists\]: .* exists; pass --force/);
    assert.equal(readFileSync(file, 'utf8'), 'not a database');
    const forced = await run('backup', file, '--force');
    assert.equal(forced.code, 0, forced.stderr);
    assert.match(forced.text, /^backed up .* to .*exists\.db: .* integrity ok, migration \d{4}-/);
    assert.deepEqual(pathsIn(file, 'a'), new Set());
  });

  it('never replaces a database in use (one with -wal beside it), even with --force', async () => {
    const file = join(t.dir, 'live.db');
    writeFileSync(file, 'x');
    writeFileSync(`${file}-wal`, '');
    const r = await run('backup', file, '--force');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error \[target_exists\]: .*live\.db-wal exists/);
    assert.equal(readFileSync(file, 'utf8'), 'x');
  });

  it('refuses the database itself as the target', async () => {
    const r = await run('backup', t.db, '--force');
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error \[usage\]: .* is the database itself/);
  });

  it('a missing database is not found (exit 4), and is not created', async () => {
    const missing = join(t.dir, 'missing.db');
    const r = await runCli(['--db', missing, 'backup', join(t.dir, 'm.db')]);
    assert.equal(r.code, 4);
    assert.match(r.stderr, /^error \[not_found\]: database .*missing\.db not found/);
    assert.equal(existsSync(missing), false);
    assert.equal(existsSync(join(t.dir, 'm.db')), false);
  });

  it('a missing folder is not found (exit 4)', async () => {
    const r = await run('backup', join(t.dir, 'no', 'such', 'x.db'));
    assert.equal(r.code, 4);
    assert.match(r.stderr, /^error \[not_found\]: folder .* does not exist/);
  });

  it('PostgreSQL: not supported, use pg_dump (exit 2), password redacted', async () => {
    const r = await runCli(['--db', 'postgres://hb:s3cret@127.0.0.1:1/hb', 'backup', join(t.dir, 'pg.db')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error \[backup_unsupported\]: .*use pg_dump/);
    assert.doesNotMatch(r.stderr, /s3cret/);
  });

  it('--api: needs the database (exit 2)', async () => {
    const r = await runCli(['--api', 'http://127.0.0.1:1', 'backup', join(t.dir, 'api.db')]);
    assert.equal(r.code, 2);
    assert.match(r.stderr, /^error \[usage\]: backup needs the database itself/);
  });

  it('SIGTERM before the copy is renamed: exit 143 and no file, no partial file', async () => {
    // A command that is signalled as soon as it starts: the signal arrives during the copy or
    // before it (the command's handler is installed before anything is written), never after the
    // rename, because the rename waits for integrity_check of a copy the test makes large enough.
    const big = tempDir();
    try {
      const db = new BetterSqlite3(big.db);
      db.exec('create table filler(x blob)');
      const insert = db.prepare('insert into filler values (randomblob(65536))');
      db.transaction(() => {
        for (let i = 0; i < 1500; i++) insert.run();
      })();
      db.close();
      const file = join(big.dir, 'copy.db');
      const child = spawn(process.execPath, [BIN, '--db', big.db, 'backup', file], { stdio: ['ignore', 'pipe', 'pipe'] });
      let stderr = '';
      child.stderr.on('data', (d) => (stderr += String(d)));
      const exited = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
      // Wait until the copy has begun (its partial file exists), then stop the command.
      const began = Date.now();
      while (!readdirSync(big.dir).some((f) => f.includes('.partial-')) && Date.now() - began < 60_000)
        await new Promise((res) => setTimeout(res, 5));
      child.kill('SIGTERM');
      const code = await exited;
      assert.equal(code, 143, stderr);
      assert.match(stderr, /backup stopped by SIGTERM; the partial copy was removed/);
      assert.equal(existsSync(file), false);
      assert.deepEqual(
        readdirSync(big.dir).filter((f) => f.includes('.partial-')),
        [],
      );
    } finally {
      big.remove();
    }
  });
});

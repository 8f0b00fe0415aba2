import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import pg from 'pg';
import { BIN, runCli } from '../../helpers/cli.js';
import { createTestDatabase, pgTestServer, PG_SKIP_REASON, sweepStaleTestDatabases } from '../../helpers/pg-database.js';
import { tempDir } from '../../helpers/temp-dir.js';
import { until } from '../../helpers/until.js';
import { seedSqlite, sqliteRows, type Seeded } from './fixture.js';

// `hookbucket migrate-data` through the real binary: every row and byte arrives, an in-flight
// delivery arrives as lease recovery would leave it, refusals have their codes and exit codes, an
// interrupted run resumes, and a difference found by the verify exits 3.

type Rows = ReturnType<typeof sqliteRows>;

/** The source's rows as the copy must hold them: the in-flight delivery made due again at runAt. */
function expected(source: Rows, seeded: Seeded, runAt: number): Rows {
  const out: Rows = {};
  for (const [t, rows] of Object.entries(source)) out[t] = new Map([...rows].map(([k, r]) => [k, { ...r }]));
  const d = out.deliveries!.get(JSON.stringify([seeded.inFlight.deliveryId]))!;
  assert.equal(d.state, 'delivering');
  Object.assign(d, {
    state: 'retrying',
    next_attempt_at: runAt,
    lease_until: null,
    lease_attempt: null,
    last_error: 'lease_expired',
    updated_at: runAt,
    settled_at: null,
  });
  const a = out.attempts!.get(JSON.stringify([seeded.inFlight.attemptId]))!;
  assert.equal(a.outcome, null);
  Object.assign(a, {
    outcome: 'lease_expired',
    error_class: 'lease_expired',
    reason: 'lease_expired',
    next_attempt_at: runAt,
    next_why: 'lease_expired',
  });
  // The pacer's last clock reading was the source's: the copy starts from the target's own.
  for (const p of out.bucket_pacer!.values()) p.counted_at = 0;
  return out;
}

function assertSameRows(actual: Rows, want: Rows): void {
  for (const [t, rows] of Object.entries(want)) {
    assert.equal(actual[t]!.size, rows.size, `${t}: row count`);
    for (const [k, r] of rows) assert.deepEqual(actual[t]!.get(k), r, `${t} ${k}`);
  }
}

function sqlite(path: string, fn: (db: BetterSqlite3.Database) => void): void {
  const db = new BetterSqlite3(path);
  try {
    fn(db);
  } finally {
    db.close();
  }
}

describe('hookbucket migrate-data (SQLite)', () => {
  const t = tempDir();
  after(() => t.remove());

  it('copies every row and byte to a new SQLite file, makes the in-flight delivery due again, and verifies', async () => {
    const src = `${t.dir}/main-src.db`;
    const dst = `${t.dir}/main-dst.db`;
    const seeded = await seedSqlite(src);
    const r = await runCli(['migrate-data', '--from', src, '--to', dst, '--batch-rows', '7', '--batch-bytes', '16kb', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const s = r.json();
    assert.equal(s.ok, true);
    assert.equal(s.resumed, false);
    assert.equal(s.leases_recovered, 1);
    assert.deepEqual(s.from, { dialect: 'sqlite', location: src });
    assert.equal(s.tables.find((x: any) => x.table === 'requests').copied, seeded.requests);
    // Every request body and every response body (the open attempt has none).
    assert.deepEqual(
      { checked: s.bodies.checked, mismatched: s.bodies.mismatched },
      { checked: seeded.requests + seeded.responseBodies, mismatched: 0 },
    );
    assertSameRows(sqliteRows(dst), expected(sqliteRows(src), seeded, s.run_at));
    sqlite(dst, (db) => {
      // bucket_due: each bucket's earliest waiting delivery (beta's in-flight one is waiting now).
      const due = db.prepare(`select bucket, next_due_at from bucket_due order by bucket`).all();
      const min = db
        .prepare(`select min(next_attempt_at) from deliveries where bucket = 'beta' and state in ('pending', 'retrying')`)
        .pluck()
        .get();
      assert.deepEqual(due, [
        { bucket: 'alpha', next_due_at: null },
        { bucket: 'beta', next_due_at: min },
      ]);
      // The source's worker lease is not copied; the target's bucket_epoch moved on.
      assert.equal(db.prepare(`select count(*) from worker_lease`).pluck().get(), 0);
      assert.ok((db.prepare(`select value from meta where key = 'bucket_epoch'`).pluck().get() as number) >= 1);
    });
    // The human summary, run again: nothing left to copy, verified again.
    const again = await runCli(['migrate-data', '--from', src, '--to', dst]);
    assert.equal(again.code, 0, again.stderr);
    assert.match(again.text, /^requests +60 +0 +60 +0 +0$/m);
    assert.match(again.text, /verify: ok/);
  });

  it('refuses a source a live worker holds (exit 1, database_in_use) and copies it with --force', async () => {
    const src = `${t.dir}/held-src.db`;
    const dst = `${t.dir}/held-dst.db`;
    await seedSqlite(src, 10);
    sqlite(src, (db) => db.prepare(`update worker_lease set expires_at = ?, heartbeat_at = ?`).run(Date.now() + 3_600_000, Date.now()));
    const r = await runCli(['migrate-data', '--from', src, '--to', dst]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^error \[database_in_use\]: source .*held-src\.db is in use: worker pid 1 on h \(h:1:x\)/);
    const forced = await runCli(['migrate-data', '--from', src, '--to', dst, '--force', '--json']);
    assert.equal(forced.code, 0, forced.stderr);
    assert.equal(forced.json().ok, true);
  });

  it('refuses a source a live receiver (serve --no-worker) beats in, by its workers row', async () => {
    const src = `${t.dir}/recv-src.db`;
    await seedSqlite(src, 10);
    sqlite(src, (db) =>
      db
        .prepare(
          `insert into workers (id, roles, host, pid, info, lease_ms, started_at, heartbeat_at, expires_at) values ('h:9:0000beef', 'receiver', 'h', 9, '{}', null, ?, ?, ?)`,
        )
        .run(Date.now(), Date.now(), Date.now() + 3_600_000),
    );
    const r = await runCli(['migrate-data', '--from', src, '--to', `${t.dir}/recv-dst.db`]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^error \[database_in_use\]: source .*recv-src\.db is in use: receiver pid 9 on h \(h:9:0000beef\)/);
  });

  it('refuses a target holding other data unless --append, and colliding ids under --append; merges rejection counters', async () => {
    const a = `${t.dir}/app-a.db`;
    const b = `${t.dir}/app-b.db`;
    const other = `${t.dir}/app-other.db`;
    await seedSqlite(a, 10);
    await seedSqlite(b, 10, 'b-');
    await seedSqlite(other, 10);
    const refused = await runCli(['migrate-data', '--from', b, '--to', a]);
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^error \[target_not_empty\]: target .* holds buckets or requests already; pass --append/);
    // Same bucket names (alpha, beta) in `other` and `a`: refused at the first page, nothing written.
    const before = sqliteRows(a);
    const collide = await runCli(['migrate-data', '--from', other, '--to', a, '--append']);
    assert.equal(collide.code, 1);
    assert.match(collide.stderr, /^error \[id_collision\]: buckets alpha, beta exist in the target already/);
    assertSameRows(sqliteRows(a), before);
    // Distinct names and ids: appended; the unattributed rejections ('' bucket) are added up.
    const ok = await runCli(['migrate-data', '--from', b, '--to', a, '--append', '--json']);
    assert.equal(ok.code, 0, ok.stderr);
    assert.equal(ok.json().tables.find((x: any) => x.table === 'rejections').merged, 1);
    const after = sqliteRows(a);
    assert.equal(after.buckets!.size, 4);
    assert.equal(after.requests!.size, 20);
    assert.equal(after.rejections!.get(JSON.stringify(['', 'unknown_bucket']))!.count, 6);
  });

  it('resumes an interrupted run from its marker, copying each row once', async () => {
    const src = `${t.dir}/resume-src.db`;
    const dst = `${t.dir}/resume-dst.db`;
    const seeded = await seedSqlite(src, 40);
    // Pages of one row: 2 bucket pages and 1 replay page committed, then stopped (as if killed).
    const cut = await runCli(['migrate-data', '--from', src, '--to', dst, '--batch-rows', '1', '--stop-after-batches', '3']);
    assert.equal(cut.code, 1);
    assert.match(cut.stderr, /stopped after 3 batches/);
    sqlite(dst, (db) => {
      assert.equal(db.prepare(`select count(*) from buckets`).pluck().get(), 2);
      assert.equal(db.prepare(`select count(*) from requests`).pluck().get(), 0);
    });
    const cut2 = await runCli(['migrate-data', '--from', src, '--to', dst, '--batch-rows', '5', '--stop-after-batches', '4']);
    assert.equal(cut2.code, 1);
    // Resumed past buckets and replays: 4 pages of 5 requests.
    sqlite(dst, (db) => assert.equal(db.prepare(`select count(*) from requests`).pluck().get(), 20));
    const rest = await runCli(['migrate-data', '--from', src, '--to', dst, '--json']);
    assert.equal(rest.code, 0, rest.stderr);
    const s = rest.json();
    assert.equal(s.resumed, true);
    assertSameRows(sqliteRows(dst), expected(sqliteRows(src), seeded, s.run_at));
  });

  it('resumes after the process was killed (SIGKILL) in the middle of the requests', async () => {
    const src = `${t.dir}/kill-src.db`;
    const dst = `${t.dir}/kill-dst.db`;
    const seeded = await seedSqlite(src, 400);
    // One request per transaction, each committed with synchronous=FULL: 400 commits, killed once
    // 20 of them are in.
    const child = spawn(process.execPath, [BIN, 'migrate-data', '--from', src, '--to', dst, '--batch-rows', '1'], { stdio: 'ignore' });
    const exited = new Promise<NodeJS.Signals | null>((resolve) => child.on('exit', (_code, signal) => resolve(signal)));
    const copied = () => {
      if (!existsSync(dst)) return 0;
      try {
        const db = new BetterSqlite3(dst, { readonly: true, timeout: 1000 });
        try {
          const row = db.prepare(`select value from meta where key like 'migrate_data/%/cursor/requests/%' escape '\\'`).pluck().get() as
            | number
            | undefined;
          return row ?? 0;
        } finally {
          db.close();
        }
      } catch {
        return 0; // not migrated yet
      }
    };
    await until(() => copied() >= 20, '20 requests copied', 60_000);
    child.kill('SIGKILL');
    assert.equal(await exited, 'SIGKILL');
    const at = copied();
    assert.ok(at >= 20 && at < seeded.requests, `killed after ${at} of ${seeded.requests} requests`);
    sqlite(dst, (db) => {
      assert.equal(db.prepare(`select count(*) from requests`).pluck().get(), at);
      assert.equal(db.prepare(`select count(*) from meta where key like '%/done'`).pluck().get(), 0);
    });
    const rest = await runCli(['migrate-data', '--from', src, '--to', dst, '--json']);
    assert.equal(rest.code, 0, rest.stderr);
    const s = rest.json();
    assert.equal(s.resumed, true);
    assert.equal(s.tables.find((x: any) => x.table === 'requests').copied, seeded.requests - at);
    assertSameRows(sqliteRows(dst), expected(sqliteRows(src), seeded, s.run_at));
  });

  it('exits 3 when the verify finds a body that differs from the source', async () => {
    const src = `${t.dir}/tamper-src.db`;
    const dst = `${t.dir}/tamper-dst.db`;
    await seedSqlite(src, 10);
    assert.equal((await runCli(['migrate-data', '--from', src, '--to', dst])).code, 0);
    let id = '';
    sqlite(dst, (db) => {
      id = db.prepare(`select id from requests where length(body) > 10 order by id limit 1`).pluck().get() as string;
      // One bit flipped in the stored bytes; size and recorded sha256 left as they were.
      db.prepare(
        `update requests set body = (select substr(body, 1, 4) || x'ff' || substr(body, 6) from requests where id = ?) where id = ?`,
      ).run(id, id);
    });
    const r = await runCli(['migrate-data', '--from', src, '--to', dst, '--json']);
    assert.equal(r.code, 3, r.stderr);
    const s = r.json();
    assert.equal(s.ok, false);
    assert.equal(s.bodies.mismatched, 1);
    assert.deepEqual(s.bodies.examples, [`requests ["${id}"] body`]);
    assert.match(r.stderr, /body differs: requests/);
  });

  it('shows help with examples (exit 0); a missing --to or a bad --batch-rows is a usage error (exit 2)', async () => {
    const help = await runCli(['migrate-data', '--help']);
    assert.equal(help.code, 0);
    assert.match(help.text, /Examples:\n {2}\$ hookbucket migrate-data --from /);
    assert.doesNotMatch(help.text, /stop-after-batches/);
    const noTo = await runCli(['migrate-data', '--from', `${t.dir}/a.db`]);
    assert.equal(noTo.code, 2);
    assert.match(noTo.stderr, /^error \[usage\]: required option '--to <path\|url>' not specified/);
    const rows = await runCli(['migrate-data', '--from', `${t.dir}/a.db`, '--to', `${t.dir}/b.db`, '--batch-rows', '0']);
    assert.equal(rows.code, 2);
  });

  it('refuses a source whose schema is behind this program (exit 1, schema_mismatch) and a missing source (exit 4)', async () => {
    const src = `${t.dir}/old-src.db`;
    await seedSqlite(src, 10);
    sqlite(src, (db) => db.prepare(`delete from hookbucket_migration where name = (select max(name) from hookbucket_migration)`).run());
    const r = await runCli(['migrate-data', '--from', src, '--to', `${t.dir}/old-dst.db`]);
    assert.equal(r.code, 1);
    assert.match(r.stderr, /^error \[schema_mismatch\]: source .* its schema is .*: run any command of this version against it once/);
    const missing = await runCli(['migrate-data', '--from', `${t.dir}/nope.db`, '--to', `${t.dir}/x.db`]);
    assert.equal(missing.code, 4);
    assert.match(missing.stderr, /^error \[not_found\]/);
    const same = await runCli(['migrate-data', '--from', src, '--to', `${t.dir}/./old-src.db`]);
    assert.equal(same.code, 2);
    assert.match(same.stderr, /^error \[usage\]: --from and --to name the same database/);
  });
});

const server = pgTestServer();
describe('hookbucket migrate-data (PostgreSQL)', { skip: server === undefined ? PG_SKIP_REASON : false }, () => {
  const t = tempDir();
  before(async () => {
    await sweepStaleTestDatabases(server!);
  });
  after(() => t.remove());

  it('SQLite → PostgreSQL → SQLite keeps every row and byte', async () => {
    const pgA = await createTestDatabase(server!);
    const pgB = await createTestDatabase(server!);
    try {
      const src = `${t.dir}/rt-src.db`;
      const back = `${t.dir}/rt-back.db`;
      const seeded = await seedSqlite(src);
      // Interrupted after 4 pages (buckets, replays, 2 pages of requests), then resumed.
      const cut = await runCli([
        'migrate-data',
        '--from',
        src,
        '--to',
        pgA.url,
        '--batch-rows',
        '7',
        '--batch-bytes',
        '16kb',
        '--stop-after-batches',
        '4',
      ]);
      assert.equal(cut.code, 1, cut.stderr);
      const there = await runCli(['migrate-data', '--from', src, '--to', pgA.url, '--batch-rows', '7', '--batch-bytes', '16kb', '--json']);
      assert.equal(there.code, 0, there.stderr);
      const s = there.json();
      assert.equal(s.ok, true);
      assert.equal(s.resumed, true);
      const reqs = s.tables.find((x: any) => x.table === 'requests');
      assert.ok(reqs.copied > 0 && reqs.copied < seeded.requests, `resumed with ${reqs.copied} requests left`);
      assert.equal(s.to.dialect, 'postgres');
      // Bytes as PostgreSQL stores them (bytea), hashed by the server itself.
      const client = new pg.Client({ connectionString: pgA.url });
      await client.connect();
      try {
        const { rows } = await client.query<{ id: string; sha: string; sha256: string }>(
          `select id, encode(sha256(body), 'hex') as sha, sha256 from requests`,
        );
        assert.equal(rows.length, seeded.requests);
        for (const r of rows) assert.equal(r.sha, r.sha256, r.id);
        const { rows: lease } = await client.query(
          `select state, lease_until, next_attempt_at::float8 as at from deliveries where id = $1`,
          [seeded.inFlight.deliveryId],
        );
        assert.deepEqual(lease, [{ state: 'retrying', lease_until: null, at: s.run_at }]);
      } finally {
        await client.end();
      }
      // PostgreSQL → PostgreSQL, then back to a SQLite file.
      const pgpg = await runCli(['migrate-data', '--from', pgA.url, '--to', pgB.url, '--json']);
      assert.equal(pgpg.code, 0, pgpg.stderr);
      const home = await runCli(['migrate-data', '--from', pgB.url, '--to', back, '--batch-rows', '3', '--json']);
      assert.equal(home.code, 0, home.stderr);
      assert.equal(home.json().leases_recovered, 0);
      assertSameRows(sqliteRows(back), expected(sqliteRows(src), seeded, s.run_at));
      // A tampered PostgreSQL target: the verify of a run again exits 3.
      const c2 = new pg.Client({ connectionString: pgB.url });
      await c2.connect();
      await c2.query(
        `update attempts set response_body = '\\x00'::bytea where id = (select id from attempts where response_body is not null order by id limit 1)`,
      );
      await c2.end();
      const tampered = await runCli(['migrate-data', '--from', pgA.url, '--to', pgB.url, '--json']);
      assert.equal(tampered.code, 3, tampered.stderr);
      assert.equal(tampered.json().bodies.mismatched, 1);
    } finally {
      await pgA.drop();
      await pgB.drop();
    }
  });

  it('refuses a PostgreSQL source a live worker holds (its lease in the server clock), and a PostgreSQL target too', async () => {
    const pgA = await createTestDatabase(server!);
    try {
      const src = `${t.dir}/pg-held-src.db`;
      await seedSqlite(src, 10);
      assert.equal((await runCli(['migrate-data', '--from', src, '--to', pgA.url])).code, 0);
      const c = new pg.Client({ connectionString: pgA.url });
      await c.connect();
      try {
        await c.query(`insert into worker_lease (name, holder, info, acquired_at, heartbeat_at, expires_at)
          values ('drain', 'h:2:y', 'pid 2 on h', 0, 0, floor(extract(epoch from clock_timestamp()) * 1000)::bigint + 3600000)`);
      } finally {
        await c.end();
      }
      const held = await runCli(['migrate-data', '--from', pgA.url, '--to', `${t.dir}/held-back.db`]);
      assert.equal(held.code, 1);
      assert.match(held.stderr, /^error \[database_in_use\]: source postgres:\/\/.* is in use: worker pid 2 on h/);
      // The same lease refuses the database as a target (a worker there would change rows mid-copy).
      const other = `${t.dir}/held-other.db`;
      await seedSqlite(other, 10, 'o-');
      const heldTarget = await runCli(['migrate-data', '--from', other, '--to', pgA.url, '--append']);
      assert.equal(heldTarget.code, 1);
      assert.match(heldTarget.stderr, /^error \[database_in_use\]: target postgres:\/\/.* is in use/);
      const forced = await runCli(['migrate-data', '--from', pgA.url, '--to', `${t.dir}/held-back.db`, '--force', '--json']);
      assert.equal(forced.code, 0, forced.stderr);
      assert.equal(forced.json().ok, true);
    } finally {
      await pgA.drop();
    }
  });
});

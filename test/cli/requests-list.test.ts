import assert from 'node:assert/strict';
import { randomInt } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { UUID } from 'uuidv7';
import { newId } from '../../src/shared/ids.js';
import { createBatchWriter } from '../../src/store/sqlite/ingest-batch.js';
import { openSqlite, type SqliteDb } from '../../src/store/sqlite/open.js';
import { runCli } from '../helpers/cli.js';
import { startTestServer, type TestServer } from '../helpers/server.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * `requests list` filters through the real binary. Requests are stored with ingest's own batch
 * writer (rows exactly as ingest writes them), each at a chosen receipt time with an ingest-like
 * id (UUIDv7 of that ms); delivery outcomes are then set as the drain worker and a replay leave them.
 */
describe('requests list filters and pagination (real binary)', () => {
  const t = tempDir();
  const file = ['--db', t.db];
  /** Where the tests' commands go: the file, or a real serve's admin listener on it. */
  let db = file;
  let raw: SqliteDb;
  const now = Date.now();
  const ids: Record<string, string> = {};
  const at: Record<string, number> = {};
  let seq = 0;

  function put(
    bucket: string,
    name: string,
    receivedAt: number,
    r: { method?: string; path?: string; query?: string | null; headers?: string[]; body?: Buffer | string; delivery?: boolean },
  ) {
    const write = createBatchWriter(raw);
    const id = UUID.fromFieldsV7(receivedAt, randomInt(4096), randomInt(2 ** 30), randomInt(2 ** 32)).toString();
    const body = typeof r.body === 'string' ? Buffer.from(r.body) : (r.body ?? Buffer.from('{}'));
    write(
      [
        {
          seq: ++seq,
          id,
          bucket,
          receivedAt,
          method: r.method ?? 'POST',
          path: r.path ?? '/events/charge',
          query: r.query ?? null,
          rawHeaders: r.headers ?? ['Content-Type', 'application/json'],
          body: new Uint8Array(body),
          peer: '127.0.0.1',
          createDelivery: r.delivery ?? true,
          deadline: Date.now() + 5000,
        },
      ],
      [],
    );
    ids[name] = id;
    at[name] = receivedAt;
  }

  /** What the drain worker leaves on the request's current delivery. */
  function outcome(name: string, state: string, attempts: number, lastStatus: number | null) {
    raw
      .prepare('update deliveries set state = ?, attempts = ?, last_status = ? where request_id = ? and latest = 1')
      .run(state, attempts, lastStatus, ids[name]);
  }

  /** What a replay leaves: generation 1 superseded (no longer latest), generation 2 current. */
  function replayed(name: string, gen1Status: number, state: string, lastStatus: number | null) {
    raw
      .prepare(`update deliveries set state = 'superseded', latest = 0, attempts = 3, last_status = ? where request_id = ?`)
      .run(gen1Status, ids[name]);
    raw
      .prepare(
        `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, trigger, created_at, updated_at, last_status, latest)
         select ?, id, bucket, null, 2, ?, 1, received_at, 'replay', received_at, received_at, ?, 1 from requests where id = ?`,
      )
      .run(newId(), state, lastStatus, ids[name]);
  }

  const list = async (...args: string[]) => {
    const r = await runCli([...db, 'requests', 'list', ...args, '--json']);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return r.json<{ requests: Array<Record<string, any>>; next_cursor: string | null }>();
  };
  const names = async (...args: string[]) => {
    const byId = new Map(Object.entries(ids).map(([n, id]) => [id, n]));
    return (await list(...args)).requests.map((r) => byId.get(r.id));
  };

  before(async () => {
    for (const args of [
      ['bucket', 'create', 'a', '--destination', 'http://127.0.0.1:9/unused'],
      ['bucket', 'create', 'p', '--destination', 'http://127.0.0.1:9/unused'],
      ['bucket', 'create', 'other', '--destination', 'http://127.0.0.1:9/unused'],
    ]) {
      const r = await runCli([...file, ...args]);
      assert.equal(r.code, 0, r.stderr);
    }
    raw = openSqlite(t.db, { durability: 'normal', busyTimeoutMs: 5000 });
    const min = 60_000;
    put('a', 'r1', now - 180 * min, {
      headers: ['Content-Type', 'application/json', 'X-Event', 'charge.succeeded', 'x-event', 'dup'],
      body: '{"customer":"cus_1"}',
    });
    put('a', 'r2', now - 120 * min, {
      method: 'PUT',
      path: '/events/refund/deep',
      headers: ['X-Event', 'refund'],
      body: '{"customer":"cus_2"}',
    });
    put('a', 'r3', now - 50 * min, {
      path: '',
      headers: ['Content-Type', 'application/octet-stream'],
      body: Buffer.from([0xff, 0x00, 0xfe, ...Buffer.from('needle'), 0x80]),
    });
    put('a', 'r4', now - 10 * min, { method: 'GET', query: 'x=1', body: '' });
    put('a', 'r7', now - 5 * min, { delivery: false, body: '{"customer":"cus_7"}' });
    put('a', 'r5', now - 2 * min, {});
    put('a', 'r6', now - 1 * min, {});
    put('other', 'o1', now - 1 * min, {});
    outcome('r1', 'delivered', 1, 200);
    outcome('r2', 'failed', 1, 404);
    outcome('r3', 'exhausted', 14, 503);
    outcome('r4', 'retrying', 2, 502);
    replayed('r6', 500, 'delivered', 200);
    outcome('o1', 'failed', 1, 404);

    put('p', 'p1', now - 3 * min, {});
    put('p', 'p2', now - 2 * min, {});
    put('p', 'p3', now - 1 * min, {});
    outcome('p2', 'retrying', 1, 503);
    outcome('p3', 'delivered', 1, 200);
    const paused = await runCli([...file, 'bucket', 'pause', 'p']);
    assert.equal(paused.code, 0, paused.stderr);
  });
  after(() => {
    raw.close();
    t.remove();
  });

  // Every test twice: on the database file (--db), and through a real serve's admin listener on
  // the same file (--api, issue 14 point 6), with the same expectations.
  for (const mode of ['db', 'api'] as const)
    describe(mode === 'db' ? '--db' : '--api', () => {
      let srv: TestServer | undefined;
      before(async () => {
        if (mode === 'db') db = file;
        else {
          srv = await startTestServer({ db: t.db });
          db = ['--api', srv.admin!.url];
        }
      });
      after(async () => {
        await srv?.stop();
      });

      it('lists newest first with the latest generation: state, attempts, last status, generation', async () => {
        const all = await list('a');
        assert.deepEqual(
          all.requests.map((r) => [r.id, r.state, r.attempts, r.last_status, r.generation]),
          [
            [ids.r6, 'delivered', 1, 200, 2],
            [ids.r5, 'pending', 0, null, 1],
            [ids.r7, 'none', 0, null, null],
            [ids.r4, 'retrying', 2, 502, 1],
            [ids.r3, 'exhausted', 14, 503, 1],
            [ids.r2, 'failed', 1, 404, 1],
            [ids.r1, 'delivered', 1, 200, 1],
          ],
        );
        assert.equal(all.next_cursor, null);
        const r4 = all.requests.find((r) => r.id === ids.r4)!;
        assert.deepEqual(
          [r4.method, r4.path, r4.query, r4.size, r4.received_at],
          ['GET', '/events/charge', 'x=1', 0, new Date(at.r4!).toISOString()],
        );

        const human = await runCli([...db, 'requests', 'list', 'a']);
        assert.equal(human.code, 0, human.stderr);
        assert.match(human.text, /^ID\s+RECEIVED\s+METHOD\s+PATH\s+SIZE\s+STATE\s+ATTEMPTS\s+LAST\s+GEN$/m);
        assert.match(human.text, new RegExp(`^${ids.r3}\\s+\\S+\\s+POST\\s+/\\s+10 B\\s+exhausted\\s+14\\s+503\\s+1$`, 'm'));
        assert.match(human.text, new RegExp(`^${ids.r7}\\s.*\\snone\\s+0\\s+-\\s+-$`, 'm'));
      });

      it('--state: each state, comma lists and repeats, none; a superseded generation does not count', async () => {
        assert.deepEqual(await names('a', '--state', 'failed'), ['r2']);
        assert.deepEqual(await names('a', '--state', 'exhausted,failed'), ['r3', 'r2']);
        assert.deepEqual(await names('a', '--state', 'pending', '--state', 'retrying'), ['r5', 'r4']);
        assert.deepEqual(await names('a', '--state', 'delivered'), ['r6', 'r1']);
        assert.deepEqual(await names('a', '--state', 'none'), ['r7']);
        assert.deepEqual(await names('a', '--state', 'none,exhausted,delivered'), ['r6', 'r7', 'r3', 'r1']);
        assert.deepEqual(await names('a', '--state', 'delivering'), []);
        assert.deepEqual(await names('a', '--state', 'held'), [], 'nothing is held in a running bucket');
      });

      it('--state held in a paused bucket is pending and retrying (which then list as held)', async () => {
        const p = await list('p');
        assert.deepEqual(
          p.requests.map((r) => r.state),
          ['delivered', 'held', 'held'],
        );
        assert.deepEqual(await names('p', '--state', 'held'), ['p2', 'p1']);
        assert.deepEqual(await names('p', '--state', 'pending,retrying'), []);
      });

      it('--since/--until: durations before now and ISO times (since inclusive, until exclusive)', async () => {
        assert.deepEqual(await names('a', '--since', '30m'), ['r6', 'r5', 'r7', 'r4']);
        assert.deepEqual(await names('a', '--until', '30m'), ['r3', 'r2', 'r1']);
        assert.deepEqual(await names('a', '--since', '3h30m', '--until', '1h'), ['r2', 'r1']);
        const iso = (ms: number) => new Date(ms).toISOString();
        assert.deepEqual(await names('a', '--since', iso(at.r2!), '--until', iso(at.r4!)), ['r3', 'r2']);
        assert.deepEqual(await names('a', '--since', iso(at.r2! + 1), '--until', iso(at.r4! + 1)), ['r4', 'r3']);
        assert.deepEqual(await names('a', '--state', 'retrying,failed,exhausted', '--since', '1h'), ['r4', 'r3']);
      });

      it('--method, --path glob, --header, --search, --status, --id', async () => {
        assert.deepEqual(await names('a', '--method', 'get'), ['r4']);
        assert.deepEqual(await names('a', '--method', 'PUT,GET'), ['r4', 'r2']);
        assert.deepEqual(await names('a', '--path', '/events/*'), ['r6', 'r5', 'r7', 'r4', 'r1'], '* stops at /');
        assert.deepEqual(await names('a', '--path', '/events/**'), ['r6', 'r5', 'r7', 'r4', 'r2', 'r1']);
        assert.deepEqual(await names('a', '--path', '/events/re?und/*'), ['r2']);
        assert.deepEqual(await names('a', '--path', '/'), ['r3'], 'no sub-path matches /');
        assert.deepEqual(await names('a', '--header', 'x-EVENT=charge.succeeded'), ['r1'], 'name in any case');
        assert.deepEqual(await names('a', '--header', 'X-Event=Charge.succeeded'), [], 'value exact');
        assert.deepEqual(await names('a', '--header', 'X-Event=dup', '--header', 'X-Event=charge.succeeded'), ['r1'], 'repeated: all');
        assert.deepEqual(await names('a', '--header', 'X-Event=dup', '--header', 'X-Event=refund'), []);
        assert.deepEqual(await names('a', '--search', 'cus_2'), ['r2']);
        assert.deepEqual(await names('a', '--search', 'needle'), ['r3'], 'inside a binary body');
        assert.deepEqual(await names('a', '--search', 'CUS_2'), [], 'case-sensitive');
        assert.deepEqual(await names('a', '--status', '5xx'), ['r4', 'r3'], "the latest generation's status, not a superseded one's");
        assert.deepEqual(await names('a', '--status', '404'), ['r2']);
        assert.deepEqual(await names('a', '--status', '2xx'), ['r6', 'r1']);
        assert.deepEqual(await names('a', '--state', 'exhausted,retrying', '--status', '503'), ['r3']);
        assert.deepEqual(
          await names('a', '--id', `${ids.r1},${ids.r3}`, '--id', ids.o1!),
          ['r3', 'r1'],
          "another bucket's id is not listed",
        );
        assert.deepEqual(await names('other', '--status', '404'), ['o1']);
      });

      it('--limit and --cursor walk every page once; the more: hint repeats the filter', async () => {
        const all = (await list('a')).requests.map((r) => r.id);
        const seen: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const page: { requests: Array<Record<string, any>>; next_cursor: string | null } = await list(
            'a',
            '--limit',
            '2',
            ...(cursor ? ['--cursor', cursor] : []),
          );
          seen.push(...page.requests.map((r) => r.id));
          cursor = page.next_cursor;
          pages++;
        } while (cursor && pages < 10);
        assert.deepEqual(seen, all);
        assert.equal(pages, 4);

        const filtered = await list('a', '--state', 'delivered,failed,exhausted', '--limit', '2');
        assert.deepEqual(
          filtered.requests.map((r) => r.id),
          [ids.r6, ids.r3],
        );
        assert.equal(filtered.next_cursor, ids.r3);
        const rest = await list('a', '--state', 'delivered,failed,exhausted', '--limit', '2', '--cursor', filtered.next_cursor!);
        assert.deepEqual(
          rest.requests.map((r) => r.id),
          [ids.r2, ids.r1],
        );
        assert.equal(rest.next_cursor, null, 'an exactly full last page has no next cursor');

        const human = await runCli([
          ...db,
          'requests',
          'list',
          'a',
          '--state',
          'delivered,failed,exhausted',
          '--header',
          'Content-Type=application/json',
          '--limit',
          '1',
        ]);
        assert.equal(human.code, 0, human.stderr);
        const hint = /^more: (.*)$/m.exec(human.text)?.[1];
        assert.ok(hint, human.text);
        assert.match(
          hint,
          /^hookbucket requests list a --state delivered,failed,exhausted --header Content-Type=application\/json --limit 1 --cursor \S+$/,
        );
        const next = await runCli([...db, ...hint.split(' ').slice(1), '--json']);
        assert.equal(next.code, 0, next.stderr);
        assert.deepEqual(
          next.json().requests.map((r: { id: string }) => r.id),
          [ids.r1],
        );
      });

      it('refuses bad filters with exit 2 and an unknown bucket with 4', async () => {
        for (const args of [
          ['--state', 'bogus'],
          ['--since', '5'],
          ['--since', 'yesterday'],
          ['--status', '6xx'],
          ['--status', '99'],
          ['--header', 'no-equals'],
          ['--header', 'bad name=x'],
          ['--method', 'G T'],
          ['--cursor', 'not-an-id'],
          ['--id', 'x'],
          ['--since', '1h', '--until', '2h'],
          ['--search', ''],
        ]) {
          const r = await runCli([...db, 'requests', 'list', 'a', ...args]);
          assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
        }
        const missing = await runCli([...db, 'requests', 'list', 'nope', '--state', 'failed']);
        assert.equal(missing.code, 4);
        assert.match(missing.stderr, /not_found/);
      });
    });
});

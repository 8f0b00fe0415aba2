import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { BIN, runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { until } from '../helpers/until.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

// The main story, as a user would run it: the consumer breaks, deliveries exhaust on a short
// schedule, the consumer is fixed, `replay --state exhausted --yes --wait` delivers them all, and
// `requests show` displays generation 1's failed attempts and generation 2's success. Through the
// real binary, against a real server (with its worker) and a consumer on loopback. Run twice: on
// the database file (--db) and through the server's admin listener (--api, issue 14 point 6).

for (const mode of ['db', 'api'] as const)
  describe(`replay through the CLI (${mode === 'db' ? '--db' : '--api'})`, () => {
    let server: TestServer;
    let consumer: Consumer;
    let db: string[];
    const post = async (bucket: string, body: string) => {
      const res = await fetch(`${server.url}/b/${bucket}/hook`, { method: 'POST', body, headers: { 'content-type': 'application/json' } });
      assert.equal(res.status, 200);
      return ((await res.json()) as { id: string }).id;
    };
    const states = async (bucket: string) =>
      (await runCli([...db, 'bucket', 'show', bucket, '--json'])).json().states as Record<string, number>;

    before(async () => {
      consumer = await startConsumer({ status: 500, body: 'broken' });
      server = await startTestServer({ worker: true });
      db = mode === 'db' ? ['--db', server.db] : ['--api', server.admin!.url];
      const r = await runCli([
        ...db,
        'bucket',
        'create',
        'shop',
        '--destination',
        `${consumer.url}/webhooks`,
        '--base',
        '50ms',
        '--multiplier',
        '1',
        '--max-attempts',
        '2',
        '--jitter',
        'none',
      ]);
      assert.equal(r.code, 0, r.stderr);
    });
    after(async () => {
      await server.stop();
      await consumer.close();
    });

    it('refuses a bare replay and suggests --state exhausted,failed', async () => {
      const r = await runCli([...db, 'replay', 'shop']);
      assert.equal(r.code, 2);
      assert.match(r.stderr, /--state exhausted,failed/);
    });

    it('replays exhausted requests after the fix and shows both generations', async () => {
      const ids = [await post('shop', '{"n":1}'), await post('shop', '{"n":2}'), await post('shop', '{"n":3}')];
      await until(async () => (await states('shop')).exhausted === 3, 'three exhausted deliveries');

      // Dry run: a count and a sample, nothing sent, nothing changed.
      const received = consumer.received.length;
      const dry = await runCli([...db, 'replay', 'shop', '--state', 'exhausted', '--dry-run', '--json']);
      assert.equal(dry.code, 0, dry.stderr);
      assert.equal(dry.json().count, 3);
      assert.equal(dry.json().sample.length, 3);
      const list = await runCli([...db, 'replays', 'list', '--json']);
      assert.equal(list.json().replays.length, 0);
      assert.equal(consumer.received.length, received);

      consumer.fallback = { status: 200, body: 'fixed' };
      const r = await runCli([...db, 'replay', 'shop', '--state', 'exhausted', '--yes', '--wait', '--timeout', '30s']);
      assert.equal(r.code, 0, r.stderr);
      assert.match(r.text, /3 delivered of 3/);
      assert.deepEqual(await states('shop'), { delivered: 3 });

      const show = await runCli([...db, 'requests', 'show', ids[0]!]);
      assert.equal(show.code, 0, show.stderr);
      assert.match(show.text, /generation 1 → .*\(on arrival\): exhausted, 2 attempt\(s\)/);
      assert.match(show.text, /#1 .*500 → retry/);
      assert.match(show.text, /#2 .*500 exhausted/);
      assert.match(show.text, /generation 2 → .*\(replay [0-9a-f-]+\): delivered, 1 attempt\(s\)/);
      assert.match(show.text, /#1 .*200 delivered/);

      const json = (await runCli([...db, 'requests', 'show', ids[0]!, '--json'])).json();
      assert.deepEqual(
        json.deliveries.map((d: any) => [d.generation, d.state, d.attempt_log.map((a: any) => a.status)]),
        [
          [1, 'exhausted', [500, 500]],
          [2, 'delivered', [200]],
        ],
      );
      assert.equal(json.deliveries[0].attempt_log[1].gap_ms >= 50, true, 'the second attempt waited the 50 ms schedule');
      assert.equal(json.deliveries[0].attempt_log[0].next_why, 'schedule');
    });

    it('prints the replay id without --wait, and replays wait follows it', async () => {
      const id = await post('shop', '{"n":4}');
      await until(async () => (await states('shop')).delivered === 4, 'the fourth delivered');
      consumer.fallback = { status: 404, body: 'gone' };
      const r = await runCli([...db, 'replay', 'shop', '--id', id]);
      assert.equal(r.code, 0, r.stderr);
      const replayId = r.text.trim();
      assert.match(replayId, /^[0-9a-f-]{36}$/);
      const wait = await runCli([...db, 'replays', 'wait', replayId, '--timeout', '30s', '--json']);
      assert.equal(wait.code, 3, 'a failed delivery makes wait exit 3');
      assert.equal(wait.json().progress.failed, 1);
      assert.equal(wait.json().progress.delivered, 0);
      const list = (await runCli([...db, 'replays', 'list', '--json'])).json();
      assert.equal(list.replays[0].id, replayId);
      assert.deepEqual(list.replays[0].selection, { id: [id] });
      consumer.fallback = { status: 200 };
    });

    it('refuses more than 100 without --yes when not at a terminal', async () => {
      await runCli([...db, 'bucket', 'create', 'bulk', '--destination', `${consumer.url}/bulk`]);
      await runCli([...db, 'bucket', 'pause', 'bulk']);
      await Promise.all(Array.from({ length: 101 }, (_, i) => post('bulk', `{"i":${i}}`)));
      const r = await runCli([...db, 'replay', 'bulk', '--all']);
      assert.equal(r.code, 2);
      assert.match(r.stderr, /would replay 101 requests \(more than 100\); add --yes/);
      assert.equal((await runCli([...db, 'replays', 'list', '--bucket', 'bulk', '--json'])).json().replays.length, 0);
      // --all with other selectors is contradictory: a usage error, not a guess.
      const both = await runCli([...db, 'replay', 'bulk', '--all', '--since', '1h', '--dry-run']);
      assert.equal(both.code, 2);
      assert.match(both.stderr, /--all replays every request/);
      // Narrowed to 100 or fewer, no --yes is needed.
      const few = await runCli([...db, 'replay', 'bulk', '--header', 'content-type=text/none', '--dry-run', '--json']);
      assert.equal(few.code, 0, few.stderr);
      assert.equal(few.json().count, 0);
    });

    it('says a paused bucket holds the replay', async () => {
      const r = await runCli([...db, 'replay', 'bulk', '--all', '--yes', '--wait', '--timeout', '1s']);
      assert.equal(r.code, 3);
      assert.match(r.stderr, /bucket bulk is paused: \d+ replay deliveries are held/);
      assert.match(r.text, /remaining \(\d+ held: the bucket is paused\)/);
    });

    it('tails new requests and their outcomes as NDJSON', async () => {
      const child = spawn(process.execPath, [BIN, ...db, 'requests', 'tail', 'shop', '--json', '--count', '2'], {
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      let out = '';
      child.stdout.on('data', (d) => (out += d));
      const exited = new Promise<number>((r) => child.on('exit', (code) => r(code ?? -1)));
      // tail says on stderr when it has taken its starting cursor; only then is a new request "new".
      await new Promise<void>((r) => child.stderr.on('data', (d: Buffer) => /following shop/.test(d.toString()) && r()));
      const id = await post('shop', '{"tail":true}');
      assert.equal(await exited, 0);
      const events = out
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l));
      assert.deepEqual(
        events.map((e) => e.event),
        ['request', 'attempt'],
      );
      assert.equal(events[0].id, id);
      assert.equal(events[1].request_id, id);
      assert.equal(events[1].status, 200);
      assert.equal(events[1].outcome, 'delivered');
    });
  });

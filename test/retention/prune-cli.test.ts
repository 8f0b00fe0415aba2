import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';

// Rows are made by the real ingest batch writer and the real drain worker; prune runs through the
// real CLI binary, whose clock is the wall clock: "old" rows are received 40 days before it,
// "recent" ones an hour before it, so --older-than 30d separates them however long the run takes.

const DAY = 86_400_000;

function byPath(req: IncomingMessage, res: ServerResponse): void {
  res.writeHead(req.url!.endsWith('/nf') ? 404 : req.url!.endsWith('/boom') ? 500 : 200).end();
}

describe('prune through the CLI', () => {
  let b: DrainBench;
  let consumer: Consumer;
  let db: string[];
  const id: Record<string, string> = {};
  const exists = (requestId: string) => b.raw.prepare('select count(*) from requests where id = ?').pluck().get(requestId) === 1;
  const rows = (table: 'requests' | 'deliveries' | 'attempts', requestId: string) =>
    b.raw
      .prepare(`select count(*) from ${table} where ${table === 'requests' ? 'id' : 'request_id'} = ?`)
      .pluck()
      .get(requestId) as number;
  const counts = () =>
    ['requests', 'deliveries', 'attempts'].map((t) => b.raw.prepare(`select count(*) from ${t}`).pluck().get() as number);

  before(async () => {
    b = await drainBench();
    consumer = await startConsumer(byPath);
    db = ['--db', b.db];
    const now = Date.now();
    const schedule = { baseMs: 1000, multiplier: 1, capMs: 1000, maxAttempts: 2, jitter: 'none' as const };
    await b.store.createBucket({ name: 'p', destination: `${consumer.url}/in`, drain: { schedule } });
    await b.store.createBucket({ name: 'archive', destination: null });
    const w = b.worker();
    const one = (bucket: string, path = '/ok') => b.ingest(bucket, { path })[0]!;

    b.clock.set(now - 40 * DAY);
    id.d1 = one('p');
    id.d2 = one('p');
    id.tTo = one('p'); // delivered, but a replay --to staging is still pending
    id.f = one('p', '/nf');
    id.e = one('p', '/boom');
    await w.runOnce(); // d1, d2, tTo delivered; f failed; e retrying
    b.clock.advance(1000);
    await w.runOnce(); // e exhausted

    b.clock.set(now - 3_600_000);
    id.recent = one('p');
    await w.runOnce(); // recent delivered

    b.clock.set(now - 40 * DAY + 2000);
    id.r = one('p', '/boom');
    await w.runOnce(); // r retrying (its first attempt failed); nothing else is due
    id.pending = one('p');
    id.delivering = one('p');
    id.n = one('archive');

    // In flight: an attempt under a lease, as the worker leaves it while the consumer answers.
    b.raw
      .prepare(`update deliveries set state = 'delivering', attempts = 1, lease_until = ? where request_id = ?`)
      .run(now + 60_000, id.delivering);
    // A live replay to another destination (--to): generation 2, not the request's latest to the bucket destination.
    b.raw
      .prepare(
        `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, trigger, created_at, updated_at, latest)
         values ('to-staging', ?, 'p', 'http://staging.invalid/in', 2, 'pending', 0, ?, 'replay', ?, ?, 0)`,
      )
      .run(id.tTo, now, now, now);

    const state = (rid: string) => b.raw.prepare('select state from deliveries where request_id = ? and latest = 1').pluck().get(rid);
    assert.deepEqual(
      [id.d1, id.d2, id.tTo, id.f, id.e, id.r, id.pending, id.delivering, id.recent].map(state),
      ['delivered', 'delivered', 'delivered', 'failed', 'exhausted', 'retrying', 'pending', 'delivering', 'delivered'],
      'the bench made the states this test is about',
    );
  });
  after(async () => {
    await b.close();
    await consumer.close();
  });

  it('--dry-run counts what would go and deletes nothing', async () => {
    const before = counts();
    const r = await runCli([...db, 'prune', '--older-than', '30d', '--dry-run', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const j = r.json();
    assert.equal(j.dry_run, true);
    assert.deepEqual(j.states, ['delivered']);
    assert.equal(j.older_than_ms, 30 * DAY);
    assert.equal(j.requests, 2, 'd1 and d2; not tTo (live --to replay), not recent');
    assert.equal(j.deliveries, 2);
    assert.equal(j.attempts, 2);
    assert.equal(j.kept_live, 1);
    assert.equal(j.reclaimed_bytes, 0);
    assert.deepEqual(j.buckets.p, { requests: 2, bytes: j.bytes, deliveries: 2, attempts: 2, kept_live: 1 });
    assert.deepEqual(counts(), before);
    const human = await runCli([...db, 'prune', '--older-than', '30d', '--dry-run']);
    assert.match(human.text, /^would prune 2 request\(s\) .* delivered, received before .* all buckets$/m);
    assert.match(human.text, /^kept 1 old request\(s\) that still have a live delivery/m);
    assert.deepEqual(counts(), before);
  });

  it('by default removes only old delivered requests, with their deliveries and attempts', async () => {
    const r = await runCli([...db, 'prune', '--older-than', '30d', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const j = r.json();
    assert.equal(j.dry_run, false);
    assert.deepEqual([j.requests, j.deliveries, j.attempts, j.kept_live], [2, 2, 2, 1]);
    assert.equal(j.bytes, 2 * Buffer.byteLength('{"n":1}'));
    for (const gone of [id.d1!, id.d2!]) {
      assert.deepEqual([rows('requests', gone), rows('deliveries', gone), rows('attempts', gone)], [0, 0, 0]);
    }
    for (const kept of [id.tTo, id.f, id.e, id.r, id.pending, id.delivering, id.n, id.recent]) assert.ok(exists(kept!), kept);
    assert.equal(rows('deliveries', id.tTo!), 2, 'the live --to delivery and its request stay whole');
  });

  it('--state names the other terminal states; --bucket keeps it to one bucket', async () => {
    const r = await runCli([...db, 'prune', '--older-than', '30d', '--bucket', 'p', '--state', 'failed,exhausted,none', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const j = r.json();
    assert.deepEqual(j.states, ['failed', 'exhausted', 'none']);
    assert.equal(j.requests, 2, 'f and e');
    assert.equal(j.attempts, 3, 'one 404, two 500s');
    assert.deepEqual(Object.keys(j.buckets), ['p']);
    assert.ok(!exists(id.f!) && !exists(id.e!));
    assert.ok(exists(id.n!), 'archive was not named');

    const none = await runCli([...db, 'prune', '--older-than', '30d', '--state', 'none', '--json']);
    assert.equal(none.json().requests, 1);
    assert.ok(!exists(id.n!));
    assert.ok(exists(id.pending!) && exists(id.tTo!), 'requests with deliveries are not none');
  });

  it('never removes a request with a live delivery, whatever the states and age named', async () => {
    const r = await runCli([...db, 'prune', '--older-than', '1ms', '--state', 'delivered,failed,exhausted,none', '--json']);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(r.json().requests, 1, 'only the recent delivered one is left to go');
    assert.equal(r.json().kept_live, 1, 'tTo: delivered, with a live --to replay');
    const left = b.raw.prepare('select id from requests order by id').pluck().all();
    assert.deepEqual(left, [id.tTo, id.r, id.pending, id.delivering].sort());
    const live = b.raw
      .prepare(
        `select request_id, state, destination from deliveries where state in ('pending', 'retrying', 'delivering') order by request_id, generation`,
      )
      .all();
    assert.equal(live.length, 4, 'every live delivery is still there');
  });

  it('refuses live states, a missing --older-than and an unknown bucket', async () => {
    for (const state of ['pending', 'retrying', 'delivering', 'held', 'delivered,held']) {
      const r = await runCli([...db, 'prune', '--older-than', '30d', '--state', state]);
      assert.equal(r.code, 2, state);
      assert.match(r.stderr, /requests are never pruned/);
    }
    const typo = await runCli([...db, 'prune', '--older-than', '30d', '--state', 'deliverd']);
    assert.equal(typo.code, 2);
    assert.match(typo.stderr, /unknown state "deliverd"/);
    const missing = await runCli([...db, 'prune']);
    assert.equal(missing.code, 2);
    assert.match(missing.stderr, /required option '--older-than <duration>' not specified/);
    const nope = await runCli([...db, 'prune', '--older-than', '30d', '--bucket', 'nope']);
    assert.equal(nope.code, 4);
  });
});

describe('prune gives disk back', () => {
  let b: DrainBench;
  let consumer: Consumer;
  before(async () => {
    b = await drainBench();
    consumer = await startConsumer();
  });
  after(async () => {
    await b.close();
    await consumer.close();
  });

  it('deletes in batches bounded by bytes and reclaims the freed pages with incremental vacuum', async () => {
    await b.store.createBucket({ name: 'big', destination: consumer.url });
    b.clock.set(Date.now() - 40 * DAY);
    // 40 × 512 KiB = 20 MiB of bodies: three 8 MiB-bounded delete transactions.
    const body = Buffer.alloc(512 * 1024, 7);
    for (let i = 0; i < 40; i++) b.ingest('big', { body });
    const w = b.worker();
    while ((await w.runOnce()).started > 0);
    assert.equal(b.raw.prepare(`select count(*) from deliveries where state = 'delivered'`).pluck().get(), 40);
    const pagesBefore = b.raw.pragma('page_count', { simple: true }) as number;

    const r = await runCli(['--db', b.db, 'prune', '--older-than', '30d', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const j = r.json();
    assert.equal(j.requests, 40);
    assert.equal(j.bytes, 40 * body.length);
    assert.ok(j.reclaimed_bytes >= 40 * body.length * 0.9, `reclaimed ${j.reclaimed_bytes}`);
    assert.equal(b.raw.pragma('freelist_count', { simple: true }), 0);
    assert.ok((b.raw.pragma('page_count', { simple: true }) as number) < pagesBefore / 4);
    assert.equal(b.raw.prepare('select count(*) from requests').pluck().get(), 0);
  });
});

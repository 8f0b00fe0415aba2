import assert from 'node:assert/strict';
import type { IncomingMessage, ServerResponse } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { percentile } from '../../src/stats/stats.js';
import { createBatchWriter } from '../../src/store/sqlite/ingest-batch.js';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

// Rows are made by the real ingest batch writer and the real drain worker (driven one pass at a
// time on a manual clock) against a consumer on loopback, then read through the real CLI binary.
// The CLI's window ends at the wall clock's now, so the bench clock is placed relative to it:
// "in the window" is 10 minutes ago, "before it" hours ago, far enough that no test run is slow
// enough to move a row across the edge.

const SLOW_MS = 150;

/** The consumer answers by path: /ok 200, /nf 404, /boom 500 after SLOW_MS. */
function byPath(req: IncomingMessage, res: ServerResponse): void {
  if (req.url!.endsWith('/boom')) {
    setTimeout(() => res.writeHead(500).end('boom'), SLOW_MS);
    return;
  }
  res.writeHead(req.url!.endsWith('/nf') ? 404 : 200).end();
}

describe('stats and health through the CLI', () => {
  let b: DrainBench;
  let consumer: Consumer;
  let db: string[];
  const ids: Record<string, string | undefined> = {};

  before(async () => {
    b = await drainBench();
    consumer = await startConsumer(byPath);
    const now = Date.now();
    const schedule = { baseMs: 1000, multiplier: 1, capMs: 1000, maxAttempts: 2, jitter: 'none' as const };
    await b.store.createBucket({ name: 'shop', destination: `${consumer.url}/in`, drain: { schedule } });
    await b.store.createBucket({ name: 'held', destination: `${consumer.url}/in` });
    await b.store.createBucket({ name: 'store', destination: null });
    const w = b.worker();

    // Before the window: delivered 3 h ago (settled and attempted then, so outside the window).
    b.clock.set(now - 3 * 3_600_000);
    [ids.old] = b.ingest('shop', { path: '/ok' });
    await w.runOnce();

    // In the window: 3 delivered, 1 failed (404), 1 exhausted after 2 attempts (500).
    b.clock.set(now - 10 * 60_000);
    [ids.a1, ids.a2, ids.a3, ids.f, ids.e] = b.ingest(
      'shop',
      { path: '/ok' },
      { path: '/ok' },
      { path: '/ok' },
      { path: '/nf' },
      { path: '/boom' },
    );
    await w.runOnce();
    b.clock.advance(1000);
    await w.runOnce();

    // Waiting for 2 h (stored after the worker's passes, so it stays pending).
    b.clock.set(now - 2 * 3_600_000);
    [ids.p] = b.ingest('shop', { path: '/ok' });

    // A replay superseded s's pending generation 1 (settled, but not counted as settled: it was replaced).
    b.clock.set(now - 10 * 60_000);
    [ids.s] = b.ingest('shop', { path: '/ok' });
    b.raw.prepare(`update deliveries set state = 'superseded', latest = 0, settled_at = ? where request_id = ?`).run(b.clock.now(), ids.s);
    b.raw
      .prepare(
        `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at, trigger, created_at, updated_at, latest)
         values ('replay-gen-2', ?, 'shop', null, 2, 'pending', 0, ?, 'replay', ?, ?, 1)`,
      )
      .run(ids.s, b.clock.now() + 3_600_000, b.clock.now(), b.clock.now());

    // A paused bucket's pending request is held; a bucket without a destination has state none.
    b.ingest('held', {});
    await b.store.pauseBucket('held');
    b.ingest('store', {}, {});

    // Ingest refusals, counted through the batch writer as ingest counts them.
    createBatchWriter(b.raw)(
      [],
      [
        ['shop', 'body_too_large', 2, b.clock.now()],
        ['', 'unknown_bucket', 5, b.clock.now()],
      ],
    );
  });
  after(async () => {
    await b.close();
    await consumer.close();
  });

  // Every test twice: on the database file (--db), and through a real serve's admin listener on
  // the same file (--api, issue 14 point 6), with the same expectations.
  for (const mode of ['db', 'api'] as const)
    describe(mode === 'db' ? '--db' : '--api', () => {
      let srv: TestServer | undefined;
      before(async () => {
        if (mode === 'db') db = ['--db', b.db];
        else {
          srv = await startTestServer({ db: b.db });
          db = ['--api', srv.admin!.url];
        }
      });
      after(async () => {
        await srv?.stop();
      });

      it('stats <bucket> --json: counts by state now, rates and latency over the window', async () => {
        const r = await runCli([...db, 'stats', 'shop', '--window', '1h', '--json']);
        assert.equal(r.code, 0, r.stderr);
        const s = r.json();
        assert.equal(s.bucket, 'shop');
        assert.equal(s.window_ms, 3_600_000);
        assert.equal(Date.parse(s.until) - Date.parse(s.since), 3_600_000);
        // Current totals: old + 3 delivered, failed, exhausted, s (pending generation 2), p.
        assert.deepEqual(
          {
            received: s.received,
            pending: s.pending,
            retrying: s.retrying,
            delivering: s.delivering,
            held: s.held,
            delivered: s.delivered,
            failed: s.failed,
            exhausted: s.exhausted,
            none: s.none,
            superseded: s.superseded,
          },
          { received: 8, pending: 2, retrying: 0, delivering: 0, held: 0, delivered: 4, failed: 1, exhausted: 1, none: 0, superseded: 1 },
        );
        // p has waited 2 h (the oldest waiting; s's generation 2 is younger).
        assert.ok(s.oldest_pending_age_s >= 7200 && s.oldest_pending_age_s < 7200 + 3600, String(s.oldest_pending_age_s));
        // The window: 6 stored in it (not old, not p); 5 settled (not the old one, not the superseded one).
        assert.equal(s.received_in_window, 6);
        assert.equal(s.settled, 5);
        assert.equal(s.success_rate, 3 / 5);
        // 3 × 200, 1 × 404, 2 × 500 (the old attempt is outside the window).
        assert.equal(s.attempts, 6);
        assert.equal(s.attempt_success_rate, 0.5);
        const durations = b.raw
          .prepare(`select duration_ms from attempts where bucket = 'shop' and request_id != ? order by duration_ms`)
          .pluck()
          .all(ids.old) as number[];
        assert.equal(durations.length, 6);
        assert.equal(
          s.latency_p50_ms,
          percentile(
            durations.map((d) => [d, 1]),
            50,
          ),
        );
        assert.equal(s.latency_p50_ms, durations[2]);
        assert.equal(s.latency_p99_ms, durations[5]);
        assert.ok(s.latency_p99_ms >= SLOW_MS, 'the slowest attempts are the 500s the consumer delayed');
        assert.deepEqual(s.rejected, { body_too_large: 2 });
        assert.equal(s.rejected_total, 2);
        assert.equal(s.buckets, undefined, 'per-bucket breakdown only without a bucket');
      });

      it('stats --json without a bucket: every bucket together, refusals naming no bucket included, and each bucket', async () => {
        const r = await runCli([...db, 'stats', '--json']);
        assert.equal(r.code, 0, r.stderr);
        const s = r.json();
        assert.equal(s.bucket, null);
        assert.equal(s.received, 8 + 1 + 2);
        assert.equal(s.held, 1);
        assert.equal(s.pending, 2, "the paused bucket's pending request counts as held only");
        assert.equal(s.none, 2);
        assert.deepEqual(s.rejected, { body_too_large: 2, unknown_bucket: 5 });
        assert.deepEqual(
          s.buckets.map((x: { bucket: string; received: number; held: number; none: number }) => [x.bucket, x.received, x.held, x.none]),
          [
            ['held', 1, 1, 0],
            ['shop', 8, 0, 0],
            ['store', 2, 0, 2],
          ],
        );
        const store = s.buckets.find((x: { bucket: string }) => x.bucket === 'store');
        assert.equal(store.success_rate, null);
        assert.equal(store.latency_p99_ms, null);
      });

      it('stats for people names every field as health does', async () => {
        const r = await runCli([...db, 'stats', 'shop']);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.text, /^shop, window 1h \(/);
        assert.match(r.text, /^ {2}success_rate +0\.6 +3 of 5 delivered$/m);
        assert.match(r.text, /^ {2}exhausted +1$/m);
        assert.match(r.text, /^ {2}rejected_total +2 +body_too_large 2$/m);
      });

      it('stats: a shorter window leaves the older activity out', async () => {
        const s = (await runCli([...db, 'stats', 'shop', '--window', '5m', '--json'])).json();
        assert.equal(s.received_in_window, 0);
        assert.equal(s.settled, 0);
        assert.equal(s.success_rate, null);
        assert.equal(s.attempts, 0);
        assert.equal(s.delivered, 4, 'counts by state are not windowed');
      });

      it('health exits 0 when the expression does not hold, and shows the values it read', async () => {
        const r = await runCli([...db, 'health', 'shop', '--fail-on', 'success_rate < 0.5 || exhausted > 5']);
        assert.equal(r.code, 0, r.stderr);
        assert.match(r.text, /^healthy: success_rate < 0\.5 \|\| exhausted > 5 does not hold$/m);
        assert.match(r.text, /success_rate = 0\.6, exhausted = 1/);
      });

      it('health exits 3 when it holds and prints the comparisons that tripped with their values', async () => {
        const r = await runCli([...db, 'health', 'shop', '--fail-on', 'success_rate < 0.99 || exhausted > 0 || pending > 100']);
        assert.equal(r.code, 3, r.stderr);
        assert.equal(r.stderr, '');
        assert.match(r.text, /^unhealthy: success_rate < 0\.99 \|\| exhausted > 0 \|\| pending > 100$/m);
        const tripped = r.text
          .split('tripped:\n')[1]!
          .trim()
          .split('\n')
          .map((l) => l.trim());
        assert.deepEqual(tripped, ['success_rate < 0.99    (success_rate = 0.6)', 'exhausted > 0    (exhausted = 1)']);
      });

      it('health --json: healthy flag, tripped comparisons and the values read', async () => {
        const r = await runCli([
          ...db,
          'health',
          'shop',
          '--window',
          '1h',
          '--json',
          '--fail-on',
          '!(attempt_success_rate >= 0.9) && rejected.body_too_large > 1',
        ]);
        assert.equal(r.code, 3);
        const h = r.json();
        assert.equal(h.healthy, false);
        assert.equal(h.bucket, 'shop');
        assert.equal(h.window_ms, 3_600_000);
        assert.deepEqual(h.tripped, [
          { condition: 'attempt_success_rate >= 0.9', result: false, values: { attempt_success_rate: 0.5 } },
          { condition: 'rejected.body_too_large > 1', result: true, values: { 'rejected.body_too_large': 2 } },
        ]);
        assert.deepEqual(h.values, { attempt_success_rate: 0.5, 'rejected.body_too_large': 2 });

        const ok = await runCli([...db, 'health', 'shop', '--json', '--fail-on', 'failed > 1']);
        assert.equal(ok.code, 0);
        assert.equal(ok.json().healthy, true);
        assert.deepEqual(ok.json().tripped, []);
      });

      it('health: comparisons with null are false; == null tests for it', async () => {
        const quiet = await runCli([...db, 'health', 'store', '--fail-on', 'success_rate < 0.99']);
        assert.equal(quiet.code, 0, 'nothing settled: not unhealthy');
        const none = await runCli([...db, 'health', 'store', '--fail-on', 'success_rate == null']);
        assert.equal(none.code, 3);
        assert.match(none.text, /success_rate == null {4}\(success_rate = null\)/);
      });

      it('health: all buckets together, with the refusals that named no bucket', async () => {
        const r = await runCli([...db, 'health', '--fail-on', 'held > 0 && rejected.unknown_bucket >= 5']);
        assert.equal(r.code, 3);
        assert.match(r.text, /all buckets, window 1h/);
      });

      it('health exits 2 on a bad expression or a missing --fail-on, 4 on an unknown bucket', async () => {
        const bad: Array<[string[], RegExp]> = [
          [
            ['--fail-on', 'sucess_rate < 0.99'],
            /error \[invalid_option\]: --fail-on: unknown field "sucess_rate" \(did you mean success_rate\?\)/,
          ],
          [['--fail-on', 'exhausted = 0'], /"=" is not a comparison: use "=="[^\n]*\n {2}exhausted = 0\n {12}\^/],
          [['--fail-on', '(exhausted > 0'], /expected "\)"/],
          [['--fail-on', 'exhausted'], /expected a comparison/],
          [[], /required option '--fail-on <expression>' not specified/],
          [['--fail-on', 'exhausted > 0', '--window', 'soon'], /--window/],
        ];
        for (const [args, re] of bad) {
          const r = await runCli([...db, 'health', 'shop', ...args]);
          assert.equal(r.code, 2, `${args.join(' ')}: ${r.stderr}`);
          assert.match(r.stderr, re);
          assert.equal(r.text, '');
        }
        const missing = await runCli([...db, 'health', 'nope', '--fail-on', 'exhausted > 0']);
        assert.equal(missing.code, 4);
        assert.match(missing.stderr, /error \[not_found\]: bucket nope not found/);
        assert.equal((await runCli([...db, 'stats', 'nope'])).code, 4);
      });
    });
});

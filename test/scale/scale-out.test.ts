import assert from 'node:assert/strict';
import { before, describe, it } from 'node:test';
import { PG_SKIP_REASON } from '../helpers/pg-database.js';
import type { HookbucketProcess } from '../reliability/lib/serve-process.js';
import {
  arrivals,
  duplicates,
  maxInWindow,
  pgServer,
  startCluster,
  waitFor,
  wasActive,
  workerIdOf,
  type Arrival,
  type AttemptRow,
  type Cluster,
} from './harness.js';

// Scale-out through the real binary: 2 receivers and 3 workers on one PostgreSQL database, one
// bucket paced at 100/s (burst 1), 1,000 requests, and one worker that has made attempts killed
// with -9 after ~300 arrivals. The rows and the consumer's arrival times must show that nothing
// acknowledged was lost, that duplicates are only the dead worker's in-flight attempts sent again
// after their lease ended, and that the bucket's rate held across the workers.

const BUCKET = 'scale';
const REQUESTS = 1000;
const RATE_PER_S = 100;
const BURST = 1;
const LEASE_MS = 5000; // the workers' --lease
const KILL_AFTER_ARRIVALS = 300;
const RATE_TOLERANCE = 0.02; // ±2%

/** A worker that has made attempts: the one with the most attempts still open (else the most attempts), from attempts.worker_id. */
async function pickVictim(c: Cluster): Promise<HookbucketProcess> {
  const rows = await c.attempts(BUCKET);
  const score = new Map<string, number>();
  for (const a of rows) if (a.worker_id) score.set(a.worker_id, (score.get(a.worker_id) ?? 0) + (a.outcome === null ? 1_000_000 : 1));
  const byId = new Map(c.workers.map((w) => [workerIdOf(w), w]));
  const best = [...score.entries()].sort((a, b) => b[1] - a[1]).find(([id]) => byId.has(id));
  assert.ok(best, `no live worker among those that made attempts (${[...score.keys()].join(', ')})`);
  return byId.get(best[0])!;
}

/** What one run leaves to check: the acks, the consumer's arrivals and the attempt rows. */
interface Run {
  acked: string[];
  list: Arrival[];
  rows: AttemptRow[];
  victimId: string | undefined;
  killedAt: number;
  arrivalsAtKill: number;
  activeAtStart: number;
  settled: boolean;
  killToSettledMs: number;
  totalMs: number;
}

async function runScenario(): Promise<Run> {
  const t0 = Date.now();
  const c = await startCluster();
  try {
    await c.cli(
      'bucket',
      'create',
      BUCKET,
      '--destination',
      `${c.consumer.url}/hook`,
      '--rate',
      `${RATE_PER_S}/s`,
      '--burst',
      String(BURST),
      '--timeout',
      '2s',
    );
    await c.cli('bucket', 'pause', BUCKET);
    await Promise.all([c.startReceivers(2), c.startWorkers(3, ['--lease', `${LEASE_MS}ms`])]);
    const activeAtStart = c.workers.filter(wasActive).length;

    const acks = await c.send(BUCKET, REQUESTS);
    const acked = acks.flatMap((a) => (a.id === undefined ? [] : [a.id]));
    // The rate is read between the 100th and the 900th arrival: those must exist.
    assert.ok(
      acked.length >= 900,
      `only ${acked.length} of ${REQUESTS} acknowledged: ${JSON.stringify(acks.filter((a) => a.id === undefined).slice(0, 5))}`,
    );

    await c.cli('bucket', 'resume', BUCKET);
    await c.consumer.waitFor(KILL_AFTER_ARRIVALS, 30_000);
    const victim = await pickVictim(c);
    const victimId = workerIdOf(victim);
    const arrivalsAtKill = c.consumer.received.length;
    await victim.kill9();
    const killedAt = Date.now();

    const settled = await waitFor(
      async () => {
        const seen = new Set(arrivals(c.consumer).map((a) => a.requestId));
        return acked.every((id) => seen.has(id)) && (await c.unsettled(BUCKET)) === 0 ? true : undefined;
      },
      40_000, // past the kill: the rest at 100/s, and the dead worker's 5 s leases
      100,
    );
    const killToSettledMs = Date.now() - killedAt;
    return {
      acked,
      list: arrivals(c.consumer),
      rows: await c.attempts(BUCKET),
      victimId,
      killedAt,
      arrivalsAtKill,
      activeAtStart,
      settled: settled === true,
      killToSettledMs,
      totalMs: Date.now() - t0,
    };
  } finally {
    await c.close();
  }
}

describe('scale-out on PostgreSQL (2 receivers, 3 workers, the real binary)', {
  skip: pgServer === undefined ? PG_SKIP_REASON : false,
}, () => {
  let run: Run;
  before(
    async () => {
      run = await runScenario();
    },
    { timeout: 120_000 },
  );

  it('runs: 2 receivers, 3 workers, a worker killed -9 after ~300 arrivals, then settles', (t) => {
    const dups = duplicates(run.list);
    const expired = run.rows.filter((a) => a.outcome === 'lease_expired').length;
    t.diagnostic(
      `${run.acked.length}/${REQUESTS} acked; ${run.list.length} arrivals, ${dups} duplicate(s); ${expired} lease_expired of ${run.rows.length} attempts; ` +
        `killed ${run.victimId ?? '?'} after ${run.arrivalsAtKill} arrivals; ${run.activeAtStart} workers active; ` +
        `kill → settled ${run.killToSettledMs} ms; whole run ${run.totalMs} ms`,
    );
    assert.ok(run.settled, 'every acked request arrived and no delivery is left unsettled');
    assert.ok(
      run.rows.every((a) => a.outcome !== null),
      'every attempt closed',
    );
  });

  it('every acknowledged request reached the consumer', () => {
    const seen = new Set(run.list.map((a) => a.requestId));
    const missing = run.acked.filter((id) => !seen.has(id));
    assert.deepEqual(missing, [], `${missing.length} acknowledged request(s) never reached the consumer`);
  });

  it("duplicates are at most the killed worker's in-flight attempts (closed lease_expired)", () => {
    const expired = run.rows.filter((a) => a.outcome === 'lease_expired');
    const dups = duplicates(run.list);
    assert.ok(dups <= expired.length, `${dups} duplicate arrival(s), ${expired.length} lease_expired attempt(s)`);
    const others = expired.filter((a) => a.worker_id !== run.victimId);
    assert.deepEqual(
      others.map((a) => a.worker_id),
      [],
      `lease_expired attempts of workers other than the killed one (${run.victimId})`,
    );
  });

  it('no request arrived twice while one lease held', () => {
    // An arrival of attempt n comes after the lease of every earlier attempt of the request ended
    // (its started_at + the lease: the delivery's lease_until), and no attempt arrives twice.
    const byRequest = new Map<string, AttemptRow[]>();
    for (const a of run.rows) byRequest.set(a.request_id, [...(byRequest.get(a.request_id) ?? []), a]);
    const arrived = new Set<string>();
    for (const a of run.list) {
      const key = `${a.requestId}#${a.attempt}`;
      assert.ok(!arrived.has(key), `attempt ${a.attempt} of ${a.requestId} arrived twice`);
      arrived.add(key);
      for (const earlier of byRequest.get(a.requestId) ?? []) {
        if (earlier.number >= a.attempt) continue;
        // An attempt closed with its outcome (a 5xx, an error) ended before the next was claimed;
        // one still open would be a lease that never ended; one closed lease_expired ended when
        // its lease did.
        assert.notEqual(
          earlier.outcome,
          null,
          `request ${a.requestId} arrived for attempt ${a.attempt} while attempt ${earlier.number} is still open`,
        );
        if (earlier.outcome !== 'lease_expired') continue;
        assert.ok(
          a.at >= earlier.started_at + LEASE_MS,
          `request ${a.requestId}: attempt ${a.attempt} arrived ${a.at - earlier.started_at} ms after attempt ${earlier.number} started, inside its ${LEASE_MS} ms lease`,
        );
      }
    }
  });

  it(`at most rate + burst = ${RATE_PER_S + BURST} attempts started in any 1 s`, (t) => {
    const peak = maxInWindow(
      run.rows.map((a) => a.started_at),
      1000,
    );
    t.diagnostic(`peak ${peak.count} attempts started in the 1 s from ${new Date(peak.at).toISOString()}`);
    assert.ok(
      peak.count <= RATE_PER_S + BURST,
      `${peak.count} attempts started in the 1 s from ${new Date(peak.at).toISOString()} (bound ${RATE_PER_S + BURST})`,
    );
  });

  it(`the rate between the 100th and the 900th arrival is within ±${RATE_TOLERANCE * 100}% of ${RATE_PER_S}/s`, (t) => {
    const sorted = [...run.list].sort((a, b) => a.at - b.at);
    const from = sorted[99]!.at;
    const to = sorted[899]!.at;
    const rate = (800 * 1000) / (to - from);
    // Arrivals per second over each run of 100 arrivals, and the longest pauses: where the rate went.
    const segments = [0, 100, 200, 300, 400, 500, 600, 700, 800].map((i) =>
      ((99 * 1000) / (sorted[i + 99]!.at - sorted[i]!.at)).toFixed(1),
    );
    const gaps = sorted
      .slice(1)
      .map((a, i) => ({ ms: a.at - sorted[i]!.at, arrival: i + 2 }))
      .sort((a, b) => b.ms - a.ms)
      .slice(0, 5);
    const arrivalPeak = maxInWindow(
      sorted.map((a) => a.at),
      1000,
    );
    t.diagnostic(
      `${rate.toFixed(2)}/s; at most ${arrivalPeak.count} arrivals in any 1 s; per 100 arrivals ${segments.join(' ')}; longest pauses ${gaps.map((g) => `${g.ms} ms before #${g.arrival}`).join(', ')}`,
    );
    // Both bounds are asserted. The upper one holds whatever the load: tokens are taken on the
    // database clock, one interval apart, and each attempt waits for its token's time. The lower
    // one needs claims on time: workers take tokens up to a horizon ahead (src/drain/worker.ts
    // CLAIM_HORIZON_MS; 90 ms here, concurrency 10 less one token), so a claim late by less than
    // that loses none, and the killed worker costs the up to 5 tokens it may hold ahead (0.6% of
    // the 800). Run alone, as CI's `npm run test:scale` step runs it, ten runs on 2026-12-07 gave
    // 98.51 to 99.85/s. With other jobs sharing the 2 cores (load average 5 to 8, 2026-12-05),
    // claims came later than the horizon in 4 of 10 runs and the rate sagged to 85.5-96.1/s: this
    // test needs the cores to itself (docs/reliability.md "Several workers on PostgreSQL").
    assert.ok(
      Math.abs(rate - RATE_PER_S) <= RATE_PER_S * RATE_TOLERANCE,
      `sustained rate ${rate.toFixed(2)}/s, outside ${RATE_PER_S}/s ±${RATE_TOLERANCE * 100}%`,
    );
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { allowedRetries, BUDGET_WINDOW_SECONDS, type RetryBudgetConfig } from '../../src/policy/retry-budget.js';
import { PG_SKIP_REASON } from '../helpers/pg-database.js';
import { pgServer, startCluster, waitFor, wasActive, type AttemptRow } from './harness.js';

// A bucket's retry budget bounds its retries as a whole, however many workers retry: 3 workers, a
// consumer that always answers 500, a schedule that would retry every 200 ms, and a small budget.
//
// The bound, from src/policy/retry-budget.ts: before a retry starts at `now`, the retries already
// started in the 60 whole seconds ending with now's second must be below
// allowedRetries(config, first attempts in those seconds) = floor(fraction × firsts + floor × 60).
// So for every retry r, the retries started up to r within r's window, r included, are at most
// allowedRetries of the first attempts started in that window. The test lasts well under 60 s, so
// the whole run is one window: with 40 first attempts, a 0.1 budget and a floor of 0.05/s the
// bucket gets floor(4 + 3) = 7 retries, where the schedule alone would make hundreds.

const BUCKET = 'budget';
const REQUESTS = 40;
const BUDGET: RetryBudgetConfig = { fraction: 0.1, floorPerSecond: 0.05 };
const BASE_MS = 200;
/** After the retries reach the allowance, how long to watch that no more start (many schedule gaps). */
const WATCH_MS = 3000;

/** For each retry, the retries started in its window up to it, and the allowance there; the worst one. */
function worstWindow(rows: readonly AttemptRow[]): { retries: number; allowed: number; at: number } | undefined {
  let worst: { retries: number; allowed: number; at: number } | undefined;
  const retries = rows.filter((a) => a.number > 1);
  for (const r of retries) {
    const second = Math.floor(r.started_at / 1000);
    const inWindow = (a: AttemptRow) => {
      const s = Math.floor(a.started_at / 1000);
      return s > second - BUDGET_WINDOW_SECONDS && s <= second;
    };
    const n = retries.filter((a) => inWindow(a) && a.started_at <= r.started_at).length;
    const allowed = allowedRetries(BUDGET, rows.filter((a) => a.number === 1 && inWindow(a)).length);
    if (!worst || n - allowed > worst.retries - worst.allowed) worst = { retries: n, allowed, at: r.started_at };
  }
  return worst;
}

describe('the retry budget across workers on PostgreSQL (the real binary)', {
  skip: pgServer === undefined ? PG_SKIP_REASON : false,
}, () => {
  it('retries stay within the bucket budget with 3 workers and a consumer that always fails', { timeout: 90_000 }, async (t) => {
    const t0 = Date.now();
    const c = await startCluster({ status: 500, body: 'down' });
    try {
      await c.cli(
        'bucket',
        'create',
        BUCKET,
        '--destination',
        `${c.consumer.url}/hook`,
        '--timeout',
        '2s',
        '--retry-budget',
        String(BUDGET.fraction),
        '--retry-floor',
        String(BUDGET.floorPerSecond),
        '--base',
        `${BASE_MS}ms`,
        '--multiplier',
        '1',
        '--jitter',
        'none',
        '--max-attempts',
        '20',
      );
      await c.cli('bucket', 'pause', BUCKET);
      await Promise.all([c.startReceivers(1), c.startWorkers(3, ['--lease', '5s'])]);
      const acks = await c.send(BUCKET, REQUESTS, 5);
      assert.equal(acks.filter((a) => a.id !== undefined).length, REQUESTS, 'every request acknowledged');
      await c.cli('bucket', 'resume', BUCKET);

      const allowed = allowedRetries(BUDGET, REQUESTS);
      const retriesNow = () => c.scalar('select count(*) from attempts where bucket = $1 and number > 1', [BUCKET]);
      const firstsDone = await waitFor(
        async () =>
          (await c.scalar('select count(*) from attempts where bucket = $1 and number = 1', [BUCKET])) >= REQUESTS ? true : undefined,
        15_000,
      );
      assert.equal(firstsDone, true, 'every first attempt made within 15 s');
      await waitFor(async () => ((await retriesNow()) >= allowed ? true : undefined), 15_000);
      await new Promise((r) => setTimeout(r, WATCH_MS));
      const rows = await c.attempts(BUCKET);
      const firsts = rows.filter((a) => a.number === 1).length;
      const retries = rows.filter((a) => a.number > 1).length;
      const deferred = await c.scalar(`select count(*) from deliveries where bucket = $1 and last_deferral_reason = 'retry_budget'`, [
        BUCKET,
      ]);
      const spanMs = rows.length > 0 ? rows[rows.length - 1]!.started_at - rows[0]!.started_at : 0;
      const worst = worstWindow(rows);
      const outcomes: Record<string, number> = {};
      for (const a of rows) {
        const key = `${a.number > 1 ? 'retry' : 'first'} ${a.outcome}`;
        outcomes[key] = (outcomes[key] ?? 0) + 1;
      }
      t.diagnostic(
        `${firsts} first attempts, ${retries} retries (allowed ${allowedRetries(BUDGET, firsts)}); worst window ${JSON.stringify(worst)}; ` +
          `${deferred} deliveries last deferred for the budget; ${c.workers.filter(wasActive).length} worker(s) active; attempts span ${spanMs} ms (${JSON.stringify(outcomes)}); ${Date.now() - t0} ms`,
      );
      assert.ok(
        spanMs < (BUDGET_WINDOW_SECONDS - 1) * 1000,
        `the attempts span ${spanMs} ms: more than one window, the bound below would not be the whole story`,
      );
      assert.equal(firsts, REQUESTS, 'one first attempt per request');
      assert.ok(
        worst !== undefined && worst.retries <= worst.allowed,
        `${worst?.retries} retries started in one window where ${worst?.allowed} are allowed`,
      );
      // The budget, not the schedule, was the limit: it was used up, and retries wait on it.
      assert.equal(retries, allowedRetries(BUDGET, firsts), 'the retries made are exactly the allowance');
      assert.ok(deferred > 0, 'deliveries deferred for the retry budget');
    } finally {
      await c.close();
    }
  });
});

import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { runCli, runInProcess } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

describe('hookbucket schedule through the real binary', () => {
  it('prints the default table, the paper give-up and the expected one under upper jitter', async () => {
    const r = await runCli(['schedule']);
    assert.equal(r.code, 0, r.stderr);
    const rows = r.text
      .split('\n')
      .filter((l) => /^\d+\s/.test(l))
      .map((l) => l.trim().split(/\s+/));
    assert.deepEqual(rows.slice(0, 8), [
      ['1', '-', '0s'],
      ['2', '30s', '30s'],
      ['3', '1m30s', '2m'],
      ['4', '4m30s', '6m30s'],
      ['5', '13m30s', '20m'],
      ['6', '40m30s', '1h00m30s'],
      ['7', '2h01m30s', '3h02m'],
      ['8', '3h', '6h02m'],
    ]);
    assert.deepEqual(rows[13], ['14', '3h', '24h02m']);
    assert.equal(rows.length, 14);
    assert.match(r.text, /give up on paper\s+24h02m/);
    assert.match(r.text, /expected \(upper\)\s+18h01m30s/);
    assert.equal(r.stderr, '', 'no warnings for the defaults');
  });

  it('--json: durations in ms, snake_case', async () => {
    const r = await runCli(['schedule', '--multiplier', '1', '--max-attempts', '5', '--jitter', 'full', '--json']);
    assert.equal(r.code, 0, r.stderr);
    const j = r.json();
    assert.deepEqual(
      j.attempts.map((a: { gap_ms: number | null }) => a.gap_ms),
      [null, 30_000, 30_000, 30_000, 30_000],
    );
    assert.equal(j.give_up_on_paper_ms, 120_000);
    assert.equal(j.expected_give_up_ms, 60_000);
    assert.deepEqual(j.expected_give_up_ms_by_jitter, { full: 60_000, upper: 90_000, none: 120_000 });
    assert.equal(j.jitter, 'full');
    assert.equal(j.cap_ms, 10_800_000);
    assert.equal(j.give_up_ms, null);
    assert.deepEqual(j.warnings, []);
  });

  it('--give-up gives up when the next attempt would fall past it', async () => {
    const j = (await runCli(['schedule', '--give-up', '24h', '--json'])).json();
    assert.equal(j.max_attempts, null);
    assert.equal(j.give_up_ms, 86_400_000);
    assert.equal(j.attempts.length, 13);
    assert.equal(j.give_up_on_paper_ms, 75_720_000); // 21h02m
    assert.equal(j.expected_method, 'estimate');
  });

  it('warns when uncapped or giving up past 7 days', async () => {
    const uncapped = await runCli(['schedule', '--cap', 'none', '--max-attempts', '10']);
    assert.equal(uncapped.code, 0, uncapped.stderr);
    assert.match(uncapped.stderr, /warning: uncapped/);
    const long = await runCli(['schedule', '--give-up', '30d', '--json']);
    assert.equal(long.code, 0, long.stderr);
    assert.match(long.json().warnings.join('\n'), /past 7 days/);
    assert.equal(long.json().cap_ms, 10_800_000);
  });

  it('exits 2 on conflicting or bad options', async () => {
    // A few through the binary (each run is a fresh process, about 0.7 s); the whole table in-process below.
    const cases = [
      ['--max-attempts', '3', '--give-up', '1h'],
      ['--jitter', 'wild'],
      ['--cap', '10s'],
    ];
    const results = await Promise.all(cases.map((args) => runCli(['schedule', ...args])));
    results.forEach((r, i) => {
      assert.equal(r.code, 2, `${cases[i]!.join(' ')}: ${r.stderr}`);
      assert.match(r.stderr, /error/, cases[i]!.join(' '));
    });
    assert.match(results[0]!.stderr, /cannot be used with option '--give-up/);
    assert.match(results[2]!.stderr, /invalid_option/);
  });
});

describe('hookbucket simulate through the real binary', () => {
  const t = tempDir();
  after(() => t.remove());

  it('fixed 30 s: the storm in minute 10, and no drain', async () => {
    const r = await runCli([
      'simulate',
      '--policy',
      'fixed:30s',
      '--arrival',
      '600/m',
      '--outage',
      '10m',
      '--capacity',
      '30/s',
      '--timeout',
      '5s',
      '--duration',
      '120m',
      '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const j = r.json();
    assert.equal(j.minutes.length, 120);
    const m10 = j.minutes[9];
    assert.equal(m10.minute, 10);
    assert.equal(m10.outage, true);
    assert.ok(m10.attempts >= 11_400 && m10.attempts <= 11_700, String(m10.attempts));
    assert.equal(j.backlog_at_fix, 6000);
    assert.equal(j.drain_minute, null);
    assert.equal(j.policy.name, 'fixed:30s');
    assert.equal(j.policy.max_attempts, null);
    assert.equal(j.policy.retry_budget, null);
    assert.equal(j.timeout_ms, 5000);
  });

  it('default policy: about 720 attempts a minute; drains about 50 minutes after the fix; writes a chart', async () => {
    const chart = join(t.dir, 'storm.svg');
    const r = await runCli(['simulate', '--chart', chart]);
    assert.equal(r.code, 0, r.stderr);
    assert.match(r.text, /^MINUTE\s+ARRIVALS\s+ATTEMPTS/m);
    assert.match(r.text, /^10\s+600\s+719\s/m);
    // 119 retries a minute, not 120 (see test/drain/simulate.test.ts): drained in minute 61.
    assert.match(r.text, /drained: the backlog is empty by the end of minute 61, 50m\d\ds after the fix/);
    const svg = readFileSync(chart, 'utf8');
    assert.match(svg, /^<svg xmlns="http:\/\/www.w3.org\/2000\/svg"/);
    assert.equal(svg.match(/<polyline /g)?.length, 3);
    assert.match(svg, /drained \(minute 61\)/);
  });

  it('--json for the default policy, with schedule, budget and rate flags', async () => {
    const r = await runCli([
      'simulate',
      '--duration',
      '30m',
      '--rate',
      '11/s',
      '--burst',
      '2',
      '--max-attempts',
      '8',
      '--jitter',
      'full',
      '--seed',
      '7',
      '--retry-budget',
      '0.2',
      '--retry-floor',
      '30/m',
      '--json',
    ]);
    assert.equal(r.code, 0, r.stderr);
    const j = r.json();
    assert.deepEqual(j.policy, {
      name: 'default',
      base_ms: 30_000,
      multiplier: 3,
      cap_ms: 10_800_000,
      max_attempts: 8,
      give_up_ms: null,
      jitter: 'full',
      retry_budget: 0.2,
      retry_floor_per_s: 0.5,
      rate: '11/s',
      burst: 2,
    });
    assert.equal(j.seed, 7);
    for (const m of j.minutes) assert.ok(m.attempts <= 662, `minute ${m.minute}: ${m.attempts}`);
  });

  it('exits 2 on bad options, and on policy flags with the naive sender', async () => {
    const cases = [
      ['--policy', 'fixed:soon'],
      ['--policy', 'fixed:30s', '--rate', '10/s'],
      ['--duration', '10s'],
    ];
    const results = await Promise.all(cases.map((args) => runCli(['simulate', ...args])));
    for (const [i, r] of results.entries()) assert.equal(r.code, 2, `${cases[i]!.join(' ')}: ${r.stderr}`);
    assert.match(results[1]!.stderr, /--rate shape --policy default only/);
  });

  it('shows help with examples', async () => {
    const [schedule, simulate] = await Promise.all([runCli(['schedule', '--help']), runCli(['simulate', '--help'])]);
    for (const r of [schedule!, simulate!]) {
      assert.equal(r.code, 0);
      assert.match(r.text, /Examples:\n {2}\$ hookbucket /);
    }
  });
});

describe('usage errors exit 2 (in-process, the whole table)', () => {
  const cases: string[][] = [
    ['schedule', '--max-attempts', '3', '--give-up', '1h'],
    ['schedule', '--jitter', 'wild'],
    ['schedule', '--base', 'soon'],
    ['schedule', '--base', '0'],
    ['schedule', '--base', '30'],
    ['schedule', '--cap', '3600'],
    ['schedule', '--multiplier', '0.5'],
    ['schedule', '--multiplier', 'x'],
    ['schedule', '--max-attempts', '0'],
    ['schedule', '--max-attempts', '1001'],
    ['schedule', '--cap', '10s'],
    ['schedule', '--give-up', 'later'],
    ['schedule', '--base', '1s', '--multiplier', '1', '--give-up', '30d'],
    ['simulate', '--policy', 'fixed:soon'],
    ['simulate', '--policy', 'fixed:30'],
    ['simulate', '--outage', '600'],
    ['simulate', '--policy', 'smart'],
    ['simulate', '--policy', 'fixed:30s', '--rate', '10/s'],
    ['simulate', '--policy', 'fixed:30s', '--jitter', 'full'],
    ['simulate', '--policy', 'fixed:30s', '--max-attempts', '3'],
    ['simulate', '--arrival', '10'],
    ['simulate', '--capacity', '0/s'],
    ['simulate', '--timeout', '0'],
    ['simulate', '--duration', '10s'],
    ['simulate', '--duration', '8d'],
    ['simulate', '--burst', '2'],
    ['simulate', '--rate', '10/s', '--burst', '0'],
    ['simulate', '--max-attempts', '3', '--give-up', '1h'],
    ['simulate', '--retry-budget', '-1'],
    ['simulate', '--retry-floor', 'lots'],
    ['simulate', '--seed', 'x'],
    ['simulate', '--arrival', '1000/s', '--duration', '24h'],
  ];
  for (const args of cases) {
    it(args.join(' '), async () => {
      const r = await runInProcess(args);
      assert.equal(r.code, 2, r.stderr);
      assert.match(r.stderr, /error/);
      assert.equal(r.stdout, '');
    });
  }
});

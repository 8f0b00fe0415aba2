import assert from 'node:assert/strict';
import { after, describe, it } from 'node:test';
import { runCli, runInProcess } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

/** The drain settings part of `bucket show --json`, for whole-object comparisons. */
function drainFields(j: Record<string, unknown>) {
  const keys = [
    'rate',
    'burst',
    'concurrency',
    'timeout_ms',
    'schedule',
    'retry_on',
    'retry_budget',
    'retry_floor',
    'forward_path',
    'forward_raw_path',
    'forward_headers',
    'paused',
    'paused_at',
  ];
  return Object.fromEntries(keys.map((k) => [k, j[k]]));
}

const DEFAULTS = {
  rate: null,
  burst: 1,
  concurrency: 10,
  timeout_ms: 10_000,
  schedule: { base_ms: 30_000, multiplier: 3, cap_ms: 10_800_000, max_attempts: 14, give_up_ms: null, jitter: 'upper' },
  retry_on: '5xx,408,425,429,network,timeout,tls',
  retry_budget: 0.1,
  retry_floor: 1,
  forward_path: true,
  forward_raw_path: false,
  forward_headers: [],
  paused: false,
  paused_at: null,
};

describe('bucket drain settings through the real binary', () => {
  const t = tempDir();
  const db = ['--db', t.db];
  const show = async (name: string) => {
    const r = await runCli([...db, 'bucket', 'show', name, '--json']);
    assert.equal(r.code, 0, r.stderr);
    return r.json();
  };
  const update = async (name: string, ...args: string[]) => {
    const r = await runCli([...db, 'bucket', 'update', name, ...args, '--json']);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return r.json();
  };
  after(() => t.remove());

  it('a bucket created without drain flags states every default', async () => {
    const c = await runCli([...db, 'bucket', 'create', 'plain']);
    assert.equal(c.code, 0, c.stderr);
    const [shown, human] = await Promise.all([show('plain'), runCli([...db, 'bucket', 'show', 'plain'])]);
    assert.deepEqual(drainFields(shown), DEFAULTS);
    assert.match(human.text, /^rate {14}no rate cap$/m);
    assert.match(human.text, /^concurrency {7}10 /m);
    assert.match(human.text, /^timeout {11}10s per attempt$/m);
    assert.match(human.text, /^schedule {10}base 30s, multiplier 3, cap 3h, give up after 14 attempts, jitter upper$/m);
    assert.match(human.text, /^retry on {10}5xx,408,425,429,network,timeout,tls \(default\)$/m);
    assert.match(human.text, /allowed retries per 60 s = 0\.1 × first attempts \+ 1 × 60$/m);
    assert.match(
      human.text,
      /^forward path {6}on: the sub-path after \/b\/<name> is appended without dot-segments or empty segments, never above the destination path$/m,
    );
    assert.match(human.text, /^forward headers {3}none$/m);
    assert.match(human.text, /^paused {12}no$/m);
  });

  it('create with every flag, then show --json round-trips each setting (create --json prints the same)', async () => {
    const c = await runCli([
      ...db,
      'bucket',
      'create',
      'full',
      '--destination',
      'http://127.0.0.1:9/in',
      '--rate',
      '600/m',
      '--burst',
      '5',
      '--concurrency',
      '3',
      '--timeout',
      '45s',
      '--base',
      '1m',
      '--multiplier',
      '2',
      '--cap',
      'none',
      '--give-up',
      '48h',
      '--jitter',
      'full',
      '--retry-on',
      '5xx,429,network',
      '--retry-budget',
      '0.25',
      '--retry-floor',
      '30/m',
      '--no-forward-path',
      '--forward-raw-path',
      '--forward-header',
      'Authorization: Bearer s3cret',
      '--forward-header',
      'X-Env:  prod ',
      '--json',
    ]);
    assert.equal(c.code, 0, c.stderr);
    const expected = {
      rate: '600/m',
      burst: 5,
      concurrency: 3,
      timeout_ms: 45_000,
      schedule: { base_ms: 60_000, multiplier: 2, cap_ms: null, max_attempts: null, give_up_ms: 172_800_000, jitter: 'full' },
      retry_on: '5xx,429,network',
      retry_budget: 0.25,
      retry_floor: 0.5,
      forward_path: false,
      forward_raw_path: true,
      forward_headers: [
        ['Authorization', 'Bearer s3cret'],
        ['X-Env', 'prod'],
      ],
      paused: false,
      paused_at: null,
    };
    assert.deepEqual(drainFields(c.json()), expected);
    const [shown, list, human] = await Promise.all([
      show('full'),
      runCli([...db, 'bucket', 'list', '--json']),
      runCli([...db, 'bucket', 'show', 'full']),
    ]);
    assert.deepEqual(drainFields(shown), expected);
    assert.equal(shown.destination, 'http://127.0.0.1:9/in');

    const listed = list.json().buckets.find((b: { name: string }) => b.name === 'full');
    assert.deepEqual(drainFields(listed), expected, 'bucket list --json uses the same shape');
    assert.match(human.text, /^rate {14}600\/m, burst 5$/m);
    assert.match(human.text, /^schedule {10}base 1m, multiplier 2, no cap, give up after 48h, jitter full$/m);
    assert.match(human.text, /allowed retries per 60 s = 0\.25 × first attempts \+ 0\.5 × 60$/m);
    assert.match(human.text, /^forward path {6}off/m);
    assert.match(human.text, /^forward headers {3}Authorization: \[redacted\]$/m);
    assert.match(human.text, /^ {18}X-Env: prod$/m);
    assert.doesNotMatch(human.text, /s3cret/, 'credential values redacted in human output');
  });

  it("update merges schedule knobs with the bucket's schedule; --max-attempts and --give-up replace each other", async () => {
    assert.equal(
      (
        await runCli([
          ...db,
          'bucket',
          'create',
          'sched',
          '--base',
          '1m',
          '--multiplier',
          '2',
          '--cap',
          '1h',
          '--max-attempts',
          '5',
          '--jitter',
          'none',
        ])
      ).code,
      0,
    );

    const capped = await update('sched', '--cap', '2h');
    assert.deepEqual(capped.schedule, {
      base_ms: 60_000,
      multiplier: 2,
      cap_ms: 7_200_000,
      max_attempts: 5,
      give_up_ms: null,
      jitter: 'none',
    });

    const giveUp = await update('sched', '--give-up', '24h');
    assert.deepEqual(giveUp.schedule, {
      base_ms: 60_000,
      multiplier: 2,
      cap_ms: 7_200_000,
      max_attempts: null,
      give_up_ms: 86_400_000,
      jitter: 'none',
    });

    const jitter = await update('sched', '--jitter', 'upper');
    assert.equal(jitter.schedule.give_up_ms, 86_400_000, 'a give-up stays when not replaced');

    const attempts = await update('sched', '--max-attempts', '7', '--multiplier', '3');
    assert.deepEqual(attempts.schedule, {
      base_ms: 60_000,
      multiplier: 3,
      cap_ms: 7_200_000,
      max_attempts: 7,
      give_up_ms: null,
      jitter: 'upper',
    });

    // The merged schedule is checked: a cap below the bucket's 1m base cannot work.
    const bad = await runCli([...db, 'bucket', 'update', 'sched', '--cap', '30s']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /error \[invalid_option\]: cap must be at least the base \(the schedule would be: base 1m, /);

    // Budget halves merge the same way, and settings not given stay.
    const floor = await update('sched', '--retry-floor', '2');
    assert.equal(floor.retry_budget, 0.1);
    assert.equal(floor.retry_floor, 2);
    const fraction = await update('sched', '--retry-budget', '0.5', '--concurrency', '50', '--timeout', '2s');
    assert.deepEqual([fraction.retry_budget, fraction.retry_floor, fraction.concurrency, fraction.timeout_ms], [0.5, 2, 50, 2000]);
    assert.deepEqual(fraction.schedule, attempts.schedule, 'the refused --cap 30s changed nothing');
  });

  it('--no-rate removes the rate cap; --burst needs a rate, given or already set', async () => {
    assert.equal((await runCli([...db, 'bucket', 'create', 'rated', '--rate', '100/s', '--burst', '5'])).code, 0);

    const burst = await update('rated', '--burst', '8');
    assert.deepEqual([burst.rate, burst.burst], ['100/s', 8], 'the stored rate takes a new burst');

    const none = await update('rated', '--no-rate');
    assert.deepEqual([none.rate, none.burst], [null, 1], 'burst goes back to 1 with the cap');

    // `--no-rate --burst` and `create --burst` without a rate: in the in-process table below.
    const orphan = await runCli([...db, 'bucket', 'update', 'rated', '--burst', '3']);
    assert.equal(orphan.code, 2);
    assert.match(orphan.stderr, /error \[invalid_option\]: --burst needs --rate/);

    const again = await update('rated', '--rate', '10/m');
    assert.deepEqual([again.rate, again.burst], ['10/m', 1]);
  });

  it('--retry-on default goes back to the default set; --forward-path turns appending back on', async () => {
    const custom = await runCli([...db, 'bucket', 'create', 'words', '--retry-on', '4xx,timeout', '--no-forward-path', '--json']);
    assert.equal(custom.code, 0, custom.stderr);
    assert.deepEqual([custom.json().retry_on, custom.json().forward_path], ['4xx,timeout', false]);
    const back = await update('words', '--retry-on', 'default', '--forward-path');
    assert.deepEqual([back.retry_on, back.forward_path], [DEFAULTS.retry_on, true]);
  });

  it('--forward-raw-path on create, --no-forward-raw-path on update; with --no-forward-path it waits', async () => {
    const raw = await runCli([...db, 'bucket', 'create', 'legacy', '--forward-raw-path', '--json']);
    assert.equal(raw.code, 0, raw.stderr);
    assert.deepEqual([raw.json().forward_path, raw.json().forward_raw_path], [true, true]);
    assert.match(
      (await runCli([...db, 'bucket', 'show', 'legacy'])).text,
      /^forward path {6}on, raw: .* \(unsafe behind a path-normalising proxy\)$/m,
    );
    const off = await update('legacy', '--no-forward-path');
    assert.deepEqual([off.forward_path, off.forward_raw_path], [false, true]);
    assert.match(
      (await runCli([...db, 'bucket', 'show', 'legacy'])).text,
      /^forward path {6}off: every request goes to the destination as it is \(raw path kept for when it is on\)$/m,
    );
    const safe = await update('legacy', '--forward-path', '--no-forward-raw-path');
    assert.deepEqual(drainFields(safe), DEFAULTS);
    assert.deepEqual(drainFields(await show('legacy')), DEFAULTS);
  });

  it('pause and resume flip paused and set and clear paused_at; an unknown bucket exits 4', async () => {
    assert.equal((await runCli([...db, 'bucket', 'create', 'hold'])).code, 0);
    const t0 = Date.now();
    const first = await runCli([...db, 'bucket', 'pause', 'hold']);
    assert.equal(first.code, 0, first.stderr);
    assert.equal(first.text, 'paused bucket hold: deliveries held, ingest keeps storing; resume with: hookbucket bucket resume hold\n');

    const p = (await runCli([...db, 'bucket', 'pause', 'hold', '--json'])).json();
    assert.equal(p.paused, true);
    const pausedAt = Date.parse(p.paused_at);
    assert.ok(pausedAt >= t0 - 1000 && pausedAt <= Date.now() + 1000, p.paused_at);

    const [shown, human, again] = await Promise.all([
      show('hold'),
      runCli([...db, 'bucket', 'show', 'hold']),
      runCli([...db, 'bucket', 'pause', 'hold']),
    ]);
    assert.deepEqual(drainFields(shown), { ...DEFAULTS, paused: true, paused_at: p.paused_at });
    assert.match(human.text, new RegExp(`^paused {12}yes, since ${p.paused_at.replace(/\./g, '\\.')}: deliveries held`, 'm'));
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.text, `bucket hold was already paused (since ${p.paused_at})\n`, 'a second pause keeps the first pause time');

    const resumed = await runCli([...db, 'bucket', 'resume', 'hold']);
    assert.equal(resumed.code, 0, resumed.stderr);
    assert.match(resumed.text, /^resumed bucket hold after \S+ paused: the drain continues\n$/);

    const [json, notPaused, ...missing] = await Promise.all([
      runCli([...db, 'bucket', 'resume', 'hold', '--json']),
      runCli([...db, 'bucket', 'resume', 'hold']),
      runCli([...db, 'bucket', 'pause', 'nope']),
      runCli([...db, 'bucket', 'resume', 'nope']),
    ]);
    assert.deepEqual([json.json().paused, json.json().paused_at], [false, null]);
    assert.equal(notPaused.text, 'bucket hold was not paused\n');
    for (const m of missing) {
      assert.equal(m.code, 4, m.stderr);
      assert.match(m.stderr, /error \[not_found\]: bucket nope not found/);
    }
  });

  it("every bucket command's --help shows examples, the new flags among them", async () => {
    const [create, update, pause, resume] = await Promise.all(
      ['create', 'update', 'pause', 'resume'].map((c) => runCli(['bucket', c, '--help'])),
    );
    for (const r of [create!, update!, pause!, resume!]) {
      assert.equal(r.code, 0);
      assert.match(r.text, /Examples:\n {2}\$ hookbucket bucket /);
    }
    for (const flag of [
      '--rate',
      '--burst',
      '--concurrency',
      '--timeout',
      '--base',
      '--give-up',
      '--retry-on',
      '--retry-budget',
      '--retry-floor',
      '--forward-header',
      '--no-forward-path',
    ]) {
      assert.match(create!.text, new RegExp(`^ {2}${flag}\\b`, 'm'), flag);
    }
    assert.match(update!.text, /^ {2}--no-rate /m);
    assert.match(update!.text, /^ {2}--no-forward-header /m);
    assert.match(create!.text, /^ {2}--forward-raw-path +append the sub-path as stored[\s\S]*?unsafe\s+behind/m);
    assert.match(update!.text, /^ {2}--no-forward-raw-path /m);
    assert.doesNotMatch(create!.text, /--no-forward-raw-path/);
    assert.doesNotMatch(create!.text, /--no-rate/, 'create has nothing to remove');
    assert.match(create!.text, /\$ hookbucket bucket create .*--rate 20\/s --burst 5/);
    assert.match(update!.text, /\$ hookbucket bucket update stripe --no-rate/);
  });
});

describe('drain settings in-process: forward-header edits, and the whole table of bad values (exit 2, nothing changed)', () => {
  const t = tempDir();
  const db = ['--db', t.db];
  after(() => t.remove());

  // [arguments after `bucket create|update x`, what stderr says]
  const cases: Array<[string[], RegExp]> = [
    [['--rate', '0/s'], /'--rate <n\/unit>' argument '0\/s' is invalid\. a rate must be greater than 0/],
    [['--rate', '0.0/m'], /a rate must be greater than 0/],
    // No silent units: --timeout 10 used to mean 10 ms.
    [['--timeout', '10'], /'--timeout <duration>' argument '10' is invalid\. 10 has no unit: write 10s or 10ms/],
    [['--base', '30'], /'--base <duration>' argument '30' is invalid\. 30 has no unit: write 30s or 30ms/],
    [['--cap', '3600'], /3600 has no unit: write 3600s or 3600ms/],
    [['--give-up', '100'], /100 has no unit/],
    [['--retain', '30'], /30 has no unit/],
    [['--max-body', '25'], /'--max-body <size>' argument '25' is invalid\. 25 has no unit: write 25B \(bytes\), 25KiB or 25MiB/],
    [['--destination', 'https://user:s3cret@example.test/hook'], /credentials in --forward-header "Authorization: Basic/],
    [['--rate', 'fast'], /a rate like 200\/s/],
    [['--rate', '10/s', '--burst', '0'], /'--burst <n>' argument '0' is invalid/],
    [['--concurrency', '0'], /from 1 to 1000/],
    [['--concurrency', '1001'], /from 1 to 1000/],
    [['--concurrency', '2.5'], /from 1 to 1000/],
    [['--timeout', '0'], /at most 10m/],
    [['--timeout', '10m1s'], /at most 10m/],
    [['--timeout', 'soon'], /at most 10m/],
    [['--base', '0'], /'--base <duration>' argument '0' is invalid/],
    [['--multiplier', '0.5'], /from 1 \(fixed intervals\) to 100/],
    [['--max-attempts', '1001'], /from 1 to 1000/],
    [['--max-attempts', '3', '--give-up', '1h'], /cannot be used with option '--give-up/],
    [['--jitter', 'wild'], /Allowed choices are full, upper, none/],
    [['--cap', '10s'], /invalid_option.*cap must be at least the base/],
    [['--base', '1s', '--multiplier', '1', '--give-up', '30d'], /invalid_option.*more than 10000 attempts/],
    [['--retry-on', '2xx'], /'--retry-on <list>' argument '2xx' is invalid/],
    [['--retry-on', ''], /'--retry-on <list>' argument '' is invalid/],
    [['--retry-on', '5xx,sometimes'], /or default/],
    [['--retry-budget', '-0.1'], /from 0 to 10/],
    [['--retry-budget', '11'], /from 0 to 10/],
    [['--retry-floor', 'lots'], /retries per second/],
    [['--forward-header', 'no colon'], /a header like "Authorization: Bearer abc"/],
    [['--forward-header', 'X Bad: 1'], /not an HTTP token/],
    [['--forward-header', ': empty name'], /not an HTTP token/],
    [['--forward-header', 'X-A: 1\r\nX-Evil: 2'], /no CR, LF, NUL/],
    [['--forward-header', 'X-A: a\nb'], /no CR, LF, NUL/],
    [['--forward-header', 'X-A: a\u0000b'], /no CR, LF, NUL/],
    [['--forward-header', 'Host: evil.example'], /forwarder's to set or refuse/],
    [['--forward-header', 'content-length: 0'], /forwarder's to set or refuse/],
    [['--forward-header', 'Transfer-Encoding: chunked'], /forwarder's to set or refuse/],
    [['--forward-header', 'Connection: close'], /forwarder's to set or refuse/],
    [['--forward-header', 'X-Hookbucket-Attempt: 9'], /forwarder's to set or refuse/],
  ];

  it('create refuses each bad value, and no bucket appears', async () => {
    for (const [args, message] of cases) {
      const r = await runInProcess([...db, 'bucket', 'create', 'bad', ...args]);
      assert.equal(r.code, 2, `${JSON.stringify(args)}: ${r.stderr}`);
      assert.match(r.stderr, message, JSON.stringify(args));
      assert.equal(r.stdout, '');
    }
    const orphan = await runInProcess([...db, 'bucket', 'create', 'bad', '--burst', '3']);
    assert.equal(orphan.code, 2);
    assert.match(orphan.stderr, /error \[invalid_option\]: --burst needs --rate/);
    assert.equal((await runInProcess([...db, 'bucket', 'show', 'bad'])).code, 4);
  });

  it('forward headers: a name given replaces that name, --no-forward-header clears, both together set the list in either order', async () => {
    const headers = async (...args: string[]) => {
      const r = await runInProcess([...db, 'bucket', ...args, '--json']);
      assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
      return JSON.parse(r.stdout).forward_headers as Array<[string, string]>;
    };
    assert.deepEqual(
      await headers('create', 'hdr', '--forward-header', 'X-A: 1', '--forward-header', 'X-B: 2', '--forward-header', 'X-B: 3'),
      [
        ['X-A', '1'],
        ['X-B', '2'],
        ['X-B', '3'],
      ],
      'repeats kept, in order',
    );
    assert.deepEqual(
      await headers('update', 'hdr', '--forward-header', 'x-b: 4'),
      [
        ['X-A', '1'],
        ['x-b', '4'],
      ],
      'X-B replaced by name, X-A kept',
    );
    assert.deepEqual(await headers('update', 'hdr', '--no-forward-header', '--forward-header', 'X-C: 5'), [['X-C', '5']]);
    assert.deepEqual(
      await headers('update', 'hdr', '--forward-header', 'X-D: 6', '--no-forward-header'),
      [['X-D', '6']],
      'order does not matter',
    );
    assert.deepEqual(await headers('update', 'hdr', '--ack-status', '202'), [['X-D', '6']], 'not given: kept');
    assert.deepEqual(await headers('update', 'hdr', '--no-forward-header'), []);
  });

  it('update refuses each bad value and leaves the bucket as it was', async () => {
    assert.equal((await runInProcess([...db, 'bucket', 'create', 'kept', '--rate', '5/s', '--forward-header', 'X-Keep: 1'])).code, 0);
    const before = (await runInProcess([...db, 'bucket', 'show', 'kept', '--json'])).stdout;
    for (const [args, message] of [...cases, [['--no-rate', '--burst', '2'], /invalid_option/] as [string[], RegExp]]) {
      const r = await runInProcess([...db, 'bucket', 'update', 'kept', ...args]);
      assert.equal(r.code, 2, `${JSON.stringify(args)}: ${r.stderr}`);
      assert.match(r.stderr, message, JSON.stringify(args));
    }
    assert.equal((await runInProcess([...db, 'bucket', 'show', 'kept', '--json'])).stdout, before);
  });
});

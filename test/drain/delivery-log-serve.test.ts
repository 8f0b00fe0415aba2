import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { BIN, runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { tempDir } from '../helpers/temp-dir.js';
import { until } from '../helpers/until.js';

// The real `serve`, at the default log level, with a short --log-interval: what it writes about
// deliveries to its log (stderr, pino JSON), read back line by line.

type Line = { level: number; msg: string; bucket?: string; [k: string]: unknown };
const WARN = 40;
const INFO = 30;

describe('serve logs deliveries: failures at warn (counted after the first), a summary per active bucket', () => {
  const t = tempDir();
  let consumer: Consumer;
  before(async () => {
    // /ok delivers, /bad is refused for good (400: failed), /busy asks to wait (429 with Retry-After).
    consumer = await startConsumer((req, res) => {
      if (req.url!.startsWith('/bad')) return void res.writeHead(400).end('no');
      if (req.url!.startsWith('/busy')) return void res.writeHead(429, { 'retry-after': '120' }).end('later');
      res.writeHead(200).end('ok');
    });
    for (const name of ['ok', 'bad', 'busy']) {
      const r = await runCli(['--db', t.db, 'bucket', 'create', name, '--destination', `${consumer.url}/${name}`]);
      assert.equal(r.code, 0, r.stderr);
    }
  });
  after(async () => {
    await consumer.close();
    t.remove();
  });

  it('writes what happened, once per interval, and accounts for every failure', async () => {
    const child = spawn(
      process.execPath,
      [BIN, '--db', t.db, 'serve', '--port', '0', '--host', '127.0.0.1', '--no-admin', '--log-interval', '2s'],
      { stdio: ['ignore', 'ignore', 'pipe'], env: { ...process.env, HOOKBUCKET_ADMIN_TOKEN: '', HOOKBUCKET_LOG_LEVEL: 'info' } },
    );
    const exited = new Promise<number | null>((r) => child.once('exit', (code) => r(code)));
    let stderr = '';
    child.stderr.on('data', (d: Buffer) => (stderr += d.toString('utf8')));
    const lines = (): Line[] =>
      stderr
        .split('\n')
        .filter((l) => l.startsWith('{'))
        .map((l) => JSON.parse(l) as Line);
    const summaries = (bucket: string) => lines().filter((l) => l.level === INFO && l.bucket === bucket && 'delivered' in l);
    const sum = (ls: Line[], field: string) => ls.reduce((a, l) => a + Number(l[field] ?? 0), 0);
    try {
      let url = '';
      await until(
        () => {
          const l = lines().find((x) => x.msg === 'hookbucket listening');
          if (l) url = String(l.url);
          return url !== '';
        },
        `serve to listen (its stderr so far: ${stderr})`,
        90_000,
      );
      const post = async (bucket: string, n: number) => {
        for (let i = 0; i < n; i++) {
          const res = await fetch(`${url}/b/${bucket}`, {
            method: 'POST',
            body: `{"n":${i}}`,
            headers: { 'content-type': 'application/json' },
          });
          assert.equal(res.status, 200);
          await res.arrayBuffer();
        }
      };
      await post('ok', 3);
      await post('bad', 12);
      await post('busy', 1);
      await consumer.waitFor(3 + 12 + 1);

      // Failures: the first in full at warn, the rest as counts; every one accounted for.
      const failureLines = () => lines().filter((l) => l.level === WARN && l.bucket === 'bad');
      await until(
        () => {
          const ls = failureLines();
          return ls.filter((l) => l.outcome === 'failed').length + sum(ls, 'more') === 12;
        },
        'the 12 failures of bucket bad in the log',
        90_000,
      );
      const fl = failureLines();
      const firsts = fl.filter((l) => l.outcome === 'failed');
      assert.ok(firsts.length >= 1);
      for (const f of firsts) {
        assert.match(String(f.request), /^[0-9a-z-]+$/);
        assert.equal(f.status, 400);
        assert.equal(f.attempt, 1);
        assert.match(
          f.msg,
          /^bucket bad: a delivery ended failed \(request \S+, attempt 1: status 400, .*\); more within 2s are counted in one line$/,
        );
      }
      const counts = fl.filter((l) => l.more !== undefined);
      for (const c of counts)
        assert.match(c.msg, /^bucket bad: \d+ more deliver(y|ies) ended failed or exhausted in the last \d+s \(failed \d+\)$/);
      // 12 failures in a few hundred ms: the log has fewer lines than failures.
      assert.ok(fl.length < 12, `${fl.length} warn lines for 12 failures`);

      // The Retry-After block: one warn line saying until when.
      const block = lines().find((l) => l.level === WARN && l.bucket === 'busy');
      assert.ok(block, stderr);
      assert.match(
        block.msg,
        /^bucket busy: the consumer answered 429 with Retry-After; the bucket's deliveries wait until \d{4}-\d\d-\d\dT/,
      );
      // A second request while blocked is held back (deferred: retry_after), which the summary shows.
      await post('busy', 1);

      // Summaries: one info line per active bucket per interval, with what the interval held.
      await until(() => sum(summaries('ok'), 'delivered') === 3 && sum(summaries('bad'), 'failed') === 12, 'the summaries', 90_000);
      await until(
        () => summaries('busy').some((l) => ((l.deferred as Record<string, number>).retry_after ?? 0) >= 1),
        'the deferral in a summary',
        90_000,
      );
      assert.equal(sum(summaries('ok'), 'received'), 3);
      assert.equal(sum(summaries('bad'), 'received'), 12);
      assert.equal(sum(summaries('ok'), 'retried'), 0);
      assert.equal(sum(summaries('busy'), 'retried'), 1);
      const s = summaries('ok').find((l) => l.delivered === 3) ?? summaries('ok')[0]!;
      assert.match(s.msg, /^bucket ok, last \d+s: received \d+, delivered \d+, retried 0, failed 0, exhausted 0, deferred 0$/);
      assert.ok(Number(s.interval_ms) > 0);
      const d = summaries('busy').find((l) => ((l.deferred as Record<string, number>).retry_after ?? 0) >= 1)!;
      assert.match(d.msg, /deferred retry_after \d+$/);
      // Idle intervals write nothing: no summary without activity.
      for (const l of lines().filter((x) => x.level === INFO && 'delivered' in x)) {
        const total =
          Number(l.received ?? 0) +
          Number(l.delivered) +
          Number(l.retried) +
          Number(l.failed) +
          Number(l.exhausted) +
          Object.values(l.deferred as Record<string, number>).reduce((a, n) => a + n, 0);
        assert.ok(total > 0, JSON.stringify(l));
      }
    } finally {
      child.kill('SIGTERM');
    }
    assert.equal(await exited, 0, stderr);
  });
});

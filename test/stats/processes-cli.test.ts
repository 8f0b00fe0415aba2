import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { after, before, describe, it } from 'node:test';
import { BIN, runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';

// A real `worker` process registers itself in the workers table, starts an attempt against a
// consumer that never answers, and is killed with SIGKILL. Its row then says alive until its
// heartbeat's expiry (15 s after the last beat; moved into the past here rather than waited for),
// and after that dead, holding the delivery it leased: stats and health report both.

describe('processes in stats and health (the workers table)', () => {
  let b: DrainBench;
  let consumer: Consumer;
  let db: string[];

  before(async () => {
    b = await drainBench();
    consumer = await startConsumer(() => undefined); // holds every request: the attempt stays in flight
    db = ['--db', b.db];
    await b.store.createBucket({ name: 'shop', destination: `${consumer.url}/in` });
    b.ingest('shop', {});
  });
  after(async () => {
    await consumer.close();
    await b.close();
  });

  it('a worker killed mid-attempt is alive until its heartbeat lapses, then dead holding its leased delivery', async () => {
    const none = await runCli([...db, 'health', '--fail-on', 'workers_alive < 1', '--json']);
    assert.equal(none.code, 3, 'no worker has registered yet');

    const child = spawn(process.execPath, [BIN, ...db, 'worker', '--log-level', 'silent'], { stdio: 'ignore' });
    const exited = new Promise((r) => child.once('exit', r));
    try {
      await consumer.waitFor(1, 20_000);
    } finally {
      child.kill('SIGKILL');
      await exited;
    }

    const alive = await runCli([...db, 'stats', '--json']);
    assert.equal(alive.code, 0, alive.stderr);
    const a = alive.json();
    assert.equal(a.workers_alive, 1);
    assert.equal(a.delivering_dead_worker, 0);
    assert.deepEqual(
      a.processes.map((p: any) => [p.roles, p.pid, p.alive, p.inflight, p.stopped_at]),
      [[['worker'], child.pid, true, 1, null]],
    );
    const [attempt] = b.attempts(b.raw.prepare('select id from requests').pluck().get() as string);
    assert.equal(attempt!.worker_id, a.processes[0].id, 'the attempt row names its worker');

    // Its heartbeat lapses (no clean stop was recorded: it was killed).
    b.raw.prepare('update workers set expires_at = ? where pid = ?').run(Date.now() - 1, child.pid);
    const dead = await runCli([...db, 'stats', '--json']);
    const d = dead.json();
    assert.deepEqual([d.workers_alive, d.delivering_dead_worker, d.processes[0].alive, d.processes[0].inflight], [0, 1, false, 1]);
    const human = await runCli([...db, 'stats']);
    assert.match(human.text, /processes: 0 workers alive/);
    assert.match(human.text, /\bworker +\S+ +\d+ +dead\b/);
    assert.match(human.text, /1 deliveries are leased to workers that are no longer alive/);
    const tripped = await runCli([...db, 'health', '--fail-on', 'delivering_dead_worker > 0']);
    assert.equal(tripped.code, 3, tripped.text + tripped.stderr);
    assert.match(tripped.text, /delivering_dead_worker/);
  });
});

import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { newId } from '../../src/shared/ids.js';
import { createBatchWriter } from '../../src/store/sqlite/ingest-batch.js';
import { openSqlite } from '../../src/store/sqlite/open.js';
import type { IngestItem } from '../../src/store/sqlite/writer-protocol.js';
import { runCli } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * Dispositions and verdicts through the real binary: `requests list --state quarantined|duplicate|handshake`,
 * `--verified`, `requests show` (verdict, the original of a duplicate) and the request JSON fields.
 * Rows are written by ingest's own batch writer, as the ingest route hands them over.
 */
describe('requests list/show: dispositions and verdicts (real binary)', () => {
  const t = tempDir();
  const db = ['--db', t.db];
  const ids: Record<string, string> = {};
  let seq = 0;
  const item = (name: string, over: Partial<IngestItem>): IngestItem => {
    ids[name] = newId();
    return {
      seq: ++seq,
      id: ids[name]!,
      bucket: 'gh',
      receivedAt: Date.now(),
      method: 'POST',
      path: '',
      query: null,
      rawHeaders: ['X-GitHub-Delivery', 'd-1'],
      body: new Uint8Array(Buffer.from('{}')),
      peer: '127.0.0.1',
      createDelivery: true,
      deadline: Date.now() + 5000,
      ...over,
    };
  };

  before(async () => {
    const r = await runCli([...db, 'bucket', 'create', 'gh', '--destination', 'http://127.0.0.1:9/unused']);
    assert.equal(r.code, 0, r.stderr);
    const raw = openSqlite(t.db, { durability: 'normal', busyTimeoutMs: 5000 });
    const write = createBatchWriter(raw);
    const verified = { scheme: 'github', result: 'verified' as const, reason: null };
    const dedup = { key: 'h:d-1', windowMs: 3_600_000 };
    write(
      [
        item('first', { verdict: verified, dedup }),
        item('copy', { verdict: verified, dedup }),
        item('bad', { disposition: 'quarantined', verdict: { scheme: 'github', result: 'invalid', reason: 'signature_mismatch' } }),
        item('ping', { disposition: 'handshake', method: 'GET' }),
      ],
      [],
    );
    raw.close();
  });
  after(() => t.remove());

  const list = async (...args: string[]) => {
    const r = await runCli([...db, 'requests', 'list', 'gh', ...args, '--json']);
    assert.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return r.json<{ requests: Array<Record<string, any>> }>().requests;
  };

  it('--state quarantined|duplicate|handshake and --verified select by disposition and verdict', async () => {
    assert.deepEqual(
      (await list('--state', 'quarantined')).map((r) => [r.id, r.state, r.disposition, r.verification]),
      [[ids.bad, 'quarantined', 'quarantined', { scheme: 'github', result: 'invalid', reason: 'signature_mismatch' }]],
    );
    assert.deepEqual(
      (await list('--state', 'duplicate,handshake')).map((r) => r.id),
      [ids.ping, ids.copy],
    );
    assert.deepEqual(
      (await list('--verified', 'verified')).map((r) => r.id),
      [ids.copy, ids.first],
    );
    assert.deepEqual(
      (await list('--state', 'pending')).map((r) => r.id),
      [ids.first],
    );
    const bad = await runCli([...db, 'requests', 'list', 'gh', '--verified', 'maybe']);
    assert.equal(bad.code, 2);
    assert.match(bad.stderr, /unknown verdict "maybe"/);
  });

  it('requests show names the original of a duplicate and shows the verdict (human and --json)', async () => {
    const human = await runCli([...db, 'requests', 'show', ids.copy!]);
    assert.equal(human.code, 0, human.stderr);
    assert.match(human.stdout.toString(), /state {5}duplicate/);
    assert.match(human.stdout.toString(), new RegExp(`duplicate of ${ids.first}`));
    assert.match(human.stdout.toString(), /verified {2}github: verified/);
    const j = await runCli([...db, 'requests', 'show', ids.copy!, '--json']);
    assert.equal(j.code, 0, j.stderr);
    const o = j.json<Record<string, any>>();
    assert.equal(o.disposition, 'duplicate');
    assert.equal(o.duplicate_of, ids.first);
    assert.equal(o.dedup_key, 'h:d-1');
    assert.deepEqual(o.verification, { scheme: 'github', result: 'verified', reason: null });
    assert.deepEqual(o.deliveries, []);
  });
});

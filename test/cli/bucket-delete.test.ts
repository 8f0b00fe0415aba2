import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { startTestServer, type TestServer } from '../helpers/server.js';

const OLD = 20;

/**
 * Issue 10's leak: a `bucket delete` that failed half-way (under ingest load) removed the bucket
 * row and left its requests; `bucket create <same name> --destination <new>` then had the worker
 * deliver the old requests to the new destination. Reproduced here by leaving the rows exactly as
 * that delete did (bucket row gone, requests and pending deliveries kept), through the real binary,
 * the real serve and a real consumer for each destination.
 */
describe('bucket delete through the real binary: a name never inherits old rows', () => {
  let s: TestServer;
  let oldC: Consumer;
  let newC: Consumer;
  const cli = (...args: string[]) => runCli(['--db', s.db, ...args]);
  before(async () => {
    s = await startTestServer();
    // serve's retention loop finishes a deleting bucket's purge by itself, 30 s after start; this
    // test looks at the deleting state in between, which takes longer than that on a loaded
    // machine. Stopped here, so the state stays until the test's own `bucket delete` finishes it.
    await s.retention.stop();
    oldC = await startConsumer();
    newC = await startConsumer();
  });
  after(async () => {
    await s.stop();
    await oldC.close();
    await newC.close();
  });

  it('rows left by a failed delete are never delivered to a new bucket of the same name', async () => {
    assert.equal((await cli('bucket', 'create', 'leak', '--destination', `${oldC.url}/old`)).code, 0);
    for (let i = 0; i < OLD; i++) {
      assert.equal((await fetch(`${s.url}/b/leak`, { method: 'POST', body: `old ${i}` })).status, 200);
    }
    // What the old deleteBucket's first transaction did before its batches failed with SQLITE_BUSY.
    const raw = new BetterSqlite3(s.db);
    raw.prepare(`delete from buckets where name = 'leak'`).run();
    raw.close();

    const refused = await cli('bucket', 'create', 'leak', '--destination', `${newC.url}/new`);
    assert.equal(refused.code, 1, 'a name with rows left is not free');
    assert.match(refused.stderr, /^error \[bucket_deleting\]: bucket leak still has rows of an earlier bucket/);

    // The deleting bucket, as every command shows it.
    const list = await cli('bucket', 'list');
    assert.match(list.text, new RegExp(`^leak \\(deleting\\)\\s+${OLD}\\s`, 'm'));
    assert.match(list.text, /deleting: leak: requests left to purge; finish with: hookbucket bucket delete <name>/);
    const listJson = (await cli('bucket', 'list', '--json')).json();
    assert.deepEqual(
      listJson.buckets.map((b: { name: string; deleting: boolean; requests: number; destination: string | null }) => [
        b.name,
        b.deleting,
        b.requests,
        b.destination,
      ]),
      [['leak', true, OLD, null]],
    );
    const show = await cli('bucket', 'show', 'leak');
    assert.equal(show.code, 0, show.stderr);
    assert.match(show.text, new RegExp(`^deleting +since \\S+: ${OLD} request\\(s\\) left to purge; ingest refuses it \\(404\\)`, 'm'));
    const showJson = (await cli('bucket', 'show', 'leak', '--json')).json();
    assert.equal(showJson.deleting, true);
    assert.match(showJson.deleting_at, /^\d{4}-/);
    assert.equal(showJson.requests, OLD);
    const listed = await cli('requests', 'list', 'leak', '--json');
    assert.equal(listed.code, 0, 'its requests can still be read');
    assert.equal(listed.json().requests.length, OLD);

    // Nothing goes in, nothing is changed, nothing goes out.
    assert.equal((await fetch(`${s.url}/b/leak`, { method: 'POST', body: 'late' })).status, 404);
    for (const args of [
      ['bucket', 'update', 'leak', '--destination', `${newC.url}/new`],
      ['bucket', 'pause', 'leak'],
      ['bucket', 'resume', 'leak'],
      ['replay', 'leak', '--all', '--yes', '--to', `${newC.url}/new`],
    ]) {
      const r = await cli(...args);
      assert.equal(r.code, 1, args.join(' '));
      assert.match(
        r.stderr,
        /^error \[bucket_deleting\]: bucket leak is being deleted; finish it with: hookbucket bucket delete leak/,
        args.join(' '),
      );
    }
    const once = await cli('worker', '--once', '--json');
    assert.equal(once.code, 0, once.stderr);
    assert.equal(once.json().started, 0, 'the worker sends nothing of a deleting bucket');

    // Re-running delete (no --force needed) finishes; the name is free.
    const del = await cli('bucket', 'delete', 'leak');
    assert.equal(del.code, 0, del.stderr);
    assert.equal(del.text.trim(), `finished deleting bucket leak and ${OLD} stored request(s)`);
    assert.equal((await cli('bucket', 'show', 'leak')).code, 4);

    const created = await cli('bucket', 'create', 'leak', '--destination', `${newC.url}/new`);
    assert.equal(created.code, 0, created.stderr);
    assert.equal((await fetch(`${s.url}/b/leak`, { method: 'POST', body: 'new 0' })).status, 200);
    const drained = await cli('worker', '--once', '--json');
    assert.equal(drained.json().started, 1);
    assert.deepEqual(
      newC.received.map((r) => r.body.toString()),
      ['new 0'],
      "the new destination gets only the new bucket's request",
    );
    assert.equal(oldC.received.length, 0);
  });

  it('a refused delete changes nothing; a forced one deletes, and ingest then answers 404', async () => {
    assert.equal((await cli('bucket', 'create', 'plain', '--destination', `${oldC.url}/p`)).code, 0);
    assert.equal((await fetch(`${s.url}/b/plain`, { method: 'POST', body: 'x' })).status, 200);
    const refused = await cli('bucket', 'delete', 'plain');
    assert.equal(refused.code, 1);
    assert.match(refused.stderr, /^error \[bucket_not_empty\]: bucket plain has 1 undelivered request\(s\); use --force/);
    assert.equal((await cli('bucket', 'show', 'plain', '--json')).json().deleting, false, 'a refused delete changes nothing');
    const del = await cli('bucket', 'delete', 'plain', '--force', '--json');
    assert.equal(del.code, 0, del.stderr);
    assert.deepEqual(del.json(), { name: 'plain', deleted: true, requests: 1 });
    assert.equal((await fetch(`${s.url}/b/plain`, { method: 'POST', body: 'y' })).status, 404);
  });
});

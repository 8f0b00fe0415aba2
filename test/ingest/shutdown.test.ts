import assert from 'node:assert/strict';
import { connect } from 'node:net';
import { describe, it } from 'node:test';
import BetterSqlite3 from 'better-sqlite3';
import { startTestServer } from '../helpers/server.js';

describe('graceful shutdown', () => {
  it('stops accepting, lets an in-flight request commit and answer 2xx, then closes', async () => {
    const s = await startTestServer();
    await s.store.createBucket({ name: 'hooks' });
    const u = new URL(s.url);
    const sock = connect(Number(u.port), u.hostname);
    await new Promise<void>((r) => sock.once('connect', () => r()));
    let answer = '';
    sock.on('data', (d) => (answer += d.toString('latin1')));
    const closedSock = new Promise<void>((r) => sock.once('close', () => r()));
    // Headers and half the body are in: this request is in flight when the stop begins.
    sock.write('POST /b/hooks HTTP/1.1\r\nHost: x\r\nContent-Length: 10\r\n\r\nhello');
    await new Promise((r) => setTimeout(r, 100));
    const stopping = s.close(5000);
    // A new connection is refused once the stop has begun.
    const refused = await fetch(`${s.url}/healthz`).then(
      () => false,
      () => true,
    );
    assert.equal(refused, true);
    sock.write('world');
    await stopping;
    await closedSock.catch(() => undefined);
    assert.match(answer, /^HTTP\/1\.1 200 /);
    const id = /"id":"([^"]+)"/.exec(answer)?.[1];
    assert.ok(id);
    const raw = new BetterSqlite3(s.db, { readonly: true });
    const row = raw.prepare('select body from requests where id = ?').get(id) as { body: Buffer } | undefined;
    raw.close();
    assert.equal(row?.body.toString(), 'helloworld');
    sock.destroy();
    await s.stop();
  });
});

import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import { closeSync, constants, openSync, readdirSync, writeFileSync, writeSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { runCli, type CliResult } from '../helpers/cli.js';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * `requests import` stores exactly what it checked: the real binary reads its source once, into a
 * private copy, and both passes (check, then store) read the copy. A FIFO makes that observable
 * without timing: the test feeds it one content, and feeds a different one to any reader that
 * opens it after the first has closed it, as a file rewritten between the passes would.
 */
describe('requests import reads its source once (real binary)', () => {
  let t: ReturnType<typeof tempDir>;
  before(async () => {
    t = tempDir();
    const r = await runCli(['--db', t.db, 'bucket', 'create', 'b']);
    assert.equal(r.code, 0, r.stderr);
  });
  after(() => t.remove());

  const line = (n: number, over: Record<string, unknown> = {}) =>
    `${JSON.stringify({ method: 'POST', path: `/n${n}`, query: null, headers: [['Content-Type', 'text/plain']], body: `body ${n}`, body_encoding: 'utf8', ...over })}\n`;
  const paths = async () =>
    ((await runCli(['--db', t.db, 'requests', 'list', 'b', '--json', '--limit', '1000'])).json().requests as Array<{ path: string }>)
      .map((r) => r.path)
      .reverse();

  /**
   * Imports from a FIFO fed `first`; any reader that opens the FIFO after that gets `later`. Returns
   * the CLI's result and how many times the FIFO was opened again.
   */
  async function importFromFifo(name: string, first: string, later: string): Promise<{ r: CliResult; reopened: number }> {
    const fifo = join(t.dir, name);
    execFileSync('mkfifo', [fifo]);
    const running = runCli(['--db', t.db, 'requests', 'import', 'b', fifo, '--json']);
    const feeding = writeFile(fifo, first);
    if ((await Promise.race([feeding.then(() => 'fed'), running.then(() => 'exited')])) === 'exited') {
      // The import ended without reading the FIFO (the old code refused it): open a reader so that
      // the blocked writer can finish, instead of hanging the test.
      const fd = openSync(fifo, constants.O_RDONLY | constants.O_NONBLOCK);
      await feeding;
      closeSync(fd);
    }
    let reopened = 0;
    let done = false;
    const finished = running.finally(() => (done = true));
    // O_NONBLOCK: opening for writing fails with ENXIO while no reader has the FIFO open. Until the
    // first ENXIO the first reader may still be draining `first` (a write now would join it); after
    // it, an open that succeeds is a new reader: the source opened again.
    let firstReaderGone = false;
    while (!done) {
      let fd: number | undefined;
      try {
        fd = openSync(fifo, constants.O_WRONLY | constants.O_NONBLOCK);
      } catch (e) {
        if ((e as NodeJS.ErrnoException).code !== 'ENXIO') throw e;
        firstReaderGone = true;
      }
      if (fd !== undefined) {
        if (firstReaderGone) {
          reopened++;
          try {
            writeSync(fd, later);
          } catch {
            // the reader went away
          }
        }
        closeSync(fd);
      }
      // A probe every 2 ms: a poll for the FIFO's state, not a wait for time to pass.
      await new Promise((r) => setTimeout(r, 2));
    }
    return { r: await finished, reopened };
  }

  it('stores the records read, though the source says otherwise to a second reader', async () => {
    const first = [1, 2, 3, 4, 5].map((n) => line(n)).join('');
    const later = `${line(100)}${line(101, { method: 'TRACE' })}`;
    const { r, reopened } = await importFromFifo('good.fifo', first, later);
    assert.equal(r.code, 0, r.stderr);
    assert.equal(reopened, 0, 'the source was opened once');
    assert.equal(r.json().imported, 5);
    assert.deepEqual(await paths(), ['/n1', '/n2', '/n3', '/n4', '/n5']);
  });

  it('a bad record anywhere in what was read stores nothing, naming its line', async () => {
    const first = `${line(6)}${line(7)}\n${line(8, { headers: [['X-A', 'a\u001bb']] })}${line(9)}`;
    const { r, reopened } = await importFromFifo('bad.fifo', first, [10, 11].map((n) => line(n)).join(''));
    assert.equal(r.code, 2);
    assert.equal(reopened, 0);
    assert.match(r.stderr, /bad\.fifo line 4: header X-A has a value with a control byte/);
    assert.deepEqual(await paths(), ['/n1', '/n2', '/n3', '/n4', '/n5'], 'nothing more stored');
  });

  it('--max-body applies to the bytes stored; the copy is gone afterwards, on success and on refusal', async () => {
    assert.equal((await runCli(['--db', t.db, 'bucket', 'update', 'b', '--max-body', '10B'])).code, 0);
    writeFileSync(join(t.dir, 'big.ndjson'), `${line(12)}${line(13, { body: 'x'.repeat(11) })}`);
    const big = await runCli(['--db', t.db, 'requests', 'import', 'b', join(t.dir, 'big.ndjson')]);
    assert.equal(big.code, 2);
    assert.match(big.stderr, /big\.ndjson line 2: body of 11 B exceeds bucket b's --max-body 10 B/);
    writeFileSync(join(t.dir, 'ok.ndjson'), line(14));
    assert.equal((await runCli(['--db', t.db, 'requests', 'import', 'b', join(t.dir, 'ok.ndjson')])).code, 0);
    assert.deepEqual(readdirSync(`${t.db}-spool`), []);
  });

  it('HAR: entries are checked and stored from one read; a bad entry stores nothing, naming it', async () => {
    const entry = (n: number, method = 'POST') => ({
      request: { method, url: `http://h/b/b/h${n}`, headers: [], postData: { text: 'x' } },
    });
    const first = JSON.stringify({ log: { version: '1.2', entries: [entry(1), entry(2, 'CONNECT')] } });
    const { r, reopened } = await importFromFifo('bad.har.fifo', first, JSON.stringify({ log: { entries: [entry(3)] } }));
    assert.equal(r.code, 2);
    assert.equal(reopened, 0);
    assert.match(r.stderr, /entry 2: method CONNECT is refused at ingest/);
    assert.ok(!(await paths()).includes('/h1'));
  });
});

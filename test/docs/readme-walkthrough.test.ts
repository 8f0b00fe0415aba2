import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync, symlinkSync } from 'node:fs';
import { createServer } from 'node:net';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tempDir } from '../helpers/temp-dir.js';

/**
 * The README's walkthrough, run as written: the ```sh blocks of its "A walkthrough" section, in
 * order, by bash, in a fresh folder that holds only a link to the built dist/. Only the ports
 * change (8787 and 3000 may be taken on a test machine; the admin listener gets any free port), so
 * an edit that breaks a command there fails here.
 */

const ROOT = fileURLToPath(new URL('../../../', import.meta.url)); // from dist/test/docs

/** The ```sh blocks between `## <heading>` and the next `## `. */
export function shellBlocks(markdown: string, heading: string): string[] {
  const start = markdown.indexOf(`\n## ${heading}\n`);
  assert.ok(start >= 0, `no "## ${heading}" in the README`);
  const end = markdown.indexOf('\n## ', start + 1);
  const section = markdown.slice(start, end < 0 ? undefined : end);
  return [...section.matchAll(/\n```sh\n([\s\S]*?)\n```/g)].map((m) => m[1] ?? '');
}

function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const address = s.address();
      s.close(() => resolve(typeof address === 'object' && address ? address.port : 0));
    });
  });
}

describe('README walkthrough', () => {
  const t = tempDir('hookbucket-readme-');
  let group = 0;
  after(() => {
    // A script stopped part-way must not leave serve or the consumer running.
    if (group) {
      try {
        process.kill(-group, 'SIGKILL');
      } catch {
        // already gone
      }
    }
    t.remove();
  });

  it('runs as written: the id it prints, state none, then delivered after the replay', async () => {
    const blocks = shellBlocks(readFileSync(`${ROOT}README.md`, 'utf8'), 'A walkthrough');
    assert.equal(blocks.length, 2, 'the walkthrough has two sh blocks');
    const [ingest, consumer] = [await freePort(), await freePort()];
    const script = blocks
      .join('\n')
      .replaceAll('8787', String(ingest))
      .replaceAll(':3000', `:${consumer}`)
      .replaceAll('listen(3000)', `listen(${consumer})`);
    assert.ok(script.includes(`listen(${consumer})`), 'the consumer port was rewritten');
    symlinkSync(join(ROOT, 'dist'), join(t.dir, 'dist'));

    // -e: any command that fails stops the script; `wait` lets serve finish its graceful stop.
    const child = spawn('bash', ['-e', '-o', 'pipefail', '-c', `${script}\nwait\n`], {
      cwd: t.dir,
      detached: true,
      // serve's port: the README starts it on the default, so the variable moves it with the URLs.
      env: { ...withoutSettings(process.env), HOOKBUCKET_PORT: String(ingest), HOOKBUCKET_ADMIN_PORT: '0', NO_COLOR: '1' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    group = child.pid ?? 0;
    let out = '';
    let err = '';
    child.stdout.on('data', (c) => (out += c));
    child.stderr.on('data', (c) => (err += c));
    // Far above a run's 10 to 40 s on a loaded 2-core machine: only a hang reaches it.
    const timer = setTimeout(() => process.kill(-group, 'SIGKILL'), 240_000);
    const code = await new Promise<number | null>((resolve) => child.on('close', resolve));
    clearTimeout(timer);
    const where = `\n--- stdout\n${out}\n--- stderr\n${err}\n--- serve.log\n${readLog(t.dir)}`;
    assert.equal(code, 0, `the walkthrough exited ${code}${where}`);

    const id = /^([0-9a-f]{8}-[0-9a-f]{4}-7[0-9a-f]{3}-[0-9a-f]{4}-[0-9a-f]{12})$/m.exec(out)?.[1];
    assert.ok(id, `echo "$ID" printed no request id${where}`);
    // Before the destination: the request is listed with state none.
    assert.match(out, new RegExp(`^${id} .* none +0 +- +-$`, 'm'), where);
    assert.match(out, /deliveries: none \(the bucket had no destination when this request arrived\)/, where);
    assert.equal(readFileSync(join(t.dir, 'body.bin'), 'utf8'), '{"id":"evt_1","type":"charge.succeeded"}');
    // After it: the replay delivered the earlier request, and the consumer saw both.
    assert.match(out, /would replay 1 request\(s\) of stripe/, where);
    assert.match(out, /: 1 delivered of 1$/m, where);
    assert.match(out, new RegExp(`^${id} .* delivered +1 +200 +1$`, 'm'), where);
    // The consumer prints from its own process, so its lines may land anywhere in the output.
    assert.match(out, /POST \/webhooks\/events\?live=1\n/, where);
    assert.match(out, /POST \/webhooks\/events\n/, where);
    assert.match(out, /\{"status":"ok"\}/, where);
    group = 0;
  });
});

/** The environment without HOOKBUCKET_* settings, so that the walkthrough runs on its defaults as in a fresh shell. */
function withoutSettings(env: NodeJS.ProcessEnv): NodeJS.ProcessEnv {
  return Object.fromEntries(Object.entries(env).filter(([name]) => !name.startsWith('HOOKBUCKET_')));
}

function readLog(dir: string): string {
  try {
    return readFileSync(join(dir, 'serve.log'), 'utf8').slice(-4000);
  } catch {
    return '(none)';
  }
}

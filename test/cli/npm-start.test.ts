import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { after, describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { tempDir } from '../helpers/temp-dir.js';
import { until } from '../helpers/until.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url)); // from dist/test/cli

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
}

/** Every process below `pid` (Linux /proc), children first. */
function descendants(pid: number): number[] {
  const out: number[] = [];
  for (const task of readdirSync(`/proc/${pid}/task`)) {
    for (const c of readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').split(' ').filter(Boolean).map(Number)) {
      out.push(c, ...descendants(c));
    }
  }
  return out;
}

describe('npm start', () => {
  const t = tempDir();
  let below: number[] = [];
  after(() => {
    // A server left running by a failing run must not outlive the test.
    for (const pid of below) if (alive(pid)) process.kill(pid, 'SIGKILL');
    t.remove();
  });

  it('passes a SIGTERM sent to npm on to the server, which shuts down gracefully', async () => {
    const npm = spawn('npm', ['start', '--silent'], {
      cwd: ROOT,
      env: {
        ...process.env,
        HOOKBUCKET_DB: t.db,
        HOOKBUCKET_PORT: '0',
        HOOKBUCKET_ADMIN_PORT: '0',
        HOOKBUCKET_HOST: '127.0.0.1',
        HOOKBUCKET_WORKER: 'false',
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let log = '';
    npm.stdout.on('data', (d: Buffer) => (log += d.toString()));
    npm.stderr.on('data', (d: Buffer) => (log += d.toString()));
    const exited = new Promise<number | null>((resolve) => npm.once('exit', (code) => resolve(code)));
    await until(() => log.includes('hookbucket listening'), 'the server to listen', 30_000);
    // npm's shell (if any) and the server: none may be left running once npm has gone.
    below = descendants(npm.pid!);
    assert.ok(below.length > 0, 'npm started a process');
    npm.kill('SIGTERM');
    const code = await exited;
    await until(() => below.every((pid) => !alive(pid)) || log.includes('hookbucket stopped'), 'the server to stop', 15_000);
    assert.match(log, /"signal":"SIGTERM".*"msg":"shutting down"/, log);
    assert.match(log, /"msg":"hookbucket stopped"/, log);
    assert.equal(code, 0, log);
    await until(() => below.every((pid) => !alive(pid)), 'every process npm started to exit', 5_000);
  });
});

import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { accessSync, constants, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { fileURLToPath } from 'node:url';
import { loadConfig } from '../../src/config/config.js';

const ROOT = fileURLToPath(new URL('../../../', import.meta.url));
const UNIT = join(ROOT, 'deploy', 'hookbucket.service');
const DOCKERFILE = join(ROOT, 'deploy', 'Dockerfile');
const pkg = JSON.parse(readFileSync(join(ROOT, 'package.json'), 'utf8')) as {
  bin: Record<string, string>;
  scripts: Record<string, string>;
};

function which(cmd: string): string | undefined {
  for (const dir of (process.env.PATH ?? '').split(':')) {
    try {
      accessSync(join(dir, cmd), constants.X_OK);
      return join(dir, cmd);
    } catch {}
  }
  return undefined;
}

const SYSTEMD_ANALYZE = which('systemd-analyze');

function verify(unitFile: string): Promise<{ code: number; stderr: string }> {
  return new Promise((resolve) => {
    execFile(SYSTEMD_ANALYZE!, ['verify', unitFile], (err, _stdout, stderr) =>
      resolve({ code: err ? Number((err as { code?: unknown }).code ?? 1) : 0, stderr: String(stderr) }),
    );
  });
}

/** `Key=value` lines of a unit's [Service] section (the last value of a key wins, as in systemd). */
function serviceKeys(text: string): Map<string, string> {
  const keys = new Map<string, string>();
  let section = '';
  for (const line of text.split('\n')) {
    const t = line.trim();
    if (t.startsWith('[')) section = t;
    else if (section === '[Service]' && t !== '' && !t.startsWith('#')) {
      const i = t.indexOf('=');
      keys.set(t.slice(0, i), t.slice(i + 1));
    }
  }
  return keys;
}

/** Seconds of a systemd time span such as 45s, 2min or 1min 30s. */
function spanSeconds(span: string): number {
  let total = 0;
  for (const m of span.matchAll(/(\d+)\s*(min|s)\b/g)) total += Number(m[1]) * (m[2] === 'min' ? 60 : 1);
  return total;
}

describe('deploy/hookbucket.service', () => {
  const text = readFileSync(UNIT, 'utf8');
  const keys = serviceKeys(text);

  it('systemd-analyze verify: no error and no warning', {
    skip: SYSTEMD_ANALYZE ? false : 'systemd-analyze is not installed (Debian: apt-get install systemd)',
  }, async () => {
    const dir = mkdtempSync(join(tmpdir(), 'hookbucket-unit-'));
    try {
      // verify checks that ExecStart's program exists: where node is not /usr/bin/node, the
      // same unit with this node's path.
      let unit = UNIT;
      if (!which('node') || !keys.get('ExecStart')?.startsWith('/usr/bin/node ') || !existsExecutable('/usr/bin/node')) {
        unit = join(dir, 'hookbucket.service');
        writeFileSync(unit, text.replace('ExecStart=/usr/bin/node ', `ExecStart=${process.execPath} `));
      }
      const r = await verify(unit);
      assert.equal(r.code, 0, r.stderr);
      assert.equal(r.stderr.trim(), '');
      // The check can fail: the same unit with a misspelled value and key is reported.
      const bad = join(dir, 'bad.service');
      writeFileSync(bad, readFileSync(unit, 'utf8').replace('Restart=on-failure', 'Restart=on-failur').replace('UMask=', 'UMaskk='));
      const b = await verify(bad);
      assert.match(b.stderr, /on-failur/);
      assert.match(b.stderr, /UMaskk/);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });

  it('a dedicated user, the working directory .env is read from, restart on failure', () => {
    assert.ok(keys.get('User') && keys.get('User') !== 'root');
    assert.equal(keys.get('WorkingDirectory'), '/var/lib/hookbucket');
    assert.equal(keys.get('Restart'), 'on-failure');
    assert.match(keys.get('ExecStart') ?? '', /^\/usr\/bin\/node \/opt\/hookbucket\/dist\/src\/cli\/bin\.js serve$/);
    assert.equal(keys.get('ExecStart')?.split(' ')[1], `/opt/hookbucket/${pkg.bin.hookbucket}`);
  });

  it('TimeoutStopSec is longer than HTTP grace + worker grace (default --shutdown-grace) + margin', () => {
    const config = loadConfig({}, {}, {});
    const httpGraceS = 10; // serve's close(): src/main.ts
    const stopS = spanSeconds(keys.get('TimeoutStopSec') ?? '');
    assert.ok(stopS >= httpGraceS + config.shutdownGraceMs / 1000 + 10, `TimeoutStopSec=${keys.get('TimeoutStopSec')}`);
    assert.equal(keys.get('KillSignal'), 'SIGTERM');
  });

  it('sandbox: the file system read-only but the data folder, files 0600, JIT allowed', () => {
    assert.equal(keys.get('ProtectSystem'), 'strict');
    // The database's default path (data/hookbucket.db relative to the working directory), its
    // -wal and -shm files and the spool folder beside it are all inside the writable folder.
    const config = loadConfig({}, {}, {});
    const db = join(keys.get('WorkingDirectory')!, config.db);
    const spool = join(keys.get('WorkingDirectory')!, config.spoolDir);
    const writable = (keys.get('ReadWritePaths') ?? '').split(/\s+/);
    for (const path of [db, `${db}-wal`, `${db}-shm`, spool])
      assert.ok(
        writable.some((w) => path.startsWith(`${w}/`)),
        `${path} is not under ReadWritePaths=${writable.join(' ')}`,
      );
    assert.equal(keys.get('UMask'), '0077');
    assert.equal(keys.has('MemoryDenyWriteExecute'), false);
    assert.equal(keys.get('NoNewPrivileges'), 'yes');
  });
});

function existsExecutable(path: string): boolean {
  try {
    accessSync(path, constants.X_OK);
    return true;
  } catch {
    return false;
  }
}

/** Dockerfile instructions as [INSTRUCTION, arguments], continuation lines joined, comments dropped. */
function instructions(text: string): Array<[string, string]> {
  const joined = text.replace(/\\\n/g, ' ');
  return joined
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l !== '' && !l.startsWith('#'))
    .map((l) => {
      const i = l.search(/\s/);
      return [l.slice(0, i).toUpperCase(), l.slice(i + 1).trim()] as [string, string];
    });
}

describe('deploy/Dockerfile', () => {
  const ins = instructions(readFileSync(DOCKERFILE, 'utf8'));
  const stages: Array<Array<[string, string]>> = [];
  for (const i of ins) {
    if (i[0] === 'FROM') stages.push([]);
    stages.at(-1)?.push(i);
  }

  it('two stages on the same base; the build runs the package.json scripts, then prunes dev dependencies', () => {
    assert.equal(stages.length, 2);
    const [build, runtime] = stages as [Array<[string, string]>, Array<[string, string]>];
    assert.equal(build[0]![1], `\${NODE_IMAGE} AS build`);
    assert.equal(runtime[0]![1], `\${NODE_IMAGE}`);
    const arg = ins.find(([k, v]) => k === 'ARG' && v.startsWith('NODE_IMAGE='));
    assert.match(arg?.[1] ?? '', /^NODE_IMAGE=node:\d+-\w+-slim$/);
    const runs = build.filter(([k]) => k === 'RUN').map(([, v]) => v);
    assert.ok(runs.includes('npm ci && npm run build && npm prune --omit=dev'), runs.join('\n'));
    assert.ok(pkg.scripts.build, 'package.json has no build script');
    assert.ok(pkg.scripts.prepare?.includes('npm run build'));
    // What tsconfig.json compiles is what the build stage copies.
    const tsconfig = JSON.parse(readFileSync(join(ROOT, 'tsconfig.json'), 'utf8')) as { include: string[] };
    const copied = build.filter(([k]) => k === 'COPY').flatMap(([, v]) => v.split(/\s+/).slice(0, -1));
    for (const dir of tsconfig.include) assert.ok(copied.includes(dir), `the build stage does not copy ${dir}`);
  });

  it('runtime: the built dist/src, non-root, a data volume, SIGTERM, the default ports, the bin as entry point', () => {
    const runtime = stages[1]!;
    const get = (k: string) => runtime.filter(([n]) => n === k).map(([, v]) => v);
    assert.ok(get('COPY').includes('--from=build /app/dist/src ./dist/src'));
    assert.ok(get('COPY').includes('--from=build /app/node_modules ./node_modules'));
    const user = get('USER').at(-1);
    assert.ok(user && user !== 'root' && user !== '0', `USER ${user}`);
    assert.deepEqual(get('VOLUME'), ['["/data"]']);
    assert.deepEqual(get('STOPSIGNAL'), ['SIGTERM']);
    const config = loadConfig({}, {}, {});
    assert.deepEqual(get('EXPOSE'), [`${config.port} ${config.adminPort}`]);
    assert.deepEqual(JSON.parse(get('ENTRYPOINT')[0]!), ['node', pkg.bin.hookbucket]);
    assert.deepEqual(JSON.parse(get('CMD')[0]!), ['serve']);
    assert.ok(get('ENV').some((v) => v.includes('HOOKBUCKET_DB=/data/')));
  });
});

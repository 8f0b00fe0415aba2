import { spawn, type ChildProcess } from 'node:child_process';
import { createServer } from 'node:net';
import { basename } from 'node:path';
import { performance } from 'node:perf_hooks';
import { fileURLToPath } from 'node:url';

/**
 * The real CLI binary (dist/src/cli/bin.js) as child processes: `serve`, `worker` and one-shot
 * commands. Every child is registered until it exits, so the runner can tell (and end) what a
 * case left running, and nothing outlives the suite.
 */

export const BIN = fileURLToPath(new URL('../../../src/cli/bin.js', import.meta.url));

/** Lines of stderr kept per process (the JSON log), oldest dropped first. */
const KEEP_LINES = 5000;

const live = new Set<HookbucketProcess>();

/** Children still running (the runner checks this after every case). */
export function liveProcesses(): HookbucketProcess[] {
  return [...live];
}

/** SIGKILLs every child still running: the runner's last resort, and on exit. */
export function killAll(): void {
  for (const p of live) p.child.kill('SIGKILL');
}
process.once('exit', killAll);

export interface Exit {
  code: number | null;
  signal: NodeJS.Signals | null;
}

export interface LogLine {
  msg?: string;
  level?: number;
  [k: string]: unknown;
}

export class HookbucketProcess {
  readonly child: ChildProcess;
  readonly args: readonly string[];
  readonly startedAt = performance.now();
  readonly exited: Promise<Exit>;
  /** Parsed JSON log lines from stderr (non-JSON lines as `{ msg: <text> }`). */
  readonly logs: LogLine[] = [];
  stdout = '';
  #exit: Exit | undefined;
  readonly #waiters = new Set<() => void>();

  readonly script: string;

  /** Runs the CLI binary, or with `script` another Node script (a lock holder), tracked the same way. */
  constructor(args: readonly string[], env: Record<string, string> = {}, script: string = BIN) {
    this.args = args;
    this.script = script;
    this.child = spawn(process.execPath, [script, ...args], {
      env: { ...process.env, NO_COLOR: '1', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    live.add(this);
    let partial = '';
    this.child.stderr!.setEncoding('utf8').on('data', (d: string) => {
      partial += d;
      const lines = partial.split('\n');
      partial = lines.pop()!;
      for (const l of lines) this.#addLine(l);
    });
    this.child.stdout!.setEncoding('utf8').on('data', (d: string) => {
      if (this.stdout.length < 1_000_000) this.stdout += d;
    });
    this.exited = new Promise<Exit>((resolve) => {
      this.child.once('exit', (code, signal) => {
        if (partial) this.#addLine(partial);
        this.#exit = { code, signal };
        live.delete(this);
        for (const w of this.#waiters) w();
        resolve(this.#exit);
      });
    });
  }

  get pid(): number {
    return this.child.pid!;
  }

  get exit(): Exit | undefined {
    return this.#exit;
  }

  #addLine(l: string): void {
    if (!l.trim()) return;
    let parsed: LogLine;
    try {
      parsed = JSON.parse(l) as LogLine;
    } catch {
      parsed = { msg: l };
    }
    this.logs.push(parsed);
    if (this.logs.length > KEEP_LINES) this.logs.splice(0, this.logs.length - KEEP_LINES);
    for (const w of this.#waiters) w();
  }

  /** The first log line (already seen or still to come) whose msg matches, within timeoutMs. */
  waitForLog(pattern: RegExp, timeoutMs: number): Promise<LogLine> {
    const find = () => this.logs.find((l) => pattern.test(String(l.msg ?? '')));
    const found = find();
    if (found) return Promise.resolve(found);
    return new Promise((resolve, reject) => {
      const done = () => {
        clearTimeout(timer);
        this.#waiters.delete(check);
      };
      const check = () => {
        const l = find();
        if (l) {
          done();
          resolve(l);
        } else if (this.#exit) {
          done();
          reject(
            new Error(
              `${this.describe()} exited (${this.#exit.code ?? this.#exit.signal}) before logging ${pattern}; last log: ${this.tail(20)}`,
            ),
          );
        }
      };
      const timer = setTimeout(() => {
        this.#waiters.delete(check);
        reject(new Error(`${this.describe()}: no log matching ${pattern} within ${timeoutMs} ms; last log: ${this.tail(20)}`));
      }, timeoutMs);
      this.#waiters.add(check);
      check();
    });
  }

  /** The last n log messages, for error reports. */
  tail(n: number): string {
    return this.logs
      .slice(-n)
      .map((l) => String(l.msg ?? ''))
      .join(' | ');
  }

  describe(): string {
    const name = this.script === BIN ? 'hookbucket' : basename(this.script);
    return `${name} ${this.args.filter((a) => !a.startsWith('/')).join(' ')} (pid ${this.child.pid})`;
  }

  /** SIGKILL; resolves when the process is gone. */
  async kill9(): Promise<Exit> {
    if (!this.#exit) this.child.kill('SIGKILL');
    return this.exited;
  }

  /** SIGTERM, then SIGKILL past timeoutMs; resolves with how it ended and how long it took. */
  async term(timeoutMs = 30_000): Promise<Exit & { ms: number; forced: boolean }> {
    const t0 = performance.now();
    if (!this.#exit) this.child.kill('SIGTERM');
    let forced = false;
    const timer = setTimeout(() => {
      forced = true;
      this.child.kill('SIGKILL');
    }, timeoutMs);
    const e = await this.exited;
    clearTimeout(timer);
    return { ...e, ms: performance.now() - t0, forced };
  }
}

export interface ServeOptions {
  db: string;
  /** Fixed port (to restart on the same address); 0 lets the OS choose (the default). */
  port?: number;
  /** Extra `serve` flags. */
  flags?: string[];
  env?: Record<string, string>;
  /** How long to wait for "hookbucket listening" (default 20 s). */
  startTimeoutMs?: number;
}

export interface ServeHandle {
  proc: HookbucketProcess;
  url: string;
  /** Spawn to "hookbucket listening", ms. */
  startMs: number;
}

/**
 * `hookbucket --db <db> serve --host 127.0.0.1 --port <port> --min-free-disk 0 [flags]`, resolved
 * once it logs that it listens. The disk floor is 0 unless the flags set one, so the suite does
 * not depend on the free space of the machine it runs on.
 */
export async function startServe(o: ServeOptions): Promise<ServeHandle> {
  const flags = o.flags ?? [];
  const args = ['--db', o.db, 'serve', '--host', '127.0.0.1', '--port', String(o.port ?? 0)];
  // Several receivers run on one host: each takes a free admin port unless the flags say otherwise.
  if (!flags.includes('--admin-port') && !flags.includes('--no-admin')) args.push('--admin-port', '0');
  if (!flags.includes('--min-free-disk')) args.push('--min-free-disk', '0');
  const proc = new HookbucketProcess([...args, ...flags], o.env);
  try {
    const line = await proc.waitForLog(/^hookbucket listening$/, o.startTimeoutMs ?? 20_000);
    return { proc, url: String(line.url), startMs: performance.now() - proc.startedAt };
  } catch (e) {
    await proc.kill9();
    throw e;
  }
}

/** `hookbucket --db <db> worker [flags]`, resolved once it says it is active or standing by. */
export async function startWorkerProcess(o: {
  db: string;
  flags?: string[];
  env?: Record<string, string>;
  timeoutMs?: number;
}): Promise<HookbucketProcess> {
  const proc = new HookbucketProcess(['--db', o.db, 'worker', ...(o.flags ?? [])], o.env);
  try {
    await proc.waitForLog(/^drain worker (active|standing by)/, o.timeoutMs ?? 20_000);
    return proc;
  } catch (e) {
    await proc.kill9();
    throw e;
  }
}

export interface CliRun {
  code: number | null;
  signal: NodeJS.Signals | null;
  stdout: string;
  stderr: string;
  ms: number;
}

/** A one-shot command (`bucket create …`); killed past timeoutMs. */
export async function runHookbucket(args: string[], o: { env?: Record<string, string>; timeoutMs?: number } = {}): Promise<CliRun> {
  const proc = new HookbucketProcess(args, o.env);
  const timer = setTimeout(() => proc.child.kill('SIGKILL'), o.timeoutMs ?? 60_000);
  const e = await proc.exited;
  clearTimeout(timer);
  const stderr = proc.logs.map((l) => (typeof l.msg === 'string' && Object.keys(l).length === 1 ? l.msg : JSON.stringify(l))).join('\n');
  return { ...e, stdout: proc.stdout, stderr, ms: performance.now() - proc.startedAt };
}

/** `runHookbucket`, throwing unless it exits 0. */
export async function hookbucket(args: string[], o: { env?: Record<string, string>; timeoutMs?: number } = {}): Promise<CliRun> {
  const r = await runHookbucket(args, o);
  if (r.code !== 0) throw new Error(`hookbucket ${args.join(' ')} exited ${r.code ?? r.signal}: ${r.stderr.slice(0, 500)}`);
  return r;
}

/** A port free on 127.0.0.1 now (for a receiver that must come back on the same address). */
export function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

export const HOLDER = fileURLToPath(new URL('./sqlite-holder.js', import.meta.url));

/** Another process holding SQLite's write lock (`write`) or a read snapshot (`read`) for `ms`; resolved once held. */
export async function holdLock(db: string, mode: 'write' | 'read', ms: number): Promise<HookbucketProcess> {
  const p = new HookbucketProcess([db, mode, String(ms)], {}, HOLDER);
  const end = performance.now() + 15_000;
  while (!/held/.test(p.stdout)) {
    if (p.exit) throw new Error(`${p.describe()} exited (${p.exit.code ?? p.exit.signal}): ${p.tail(5)}`);
    if (performance.now() > end) {
      await p.kill9();
      throw new Error(`${p.describe()} did not take its lock within 15 s`);
    }
    await new Promise((r) => setTimeout(r, 10));
  }
  return p;
}

import { execFile } from 'node:child_process';
import { Writable } from 'node:stream';
import { fileURLToPath } from 'node:url';
import { runCli as runProgram } from '../../src/cli/index.js';
import type { CliIo } from '../../src/cli/io.js';

export const BIN = fileURLToPath(new URL('../../src/cli/bin.js', import.meta.url));

export interface CliResult {
  code: number;
  stdout: Buffer;
  stderr: string;
  text: string;
  json: <T = any>() => T;
}

/** Runs the real CLI binary (compiled dist/src/cli/bin.js) in a child process. */
export function runCli(args: string[], env: Record<string, string> = {}): Promise<CliResult> {
  return new Promise((resolve) => {
    execFile(
      process.execPath,
      [BIN, ...args],
      { encoding: 'buffer', env: { ...process.env, NO_COLOR: '1', ...env }, maxBuffer: 256 * 1024 * 1024 },
      (err, stdout, stderr) => {
        const code = err ? (typeof (err as { code?: unknown }).code === 'number' ? (err as { code: number }).code : 1) : 0;
        const text = stdout.toString('utf8');
        resolve({ code, stdout, stderr: stderr.toString('utf8'), text, json: () => JSON.parse(text) });
      },
    );
  });
}

/**
 * The same program in-process, for long tables of cases where a process per case is too slow: the
 * exit code runCli returns is the one bin.ts exits with.
 */
export async function runInProcess(args: string[]): Promise<{ code: number; stdout: string; stderr: string }> {
  let stdout = '';
  let stderr = '';
  const sink = (append: (s: string) => void) =>
    new Writable({
      write: (chunk, _enc, done) => {
        append(String(chunk));
        done();
      },
    });
  const io: CliIo = {
    stdout: sink((s) => (stdout += s)),
    stderr: sink((s) => (stderr += s)),
    env: {},
    dotenv: {},
    waitForSignal: () => new Promise(() => {}),
  };
  const code = await runProgram(['node', 'hookbucket', ...args], io);
  return { code, stdout, stderr };
}

import { execFile } from 'node:child_process';
import { fileURLToPath } from 'node:url';

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

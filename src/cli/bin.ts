#!/usr/bin/env node
// CLI entry: the only place (with main.ts) that touches process.* — argv, env, signals, exit code.
import { readFileSync } from 'node:fs';
import { parseEnv } from 'node:util';
import { runCli } from './index.js';

function readDotenv(): Record<string, string> {
  try {
    return parseEnv(readFileSync('.env', 'utf8')) as Record<string, string>;
  } catch {
    return {};
  }
}

// Installed only by commands that run until stopped (serve), so Ctrl-C still ends the others.
const waitForSignal = () =>
  new Promise<string>((resolve) => {
    for (const s of ['SIGINT', 'SIGTERM'] as const) process.once(s, () => resolve(s));
  });

const code = await runCli(process.argv, {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
  dotenv: readDotenv(),
  waitForSignal,
});
process.exitCode = code;
// Leave nothing running: a finished command exits even if a handle (e.g. a signal listener) remains.
process.stdout.write('', () => process.exit(code));

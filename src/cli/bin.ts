#!/usr/bin/env node
// CLI entry: the only place (with main.ts) that touches process.* — argv, env, signals, exit code.
import { readFileSync } from 'node:fs';
import { parseEnv } from 'node:util';
import { runCli } from './index.js';
import { InterruptController, STOP_SIGNALS, type StopSignal } from './interrupt.js';

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

/** Flushes stdout, then exits: the way out after a command. */
const exit = (code: number) => {
  process.exitCode = code;
  process.stdout.write('', () => process.exit(code));
};

// Listens only while a command has something to put back (a progress bar, a partial file).
const interrupt = new InterruptController({
  listen: (handler) => {
    const listeners = STOP_SIGNALS.map((s) => [s, () => handler(s as StopSignal)] as const);
    for (const [s, l] of listeners) process.on(s, l);
    return () => {
      for (const [s, l] of listeners) process.off(s, l);
    };
  },
  // At once, output not waited for: after Ctrl-C a reader that stopped reading (a full pipe) must
  // not keep the process alive.
  exit: (code) => {
    process.exitCode = code;
    process.exit(code);
  },
});

const code = await runCli(process.argv, {
  stdout: process.stdout,
  stderr: process.stderr,
  stdin: process.stdin,
  env: process.env,
  dotenv: readDotenv(),
  waitForSignal,
  interrupt,
});
// Leave nothing running: a finished command exits even if a handle (e.g. a signal listener) remains.
// After Ctrl-C, at once: a full pipe on stdout must not hold the process.
if (interrupt.interrupted) process.exit(code);
else exit(code);

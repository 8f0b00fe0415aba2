import type { Command } from 'commander';
import { loadConfig, type Config, type Flags } from '../config/config.js';
import { ApiClient, parseApiUrl, type ApiTarget } from '../remote/api-client.js';
import { RemoteStore } from '../remote/remote-store.js';
import { systemClock } from '../shared/clock.js';
import { AppError, isAppError } from '../shared/errors.js';
import { didYouMean } from '../policy/did-you-mean.js';
import { openStore } from '../store/open-store.js';
import type { Store } from '../store/store.js';
import { interruptOf, printErr, type CliIo } from './io.js';

/** The configuration warnings already printed, per run: a command that reads its configuration twice warns once. */
const warned = new WeakMap<CliIo, Set<string>>();

/**
 * Resolves configuration for a command: its own flags plus the global --db, --db-pool and
 * --spool-dir. Its warnings (an environment duration or size without a unit) go to stderr.
 */
export function configFor(cmd: Command, io: CliIo, flags: Flags = {}): Config {
  const globals = cmd.optsWithGlobals<{ db?: string; dbPool?: number; spoolDir?: string }>();
  return loadConfig(
    io.env,
    io.dotenv,
    {
      ...flags,
      ...(globals.db !== undefined ? { db: globals.db } : {}),
      ...(globals.dbPool !== undefined ? { dbPool: globals.dbPool } : {}),
      ...(globals.spoolDir !== undefined ? { spoolDir: globals.spoolDir } : {}),
    },
    (message) => {
      const seen = warned.get(io) ?? new Set<string>();
      warned.set(io, seen);
      if (seen.has(message)) return;
      seen.add(message);
      printErr(io, `warning: ${message}`);
    },
  );
}

/**
 * The remote server a command runs against, if any: `--api <url>`, else HOOKBUCKET_API from the
 * environment, else from `.env` (the precedence of every setting); the token is
 * HOOKBUCKET_ADMIN_TOKEN from the same places. An explicit `--db` means this host's database, so
 * HOOKBUCKET_API does not apply; `--api` with `--db` is a usage error.
 */
export function remoteTarget(cmd: Command, io: CliIo): ApiTarget | undefined {
  const globals = cmd.optsWithGlobals<{ db?: string; api?: string }>();
  if (globals.api !== undefined && globals.db !== undefined) {
    throw new AppError('usage', '--api and --db cannot be combined: --api runs the command on a remote server, --db on a database here');
  }
  if (globals.db !== undefined) return undefined;
  const pick = (key: string) => io.env[key] ?? io.dotenv[key];
  const url = globals.api ?? pick('HOOKBUCKET_API');
  if (url === undefined || url === '') return undefined;
  return { url: parseApiUrl(url), token: pick('HOOKBUCKET_ADMIN_TOKEN') ?? '' };
}

/** Commands that need the database itself, not the API: refused with --api (or HOOKBUCKET_API). */
const NEEDS_DATABASE = new Set(['serve', 'worker', 'prune', 'migrate-data', 'requests import', 'backup']);

function commandPath(cmd: Command): string {
  const names: string[] = [];
  for (let c: Command | null = cmd; c?.parent; c = c.parent) names.unshift(c.name());
  return names.join(' ');
}

/** The program's preAction check: --api with --db, and --api given to a command that needs the database. */
export function checkRemote(cmd: Command, io: CliIo): void {
  const target = remoteTarget(cmd, io);
  const path = commandPath(cmd);
  if (target !== undefined && NEEDS_DATABASE.has(path)) {
    const from = cmd.optsWithGlobals<{ api?: string }>().api !== undefined ? '--api' : 'HOOKBUCKET_API';
    throw new AppError(
      'usage',
      `${path} needs the database itself and cannot run through the API (${from}): run it on the server's host with --db${from === 'HOOKBUCKET_API' ? ', or unset HOOKBUCKET_API' : ''}`,
    );
  }
}

/**
 * How long a CLI command waits for the write lock: 10 s, against ingest's `--lock-timeout` (2 s).
 * SQLite's busy handler is not fair (a waiter sleeps and retries; a writer that commits and begins
 * again often wins), so under ingest and drain load an operator's command can wait several of
 * ingest's 2 s windows. A person at a terminal can wait where a webhook sender cannot.
 */
export const CLI_LOCK_WAIT_MS = 10_000; // 10s

/**
 * Opens the store for one command and closes it after: the database (created and migrated when
 * missing), or with --api the remote server's admin API behind the same contract (RemoteStore).
 */
export async function withStore<T>(cmd: Command, io: CliIo, fn: (store: Store) => Promise<T>): Promise<T> {
  const target = remoteTarget(cmd, io);
  let store: Store;
  let api: ApiClient | undefined;
  if (target !== undefined) {
    api = new ApiClient(target);
    store = new RemoteStore(api);
  } else {
    const config = configFor(cmd, io);
    store = await openStore(config, { clock: systemClock }).store({ lockWaitMs: CLI_LOCK_WAIT_MS });
  }
  try {
    return await fn(store);
  } catch (e) {
    throw await withSuggestion(e, store);
  } finally {
    // After Ctrl-C a request may still be in flight (an export on a slow link): not waited for.
    if (api !== undefined && interruptOf(io).interrupted) await api.destroy();
    else await store.close();
  }
}

/** A bucket not found gets the existing names close to it: `bucket strpe not found; did you mean stripe?` (exit code unchanged). */
async function withSuggestion(e: unknown, store: Store): Promise<unknown> {
  if (!isAppError(e) || e.code !== 'not_found' || e.bucket === undefined) return e;
  let names: string[];
  try {
    names = (await store.listBuckets()).filter((b) => b.deletingAt === null).map((b) => b.name);
  } catch {
    return e;
  }
  const hint = didYouMean(e.bucket, names);
  return hint === '' ? e : new AppError('not_found', `${e.message}${hint}`, { cause: e, bucket: e.bucket });
}

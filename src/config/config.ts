import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { redactDbUrl } from '../policy/redact.js';
import { AppError } from '../shared/errors.js';
import { isDatabaseUrl } from './database-url.js';
import { parsePublicUrl } from '../policy/public-url.js';
import { formatDuration, formatSize, isBareNumber, parseBoolean, parseDuration, parseInteger, parseSize, unitHint } from './units.js';

export type Durability = 'full' | 'normal';

export interface Config {
  /** SQLite database file, or a `postgres://` / `postgresql://` URL (taken as is: no path processing). */
  readonly db: string;
  /** Connections at most in the PostgreSQL pool (unused on SQLite). */
  readonly dbPool: number;
  /**
   * Folder for request bodies spooled to disk while they arrive and for `requests import`'s private
   * copies. Default: `<db>-spool` beside a SQLite file (where earlier releases kept it), `data/spool`
   * for a PostgreSQL URL.
   */
  readonly spoolDir: string;
  readonly port: number;
  readonly host: string;
  /** HOOKBUCKET_PUBLIC_URL without a trailing slash; '' when unset (bucket URLs then use serve's recorded address). */
  readonly publicUrl: string;
  /** `full`: WAL + synchronous=FULL, an ack survives power loss. `normal`: survives a process crash only. */
  readonly durability: Durability;
  /** Take the peer address from the last X-Forwarded-For entry (set by the proxy in front). */
  readonly trustProxy: boolean;
  /** Body bytes in flight across all requests before ingest answers 503. */
  readonly maxInflightBytes: number;
  /** Free disk under this floor makes ingest answer 503 and /healthz degraded. */
  readonly minFreeDisk: number;
  /** Longest wait for SQLite's write lock before a request gets 503 (Slack allows 3 s for an ack). */
  readonly lockTimeoutMs: number;
  readonly headersTimeoutMs: number;
  readonly requestTimeoutMs: number;
  readonly logLevel: string;
  /** The drain worker's delivery log: a summary per active bucket, and failures after the first counted, once per this. */
  readonly logIntervalMs: number;
  /** Run the drain worker inside `serve` (`--no-worker` turns it off). */
  readonly worker: boolean;
  /** Lease on a claimed delivery; must exceed every bucket's attempt timeout. */
  readonly leaseMs: number;
  /** On SIGTERM, how long in-flight deliveries may take to finish before they are released. */
  readonly shutdownGraceMs: number;
  /** Run the admin listener inside `serve` (`--no-admin` turns it off). */
  readonly admin: boolean;
  /** Port of the admin listener (0: any free port; serve logs the one it bound). */
  readonly adminPort: number;
  /** Address the admin listener binds; beyond loopback only with an admin token (checkAdminListener). */
  readonly adminHost: string;
  /** Extra names the admin listener answers to in `Host` (DNS rebinding guard), each `name` or `name:port`. */
  readonly adminHostNames: readonly string[];
  /** HOOKBUCKET_ADMIN_TOKEN; empty means none (the admin listener is then open, and loopback only). */
  readonly adminToken: string;
  /** Longest an admin read may take (its own thread on SQLite, statement_timeout on PostgreSQL); past it the API answers 503 query_timeout. */
  readonly adminQueryBudgetMs: number;
  /** `/metrics`: one attempt-duration histogram per bucket instead of one for all (10,000 buckets: over 100k series). */
  readonly metricsBucketHistograms: boolean;
  /** `worker --metrics-port`: a standalone worker's own /metrics listener; null: none. */
  readonly metricsPort: number | null;
  /** Its address; beyond loopback only with HOOKBUCKET_ADMIN_TOKEN. */
  readonly metricsHost: string;
}

/** Every setting, its environment variable, default and meaning: the source of `.env.example`. */
export const settings = [
  {
    key: 'db',
    env: 'HOOKBUCKET_DB',
    default: 'data/hookbucket.db',
    meaning: 'SQLite database file (created and migrated when missing), or a postgres:// or postgresql:// URL',
  },
  {
    key: 'dbPool',
    env: 'HOOKBUCKET_DB_POOL',
    default: '10',
    meaning: 'connections at most in the PostgreSQL pool (1 to 1000; unused on SQLite)',
  },
  {
    key: 'spoolDir',
    env: 'HOOKBUCKET_SPOOL_DIR',
    default: '',
    meaning:
      'folder for bodies spooled while they arrive and for import copies (empty: <db>-spool beside a SQLite file, data/spool for a PostgreSQL URL)',
  },
  { key: 'port', env: 'HOOKBUCKET_PORT', default: '8787', meaning: 'port serve listens on' },
  { key: 'host', env: 'HOOKBUCKET_HOST', default: '0.0.0.0', meaning: 'address serve binds to' },
  {
    key: 'publicUrl',
    env: 'HOOKBUCKET_PUBLIC_URL',
    default: '',
    meaning:
      'the URL senders reach serve at (behind a proxy: its public URL); bucket create and show print bucket URLs with it (empty: the address a running serve recorded, else a placeholder)',
  },
  {
    key: 'durability',
    env: 'HOOKBUCKET_DURABILITY',
    default: 'full',
    meaning: 'full = ack survives power loss (synchronous=FULL); normal = survives a process crash only',
  },
  {
    key: 'trustProxy',
    env: 'HOOKBUCKET_TRUST_PROXY',
    default: 'false',
    meaning: 'take the peer address from X-Forwarded-For (only behind your own reverse proxy)',
  },
  {
    key: 'maxInflightBytes',
    env: 'HOOKBUCKET_MAX_INFLIGHT_BYTES',
    default: '256MiB',
    meaning: 'body bytes in flight across all requests before ingest answers 503',
  },
  {
    key: 'minFreeDisk',
    env: 'HOOKBUCKET_MIN_FREE_DISK',
    default: '1GiB',
    meaning: 'free disk floor; below it ingest answers 503 and /healthz is degraded',
  },
  {
    key: 'lockTimeoutMs',
    env: 'HOOKBUCKET_LOCK_TIMEOUT',
    default: '2s',
    meaning: 'longest wait for the write lock before ingest answers 503',
  },
  {
    key: 'headersTimeoutMs',
    env: 'HOOKBUCKET_HEADERS_TIMEOUT',
    default: '10s',
    meaning: 'a client must send all headers within this time (slowloris guard)',
  },
  {
    key: 'requestTimeoutMs',
    env: 'HOOKBUCKET_REQUEST_TIMEOUT',
    default: '60s',
    meaning: 'a client must send the whole request within this time',
  },
  { key: 'logLevel', env: 'HOOKBUCKET_LOG_LEVEL', default: 'info', meaning: 'log level: fatal, error, warn, info, debug, trace or silent' },
  {
    key: 'logIntervalMs',
    env: 'HOOKBUCKET_LOG_INTERVAL',
    default: '1m',
    meaning:
      "the drain worker's delivery log: a summary line per active bucket this often, and failures after the first counted in one line per bucket this often",
  },
  {
    key: 'worker',
    env: 'HOOKBUCKET_WORKER',
    default: 'true',
    meaning: 'run the drain worker inside serve (false: serve only stores; run hookbucket worker elsewhere)',
  },
  {
    key: 'leaseMs',
    env: 'HOOKBUCKET_LEASE',
    default: '60s',
    meaning: 'lease on a claimed delivery; must be longer than every bucket attempt timeout',
  },
  {
    key: 'shutdownGraceMs',
    env: 'HOOKBUCKET_SHUTDOWN_GRACE',
    default: '10s',
    meaning: 'on SIGTERM, time in-flight deliveries get to finish before they are released',
  },
  { key: 'admin', env: 'HOOKBUCKET_ADMIN', default: 'true', meaning: 'run the admin listener (API, metrics) inside serve (false: none)' },
  {
    key: 'adminPort',
    env: 'HOOKBUCKET_ADMIN_PORT',
    default: '8788',
    meaning: 'port of the admin listener (0: any free port, logged at start)',
  },
  {
    key: 'adminHost',
    env: 'HOOKBUCKET_ADMIN_HOST',
    default: '127.0.0.1',
    meaning: 'address the admin listener binds to; a non-loopback address needs HOOKBUCKET_ADMIN_TOKEN',
  },
  {
    key: 'adminHostNames',
    env: 'HOOKBUCKET_ADMIN_HOST_NAMES',
    default: '',
    meaning: 'comma-separated extra names accepted in the admin Host header (name or name:port), besides the bound address and localhost',
  },
  {
    key: 'adminToken',
    env: 'HOOKBUCKET_ADMIN_TOKEN',
    default: '',
    meaning: 'admin token, at least 32 characters (empty: no auth, loopback only); clients send Authorization: Bearer <token>',
  },
  {
    key: 'adminQueryBudgetMs',
    env: 'HOOKBUCKET_ADMIN_QUERY_BUDGET',
    default: '10s',
    meaning: 'longest an admin API read may take before it answers 503 query_timeout',
  },
  {
    key: 'metricsBucketHistograms',
    env: 'HOOKBUCKET_METRICS_BUCKET_HISTOGRAMS',
    default: 'false',
    meaning: '/metrics: an attempt-duration histogram per bucket (true) instead of one for all buckets (false)',
  },
  {
    key: 'metricsPort',
    env: 'HOOKBUCKET_METRICS_PORT',
    default: '',
    meaning: 'worker: port of its own /metrics listener (empty: none; 0: any free port)',
  },
  {
    key: 'metricsHost',
    env: 'HOOKBUCKET_METRICS_HOST',
    default: '127.0.0.1',
    meaning: 'worker: address of its /metrics listener (beyond loopback only with HOOKBUCKET_ADMIN_TOKEN)',
  },
] as const;

export type SettingKey = (typeof settings)[number]['key'];
export type Flags = Partial<Record<SettingKey, string | number | boolean>>;
type Source = Readonly<Record<string, string | undefined>>;

function bad(what: string, value: unknown): never {
  throw new AppError('invalid_option', `invalid ${what}: ${JSON.stringify(value)}`);
}

/**
 * Where a value came from: a flag refuses a number without a unit (exit 2); an environment
 * variable or `.env` still reads it as ms or bytes for one release, and says so through `warn`.
 */
interface ValueSource {
  readonly fromEnv: boolean;
  /** `HOOKBUCKET_LEASE=60000`, `HOOKBUCKET_LEASE=60000 in .env`: the setting as written, for a warning. */
  written(raw: string): string;
  warn(message: string): void;
}

/** A duration setting: no silent units on the command line; the old bare-ms reading, warned, in the environment. */
function durationSetting(raw: string, name: string, src: ValueSource): number {
  if (isBareNumber(raw)) {
    if (!src.fromEnv)
      throw new AppError('invalid_option', `invalid ${name}: ${JSON.stringify(raw)} has no unit: ${unitHint(raw, 'duration')}`);
    const ms = positive(parseDuration(raw, 'ms'), name, raw);
    src.warn(
      `${src.written(raw)} has no unit: read as ${ms} ms (${formatDuration(ms)}); write ${raw.trim()}ms or ${formatDuration(ms)}. A future release will refuse a number without a unit`,
    );
    return ms;
  }
  return positive(parseDuration(raw), name, raw);
}

/** A size setting: as durationSetting, a bare number being bytes. */
function sizeSetting(raw: string, name: string, src: ValueSource): number {
  if (isBareNumber(raw)) {
    if (!src.fromEnv) throw new AppError('invalid_option', `invalid ${name}: ${JSON.stringify(raw)} has no unit: ${unitHint(raw, 'size')}`);
    const n = parseSize(raw, 'bytes') ?? bad(name, raw);
    src.warn(
      `${src.written(raw)} has no unit: read as ${n} bytes (${formatSize(n)}); write ${raw.trim()}B or ${formatSize(n).replace(' ', '')}. A future release will refuse a number without a unit`,
    );
    return n;
  }
  return parseSize(raw) ?? bad(name, raw);
}

const parsers: { [K in SettingKey]: (raw: string, name: string, src: ValueSource) => Config[K] } = {
  db: (raw, name) => (raw.trim() === '' ? bad(name, raw) : isDatabaseUrl(raw) ? databaseUrl(raw, name) : raw),
  dbPool: (raw, name) => parseInteger(raw, 1, MAX_DB_POOL) ?? bad(`${name} (1 to ${MAX_DB_POOL})`, raw),
  // Resolved against db in loadConfig when empty.
  spoolDir: (raw) => raw.trim(),
  port: (raw, name) => parseInteger(raw, 0, 65535) ?? bad(name, raw),
  host: (raw, name) => (raw.trim() === '' ? bad(name, raw) : raw.trim()),
  publicUrl: (raw, name) =>
    raw.trim() === ''
      ? ''
      : (parsePublicUrl(raw) ?? bad(`${name} (an http:// or https:// URL without credentials, query or fragment)`, raw)),
  durability: (raw, name) => (raw === 'full' || raw === 'normal' ? raw : bad(`${name} (full|normal)`, raw)),
  trustProxy: (raw, name) => parseBoolean(raw) ?? bad(name, raw),
  maxInflightBytes: (raw, name, src) => positive(sizeSetting(raw, name, src), name, raw),
  minFreeDisk: sizeSetting,
  lockTimeoutMs: durationSetting,
  headersTimeoutMs: durationSetting,
  requestTimeoutMs: durationSetting,
  worker: (raw, name) => parseBoolean(raw) ?? bad(name, raw),
  leaseMs: durationSetting,
  logIntervalMs: durationSetting,
  shutdownGraceMs: durationSetting,
  admin: (raw, name) => parseBoolean(raw) ?? bad(name, raw),
  adminPort: (raw, name) => parseInteger(raw, 0, 65535) ?? bad(name, raw),
  // `[::1]` as written in a URL binds as `::1`.
  adminHost: (raw, name) => (raw.trim() === '' ? bad(name, raw) : raw.trim().replace(/^\[(.*)\]$/, '$1')),
  adminHostNames: (raw, name) => {
    const names = raw
      .split(',')
      .map((n) => n.trim().toLowerCase())
      .filter((n) => n !== '');
    for (const n of names) if (!isHostName(n)) bad(`${name} (a host name, IP address or [IPv6], optionally :port)`, n);
    return Object.freeze(names);
  },
  // Never echoed: a refused token would print it.
  adminToken: (raw) => raw,
  adminQueryBudgetMs: durationSetting,
  metricsBucketHistograms: (raw, name) => parseBoolean(raw) ?? bad(name, raw),
  metricsPort: (raw, name) => (raw.trim() === '' ? null : (parseInteger(raw, 0, 65535) ?? bad(name, raw))),
  metricsHost: (raw, name) => (raw.trim() === '' ? bad(name, raw) : raw.trim()),
  logLevel: (raw, name) => (['fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'].includes(raw) ? raw : bad(name, raw)),
};

/** A PostgreSQL server's default max_connections is 100; a pool past this is a typo. */
const MAX_DB_POOL = 1000;

/** A database URL must parse; the error shows it with its password redacted. */
function databaseUrl(raw: string, name: string): string {
  try {
    new URL(raw);
  } catch {
    bad(name, redactDbUrl(raw));
  }
  return raw;
}

/** The spool folder: as given, else beside a SQLite file (`<db>-spool`, as before --spool-dir), else data/spool. */
function spoolDirOf(spoolDir: string, db: string): string {
  if (spoolDir !== '') return spoolDir;
  if (isDatabaseUrl(db)) return join('data', 'spool');
  return spoolDirFor(db);
}

/** The spool folder for a SQLite database: beside it, on the same disk that --min-free-disk watches; a temp folder for `:memory:`. */
export function spoolDirFor(db: string): string {
  if (db === ':memory:' || db === '') return join(tmpdir(), 'hookbucket-spool');
  return `${db}-spool`;
}

function positive(n: number | undefined, name: string, raw: string): number {
  return n !== undefined && n > 0 ? n : bad(name, raw);
}

/**
 * Precedence: flags > HOOKBUCKET_* environment > `.env` file > defaults. Pure: the caller reads
 * the environment and the `.env` file and passes them in, and shows the warnings `warn` is given
 * (a duration or size in the environment without a unit, read the old way for now).
 */
export function loadConfig(env: Source, dotenv: Source, flags: Flags = {}, warn: (message: string) => void = () => {}): Config {
  const out: Record<string, unknown> = {};
  const fromFlag: ValueSource = { fromEnv: false, written: (raw) => raw, warn };
  for (const s of settings) {
    const flag = flags[s.key];
    if (flag !== undefined) {
      out[s.key] = parsers[s.key](String(flag), `--${kebab(s.key)}`, fromFlag);
      continue;
    }
    const fromEnv = env[s.env];
    const fromFile = dotenv[s.env];
    const [raw, name, where] =
      fromEnv !== undefined
        ? [fromEnv, s.env, '']
        : fromFile !== undefined
          ? [fromFile, `${s.env} in .env`, ' in .env']
          : [s.default, s.env, ''];
    const src: ValueSource = { fromEnv: true, written: (v) => `${s.env}=${v.trim()}${where}`, warn };
    out[s.key] = parsers[s.key](raw, name, src);
  }
  if ((out.headersTimeoutMs as number) > (out.requestTimeoutMs as number)) {
    throw new AppError('invalid_option', 'HOOKBUCKET_HEADERS_TIMEOUT must not exceed HOOKBUCKET_REQUEST_TIMEOUT');
  }
  out.spoolDir = spoolDirOf(out.spoolDir as string, out.db as string);
  return Object.freeze(out) as unknown as Config;
}

/** A `Host` value as `--admin-host-name` takes it: a DNS name, IPv4 or [IPv6], optionally with :port. */
function isHostName(n: string): boolean {
  return /^(?:[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)*|\[[0-9a-f:.]+\])(?::\d{1,5})?$/.test(n);
}

/** Admin tokens shorter than this are refused: the token is the only secret between a browser and the admin API. */
export const MIN_ADMIN_TOKEN_LENGTH = 32;

/** Whether an address to bind is loopback: 127.0.0.0/8, ::1 (also IPv4-mapped) or `localhost`. */
export function isLoopbackAddress(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost' || h === '::1' || h === '0:0:0:0:0:0:0:1') return true;
  const v4 = h.startsWith('::ffff:') ? h.slice(7) : h;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

/**
 * The rules `serve` checks before it opens anything, as usage errors (exit 2): a token shorter than
 * 32 characters, and an admin listener beyond loopback without a token (anyone who can reach the
 * port could read every stored request and replay it). Other commands never read these settings.
 */
export function checkAdminListener(config: Config): void {
  if (!config.admin) return;
  if (config.adminToken !== '' && config.adminToken.length < MIN_ADMIN_TOKEN_LENGTH) {
    throw new AppError(
      'invalid_option',
      `HOOKBUCKET_ADMIN_TOKEN is ${config.adminToken.length} characters; use at least ${MIN_ADMIN_TOKEN_LENGTH} (e.g. openssl rand -hex 32)`,
    );
  }
  // A header value loses surrounding spaces on the way, and bytes beyond ASCII do not survive every
  // client: such a token could never be presented.
  if (config.adminToken !== '' && !/^[\x21-\x7e]+$/.test(config.adminToken)) {
    throw new AppError('invalid_option', 'HOOKBUCKET_ADMIN_TOKEN must be printable ASCII without spaces (e.g. openssl rand -hex 32)');
  }
  if (config.adminToken === '' && !isLoopbackAddress(config.adminHost)) {
    throw new AppError(
      'usage',
      `refusing to start the admin listener on ${config.adminHost} without HOOKBUCKET_ADMIN_TOKEN: beyond loopback anyone who reaches the port could read and replay every stored request. Set HOOKBUCKET_ADMIN_TOKEN (at least ${MIN_ADMIN_TOKEN_LENGTH} characters, and put TLS in front), bind --admin-host 127.0.0.1, or pass --no-admin`,
    );
  }
}

function kebab(key: string): string {
  return key.replace(/[A-Z]/g, (c) => `-${c.toLowerCase()}`).replace(/-ms$/, '');
}

/**
 * Typed errors with a stable `code`. The code is the JSON `code` field of an HTTP error body and
 * the first word of a CLI error message, so scripts can match on it (as undici's UND_ERR_* codes).
 */
export type ErrorCode =
  | 'usage'
  | 'invalid_input'
  | 'confirmation_required'
  | 'invalid_name'
  | 'invalid_option'
  /** A verify or sign secret its scheme refuses (format, length, a control character); the message never holds it (exit 2, HTTP 400). */
  | 'invalid_secret'
  /** `--verify` or `--sign` with no secret from any source (exit 2, HTTP 400). */
  | 'secret_required'
  | 'not_found'
  /** `requests verify` on a bucket without `--verify`: there is nothing to check against (exit 2, HTTP 400). */
  | 'verify_not_configured'
  | 'bucket_exists'
  | 'bucket_not_empty'
  | 'bucket_deleting'
  | 'unknown_bucket'
  | 'store_busy'
  | 'storage_full'
  | 'storage_error'
  | 'worker_active'
  | 'database_in_use'
  | 'target_not_empty'
  | 'id_collision'
  | 'schema_mismatch'
  | 'raw_to_terminal'
  | 'port_in_use'
  /** A bucket's attempt timeout is not shorter than the worker's lease: it would never be delivered (exit 2, HTTP 400). */
  | 'timeout_exceeds_lease'
  /**
   * A destination (`--destination`, `replay --to`) that the `destinations` setting refuses: a literal
   * address or a name resolving to one (exit 2, HTTP 400). Also the error class of an attempt the
   * drain refused to connect (src/drain/destination-guard.ts).
   */
  | 'destination_refused'
  /** An admin read ran past its time budget (the admin API answers 503). */
  | 'query_timeout'
  /** Too many admin reads already waiting; try again shortly (the admin API answers 503). */
  | 'admin_busy'
  /** The CLI's --api server could not be reached (connection refused, DNS, TLS, timeout). */
  | 'api_unreachable'
  /** The --api server refused the token (401): HOOKBUCKET_ADMIN_TOKEN missing or wrong. */
  | 'unauthorized'
  /** The --api server answered something that is not the API (a redirect, HTML, a proxy's error page). */
  | 'api_error'
  /** What the command asked for has no API route yet: run it on the host with --db. */
  | 'remote_unsupported'
  /** `backup` of a PostgreSQL database: use pg_dump. */
  | 'backup_unsupported'
  /** `backup`: the target file exists (without --force), or looks like a database in use. */
  | 'target_exists'
  /** `backup`: the copy failed PRAGMA integrity_check (the copy is removed). */
  | 'backup_failed'
  | 'internal';

/** CLI exit codes, the same for every command (README "Exit codes"). */
export const ExitCode = {
  ok: 0,
  failure: 1,
  usage: 2,
  checkFailed: 3,
  notFound: 4,
} as const;

const exitByCode: Partial<Record<ErrorCode, number>> = {
  usage: ExitCode.usage,
  invalid_input: ExitCode.usage,
  confirmation_required: ExitCode.usage,
  invalid_name: ExitCode.usage,
  invalid_option: ExitCode.usage,
  invalid_secret: ExitCode.usage,
  secret_required: ExitCode.usage,
  raw_to_terminal: ExitCode.usage,
  backup_unsupported: ExitCode.usage,
  target_exists: ExitCode.usage,
  timeout_exceeds_lease: ExitCode.usage,
  destination_refused: ExitCode.usage,
  not_found: ExitCode.notFound,
  verify_not_configured: ExitCode.usage,
  bucket_exists: ExitCode.failure,
  bucket_not_empty: ExitCode.failure,
  bucket_deleting: ExitCode.failure,
};

export class AppError extends Error {
  readonly code: ErrorCode;
  /** A `not_found` for a bucket name: the name (the CLI suggests existing names close to it). */
  readonly bucket: string | undefined;
  constructor(code: ErrorCode, message: string, options?: { cause?: unknown; bucket?: string }) {
    super(message, options);
    this.name = 'AppError';
    this.code = code;
    this.bucket = options?.bucket;
  }
  get exitCode(): number {
    return exitByCode[this.code] ?? ExitCode.failure;
  }
}

/** `bucket <name> not found` (exit 4, HTTP 404), carrying the name for a "did you mean". */
export function bucketNotFound(name: string): AppError {
  return new AppError('not_found', `bucket ${name} not found`, { bucket: name });
}

export function isAppError(e: unknown): e is AppError {
  return e instanceof AppError;
}

/**
 * Ends a command with a non-zero exit code after it has printed its own result (a replay that did
 * not all deliver, a failing health check): not an error, so nothing more is printed.
 */
export class ExitWith extends Error {
  readonly exitCode: number;
  constructor(exitCode: number) {
    super(`exit ${exitCode}`);
    this.name = 'ExitWith';
    this.exitCode = exitCode;
  }
}

/**
 * Errors as the admin API answers them: `{"error": "<message>", "code": "<stable_code>"}`, the
 * codes being the CLI's (src/shared/errors.ts) with an HTTP status each (docs/api.md "Errors").
 */
import type { Context } from 'hono';
import { HTTPException } from 'hono/http-exception';
import type { ContentfulStatusCode } from 'hono/utils/http-status';
import { AppError, type ErrorCode } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { storageErrorCode } from '../store/storage-error.js';

/** Status by code; a code not listed is a 500. */
const STATUS_BY_CODE: Readonly<Partial<Record<ErrorCode | 'body_too_large' | 'unsupported_media_type', ContentfulStatusCode>>> = {
  invalid_input: 400,
  usage: 400,
  invalid_name: 400,
  invalid_option: 400,
  invalid_secret: 400,
  secret_required: 400,
  raw_to_terminal: 400,
  timeout_exceeds_lease: 400,
  destination_refused: 400,
  verify_not_configured: 400,
  not_found: 404,
  unknown_bucket: 404,
  bucket_exists: 409,
  bucket_not_empty: 409,
  bucket_deleting: 409,
  confirmation_required: 409,
  worker_active: 409,
  target_not_empty: 409,
  id_collision: 409,
  body_too_large: 413,
  unsupported_media_type: 415,
  store_busy: 503,
  storage_full: 503,
  storage_error: 503,
  query_timeout: 503,
  admin_busy: 503,
  database_in_use: 503,
  schema_mismatch: 503,
};

export function statusOf(code: string): ContentfulStatusCode {
  return STATUS_BY_CODE[code as ErrorCode] ?? 500;
}

export interface ApiError {
  status: ContentfulStatusCode;
  code: string;
  message: string;
  /** A bucket not found: its name. */
  bucket?: string;
}

/** Any thrown value as the error the API answers; unknown errors keep their message out of the answer. */
export function toApiError(e: unknown): ApiError {
  if (e instanceof AppError)
    return { status: statusOf(e.code), code: e.code, message: e.message, ...(e.bucket !== undefined ? { bucket: e.bucket } : {}) };
  // A storage driver's error (disk full, lock not granted, I/O) that no layer below turned into an AppError.
  const storage = storageErrorCode(e);
  if (storage !== undefined) return { status: 503, code: storage, message: `storage failed: ${(e as Error).message}` };
  // The CLI's value parsers (src/options) throw commander's InvalidArgumentError.
  if (e instanceof Error && (e as { code?: unknown }).code === 'commander.invalidArgument')
    return { status: 400, code: 'invalid_input', message: e.message };
  if (e instanceof HTTPException) {
    if (e.status === 413) return { status: 413, code: 'body_too_large', message: e.message || 'request body too large' };
    if (e.status === 415)
      return { status: 415, code: 'unsupported_media_type', message: 'send the body as Content-Type: application/json' };
    if (e.status === 400) return { status: 400, code: 'invalid_input', message: e.message || 'malformed request' };
    return { status: e.status as ContentfulStatusCode, code: e.status === 404 ? 'not_found' : 'internal', message: e.message };
  }
  return { status: 500, code: 'internal', message: 'internal error (see the server log)' };
}

export function errorBody(e: ApiError): { error: string; code: string } {
  return { error: e.message, code: e.code };
}

/** Hono's onError for the API app: the error shape, logged when it is the server's fault. */
export function apiErrorHandler(logger: Logger) {
  return (e: Error, c: Context) => {
    const err = toApiError(e);
    if (err.status >= 500) logger.warn({ err: e, code: err.code, method: c.req.method, path: c.req.path }, 'admin api error');
    return c.json(errorBody(err), err.status);
  };
}

/**
 * Schema failures (zod) as `invalid_input`, 400, each issue as `<where>.<field>: <message>`.
 * `target` is where the value came from: param, query or json.
 */
export function validationMessage(target: string, issues: ReadonlyArray<{ path: ReadonlyArray<PropertyKey>; message: string }>): string {
  return issues
    .map((i) => {
      const field = i.path.map(String).join('.');
      return `${target === 'json' ? 'body' : target}${field ? `.${field}` : ''}: ${i.message}`;
    })
    .join('; ');
}

import { InvalidArgumentError } from 'commander';
import { isBareNumber, noUnitMessage, parseDuration, parseInteger, parseSize } from '../config/units.js';
import { isValidBucketName } from '../ingest/bucket-name.js';
import { MAX_MAX_BODY } from '../store/bucket-defaults.js';

/** Commander argument parsers: each throws InvalidArgumentError, which the CLI maps to exit 2. */

export function bucketNameArg(value: string): string {
  if (!isValidBucketName(value)) {
    throw new InvalidArgumentError(`invalid bucket name ${JSON.stringify(value)}: use ^[a-z0-9][a-z0-9_-]{0,62}$`);
  }
  return value;
}

export function urlArg(value: string): string {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    throw new InvalidArgumentError(`not a URL: ${JSON.stringify(value)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new InvalidArgumentError('destination must be http:// or https://');
  if (u.hash) throw new InvalidArgumentError('destination must not have a #fragment');
  // undici would drop user:pass@ silently (a 401, then failed); say where credentials go instead.
  if (u.username || u.password) {
    throw new InvalidArgumentError('put credentials in --forward-header "Authorization: Basic <base64 user:pass>", not in the URL');
  }
  return value;
}

export function maxBodyArg(value: string): number {
  if (isBareNumber(value)) throw new InvalidArgumentError(noUnitMessage(value, 'size'));
  const n = parseSize(value);
  if (n === undefined || n < 1 || n > MAX_MAX_BODY) throw new InvalidArgumentError('size between 1 and 100MiB, like 25MiB or 512kb');
  return n;
}

export function sizeArg(value: string): string {
  if (isBareNumber(value)) throw new InvalidArgumentError(noUnitMessage(value, 'size'));
  if (parseSize(value) === undefined) throw new InvalidArgumentError('a size like 256MiB or 1GiB');
  return value;
}

export function durationArg(value: string): string {
  if (isBareNumber(value)) throw new InvalidArgumentError(noUnitMessage(value, 'duration'));
  const ms = parseDuration(value);
  if (ms === undefined || ms <= 0) throw new InvalidArgumentError('a positive duration like 2s, 1m30s or 500ms');
  return value;
}

/** A parser for whole numbers in [min, max]. */
export function integerArg(min: number, max: number, what = `a whole number from ${min} to ${max}`): (value: string) => number {
  return (value) => {
    const n = parseInteger(value, min, max);
    if (n === undefined) throw new InvalidArgumentError(what);
    return n;
  };
}

export const ackStatusArg = integerArg(200, 299, 'a 2xx status code');
export const limitArg = integerArg(1, 10_000);

/** `requests export --limit` (and the export route's `limit`): how many requests at most. */
export const exportLimitArg = integerArg(1, 1_000_000_000);

/**
 * An export's `--base-url` (the API's `base_url`): an http(s) URL without query or fragment, as
 * given (the raw sub-path and query are appended to it as text, never through URL resolution,
 * which would normalise /%2e%2e/), trailing slashes dropped.
 */
export function baseUrlArg(value: string): string {
  let u: URL;
  try {
    u = new URL(value);
  } catch {
    throw new InvalidArgumentError(`not a URL: ${JSON.stringify(value)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') throw new InvalidArgumentError('an http:// or https:// URL');
  if (u.search || u.hash)
    throw new InvalidArgumentError('a URL without ?query or #fragment: the raw sub-path and query are appended to it');
  return value.replace(/\/+$/, '');
}

export function portArg(value: string): string {
  if (parseInteger(value, 0, 65535) === undefined) throw new InvalidArgumentError('a port from 0 to 65535');
  return value;
}

/** A media type that can go into a Content-Type header as is (no CR/LF or other control bytes). */
export function contentTypeArg(value: string): string {
  if (
    !/^[!#$%&'*+.^_`|~0-9A-Za-z-]+\/[!#$%&'*+.^_`|~0-9A-Za-z-]+(\s*;\s*[!#$%&'*+.^_`|~0-9A-Za-z-]+=("[^"\\\x00-\x1f\x7f]*"|[!#$%&'*+.^_`|~0-9A-Za-z-]+))*$/.test(
      value,
    )
  ) {
    throw new InvalidArgumentError('a media type like text/plain or application/json; charset=utf-8');
  }
  return value;
}

/**
 * Header names the forwarder sets itself (Host and Content-Length from the destination and the
 * body, the x-hookbucket-* attempt headers) or that undici refuses outright (Transfer-Encoding,
 * Connection, Keep-Alive, Upgrade, Expect: lib/core/request.js processHeader): a forwarded header
 * with one of these names would fail or corrupt every attempt, so `--forward-header` refuses it.
 */
const FORWARDER_HEADERS: ReadonlySet<string> = new Set([
  'host',
  'content-length',
  'transfer-encoding',
  'connection',
  'keep-alive',
  'upgrade',
  'expect',
]);

export function isForwarderHeader(name: string): boolean {
  const n = name.toLowerCase();
  return FORWARDER_HEADERS.has(n) || n.startsWith('x-hookbucket-');
}

/** RFC 9110 §5.6.2 token. */
const HTTP_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
/**
 * Visible ASCII, space and tab. Stricter than RFC 9110's field-value, which also admits obs-text
 * (0x80-0xff): a value typed as UTF-8 would reach undici as UTF-16 and go out as latin1, not as typed.
 */
const HEADER_VALUE = /^[\t\x20-\x7e]*$/;

/** `--forward-header "Name: value"` → [name, value]; the value's surrounding spaces and tabs go. */
export function forwardHeaderArg(value: string): [string, string] {
  const colon = value.indexOf(':');
  if (colon < 0) throw new InvalidArgumentError('a header like "Authorization: Bearer abc" (name, colon, value)');
  const name = value.slice(0, colon);
  if (!HTTP_TOKEN.test(name)) {
    throw new InvalidArgumentError(
      `header name ${JSON.stringify(name)} is not an HTTP token (letters, digits and !#$%&'*+.^_\`|~-, no spaces)`,
    );
  }
  if (isForwarderHeader(name)) {
    throw new InvalidArgumentError(
      `${name} is the forwarder's to set or refuse: host, content-length, transfer-encoding, connection, keep-alive, upgrade, expect and x-hookbucket-* cannot be forwarded headers`,
    );
  }
  const raw = value.slice(colon + 1);
  if (!HEADER_VALUE.test(raw)) {
    throw new InvalidArgumentError('header value must be printable ASCII, spaces and tabs: no CR, LF, NUL or other control characters');
  }
  return [name, raw.replace(/^[ \t]+|[ \t]+$/g, '')];
}

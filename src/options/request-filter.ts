import { InvalidArgumentError } from 'commander';
import { parseDuration } from '../config/units.js';
import { AppError } from '../shared/errors.js';
import type { RequestFilter, RequestState } from '../store/store.js';

/**
 * The request filter shared by `requests list`, `requests export`, `replay` and the admin API's
 * query parameters, so that the same words select the same requests everywhere. Parsing is pure: the option parsers check the
 * syntax as commander reads each flag (InvalidArgumentError → exit 2), and `filterFromOptions`
 * turns the parsed values into a RequestFilter against a `now` passed in.
 */

export const REQUEST_STATES: readonly RequestState[] = [
  'pending',
  'retrying',
  'delivering',
  'held',
  'delivered',
  'failed',
  'exhausted',
  'none',
  'quarantined',
  'duplicate',
  'handshake',
];

/** Sender verdicts `--verified` selects (`unverified`: imported into a verifying bucket). */
export const VERDICT_RESULTS: ReadonlyArray<NonNullable<RequestFilter['verified']>[number]> = [
  'verified',
  'invalid',
  'missing',
  'expired',
  'unverified',
];

/** `30m` (that long before now) or an ISO 8601 time (`2026-12-01`, `2026-12-01T10:00:00Z`). */
export type TimeBound = { kind: 'ago'; ms: number } | { kind: 'at'; ms: number };

export type StatusFilter = NonNullable<RequestFilter['status']>;

/** What commander hands over once the filter flags are parsed. */
export interface FilterOptions {
  state?: RequestState[];
  since?: TimeBound;
  until?: TimeBound;
  method?: string[];
  path?: string;
  header?: Array<{ name: string; value: string }>;
  search?: string;
  status?: StatusFilter;
  id?: string[];
  verified?: NonNullable<RequestFilter['verified']>;
}

const HTTP_TOKEN = /^[!#$%&'*+.^_`|~0-9A-Za-z-]+$/;
const ISO_TIME = /^\d{4}-\d\d-\d\d([T ]\d\d:\d\d(:\d\d(\.\d{1,9})?)?(Z|[+-]\d\d:?\d\d)?)?$/i;
export const REQUEST_ID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

function commaList(value: string): string[] {
  return value
    .split(',')
    .map((s) => s.trim())
    .filter((s) => s.length > 0);
}

/** `--verified invalid,missing`: sender verdicts (comma list). */
export function parseVerified(value: string): NonNullable<RequestFilter['verified']> {
  const words = commaList(value);
  if (words.length === 0) throw new InvalidArgumentError(`one or more of ${VERDICT_RESULTS.join(', ')} (comma list)`);
  for (const w of words) {
    if (!(VERDICT_RESULTS as readonly string[]).includes(w)) {
      throw new InvalidArgumentError(`unknown verdict ${JSON.stringify(w)}: use ${VERDICT_RESULTS.join(', ')}`);
    }
  }
  return words as NonNullable<RequestFilter['verified']>;
}

export function parseStates(value: string): RequestState[] {
  const states = commaList(value);
  if (states.length === 0) throw new InvalidArgumentError(`one or more of ${REQUEST_STATES.join(', ')} (comma list)`);
  for (const s of states) {
    if (!(REQUEST_STATES as readonly string[]).includes(s)) {
      throw new InvalidArgumentError(`unknown state ${JSON.stringify(s)}: use ${REQUEST_STATES.join(', ')}`);
    }
  }
  return states as RequestState[];
}

export function parseTimeBound(value: string): TimeBound {
  const text = value.trim();
  if (ISO_TIME.test(text)) {
    // A date alone or a time without an offset is read as UTC, like every time hookbucket prints.
    const withZone = /^\d{4}-\d\d-\d\d$/.test(text) ? `${text}T00:00:00Z` : /(Z|[+-]\d\d:?\d\d)$/i.test(text) ? text : `${text}Z`;
    const ms = Date.parse(withZone.replace(' ', 'T'));
    if (Number.isFinite(ms)) return { kind: 'at', ms };
  }
  // A bare number is refused: 30 could mean seconds, minutes or an epoch.
  const ms = /\d[a-z]/i.test(text) ? parseDuration(text) : undefined;
  if (ms === undefined || ms <= 0) {
    throw new InvalidArgumentError('a duration before now like 30m, 6h or 7d, or an ISO time like 2026-12-01T10:00:00Z');
  }
  return { kind: 'ago', ms };
}

export function parseMethods(value: string): string[] {
  const methods = commaList(value);
  if (methods.length === 0) throw new InvalidArgumentError('an HTTP method like POST (comma list)');
  for (const m of methods) if (!HTTP_TOKEN.test(m)) throw new InvalidArgumentError(`not an HTTP method: ${JSON.stringify(m)}`);
  return methods.map((m) => m.toUpperCase());
}

/** `name=value`: the name case-insensitive, the value exact (split at the first `=`). */
export function parseHeaderMatch(value: string): Array<{ name: string; value: string }> {
  const eq = value.indexOf('=');
  const name = eq < 0 ? '' : value.slice(0, eq).trim();
  if (eq < 0 || !HTTP_TOKEN.test(name)) {
    throw new InvalidArgumentError('a header match like X-GitHub-Event=push (name=value; the value compared exactly)');
  }
  return [{ name, value: value.slice(eq + 1) }];
}

export function parseStatus(value: string): StatusFilter {
  const text = value.trim().toLowerCase();
  const cls = /^([1-5])xx$/.exec(text);
  if (cls) return { class: Number(cls[1]) as 1 | 2 | 3 | 4 | 5 };
  if (/^[1-5]\d\d$/.test(text)) return { code: Number(text) };
  throw new InvalidArgumentError('a status code like 503 or a class like 5xx');
}

export function parseIds(value: string): string[] {
  const ids = commaList(value).map((s) => s.toLowerCase());
  if (ids.length === 0) throw new InvalidArgumentError('a request id (comma list)');
  for (const id of ids) if (!REQUEST_ID.test(id)) throw new InvalidArgumentError(`not a request id: ${JSON.stringify(id)}`);
  return ids;
}

export function parseSearch(value: string): string {
  if (value.length === 0) throw new InvalidArgumentError('text to look for inside bodies');
  return value;
}

export function parsePathGlob(value: string): string {
  if (value.length === 0) throw new InvalidArgumentError('a path glob like /events/* (* within a segment, ** across segments)');
  return value;
}

function resolve(bound: TimeBound, nowMs: number): number {
  return bound.kind === 'at' ? bound.ms : nowMs - bound.ms;
}

/** The RequestFilter the flags describe; `now` resolves `--since 30m`. Throws a usage error when the range is empty. */
export function filterFromOptions(opts: FilterOptions, nowMs: number): RequestFilter {
  const filter: RequestFilter = {};
  if (opts.state && opts.state.length > 0) filter.states = [...new Set(opts.state)];
  if (opts.since) filter.sinceMs = resolve(opts.since, nowMs);
  if (opts.until) filter.untilMs = resolve(opts.until, nowMs);
  if (filter.sinceMs !== undefined && filter.untilMs !== undefined && filter.sinceMs >= filter.untilMs) {
    throw new AppError(
      'usage',
      `--since (${new Date(filter.sinceMs).toISOString()}) must be before --until (${new Date(filter.untilMs).toISOString()})`,
    );
  }
  if (opts.method && opts.method.length > 0) filter.methods = [...new Set(opts.method)];
  if (opts.path !== undefined) filter.pathGlob = opts.path;
  if (opts.header && opts.header.length > 0) filter.headers = opts.header;
  if (opts.search !== undefined) filter.search = opts.search;
  if (opts.status) filter.status = opts.status;
  if (opts.id && opts.id.length > 0) filter.ids = [...new Set(opts.id)];
  if (opts.verified && opts.verified.length > 0) filter.verified = [...new Set(opts.verified)];
  return filter;
}

/** Whether the filter narrows anything (an empty one is the whole bucket). */
export function isEmptyFilter(filter: RequestFilter): boolean {
  return Object.keys(filter).length === 0;
}

/** The filter as plain JSON (ISO times, `5xx` classes), for summaries and a replay's recorded selection. */
export function filterJson(filter: RequestFilter): Record<string, unknown> {
  const out: Record<string, unknown> = {};
  if (filter.states) out.state = filter.states;
  if (filter.sinceMs !== undefined) out.since = new Date(filter.sinceMs).toISOString();
  if (filter.untilMs !== undefined) out.until = new Date(filter.untilMs).toISOString();
  if (filter.methods) out.method = filter.methods;
  if (filter.pathGlob !== undefined) out.path = filter.pathGlob;
  if (filter.headers) out.header = filter.headers.map((h) => `${h.name}=${h.value}`);
  if (filter.search !== undefined) out.search = filter.search;
  if (filter.status) out.status = 'code' in filter.status ? String(filter.status.code) : `${filter.status.class}xx`;
  if (filter.ids) out.id = filter.ids;
  if (filter.verified) out.verified = filter.verified;
  return out;
}

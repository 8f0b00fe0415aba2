/**
 * What an attempt's outcome means for its delivery: delivered, retry on the schedule, or failed
 * for good. One table, exported as data so that the README and `bucket show` print the same
 * thing the worker does. Pure.
 *
 * forward() never throws: it returns a response with its status, or a transport error sorted into
 * a class (undici's UND_ERR_CONNECT_TIMEOUT and friends map to `timeout`, ECONNREFUSED to
 * `refused`, and so on); a request undici refuses to send at all is `unsendable`.
 */

/** Transport errors: `network` is any other one (a socket closed mid-response, EHOSTUNREACH). */
export type TransportErrorClass = 'refused' | 'reset' | 'dns' | 'timeout' | 'tls' | 'network';
export const ERROR_CLASSES: readonly TransportErrorClass[] = ['refused', 'reset', 'dns', 'timeout', 'tls', 'network'];
/**
 * `unsendable`: the HTTP client refused to send the stored request before any byte left
 * (undici's UND_ERR_INVALID_ARG, e.g. a header value with a control byte in a row written before
 * import checked for them). Sending it again sends the same bytes, so it is never retried, and
 * `--retry-on` has no word for it.
 *
 * `destination_refused`: the `destinations` setting refused the address the destination resolved
 * to (src/drain/destination-guard.ts), before any byte was sent. Retried on the schedule whatever
 * `--retry-on` says, like a connection error: the setting, or the DNS answer, may change before the
 * schedule gives up, and every refused attempt stays as evidence.
 */
export type ErrorClass = TransportErrorClass | 'unsendable' | 'destination_refused';

export type Outcome = { kind: 'response'; status: number } | { kind: 'error'; errorClass: ErrorClass };

export type Verdict = 'delivered' | 'retry' | 'failed';

export interface Classification {
  verdict: Verdict;
  /** Stable words for the attempt row and logs: `status_503`, `redirect_not_followed`, `error_tls`. */
  reason: string;
}

/**
 * The set of outcomes that are retried: status classes, single statuses and error classes.
 * `--retry-on` replaces it as a whole.
 */
export interface RetryOn {
  readonly statusClasses: readonly (3 | 4 | 5)[];
  readonly statuses: readonly number[];
  readonly errors: readonly TransportErrorClass[];
}

/** 408 Request Timeout, 425 Too Early and 429 Too Many Requests ask to come back; 5xx is the consumer's fault. */
export const DEFAULT_RETRY_ON: RetryOn = Object.freeze({
  statusClasses: [5 as const],
  statuses: [408, 425, 429],
  errors: [...ERROR_CLASSES],
});

/** The classification table with the default retried set, as the README shows it. */
export const OUTCOME_TABLE: ReadonlyArray<{ outcome: string; verdict: Verdict; what: string; examples: readonly Outcome[] }> = [
  {
    outcome: '2xx',
    verdict: 'delivered',
    what: '`delivered`: stop',
    examples: [200, 201, 202, 204, 299].map((status) => ({ kind: 'response', status })),
  },
  {
    outcome: 'network error: refused, reset, dns, timeout; a TLS error; 408, 425, 429, 5xx',
    verdict: 'retry',
    what: 'retry on the schedule',
    examples: [
      ...ERROR_CLASSES.map((errorClass): Outcome => ({ kind: 'error', errorClass })),
      ...[408, 425, 429, 500, 502, 503, 504, 599].map((status): Outcome => ({ kind: 'response', status })),
    ],
  },
  {
    outcome: 'a request the HTTP client refuses to send (`unsendable`: undici `UND_ERR_INVALID_ARG`)',
    verdict: 'failed',
    what: "`failed` after one attempt, whatever `--retry-on` says: the same bytes would be refused again (the attempt keeps undici's message)",
    examples: [{ kind: 'error', errorClass: 'unsendable' }],
  },
  {
    outcome: 'a destination the `destinations` setting refuses (`destination_refused`: nothing was sent)',
    verdict: 'retry',
    what: 'retry on the schedule, whatever `--retry-on` says (the setting or the DNS answer may change); the attempt keeps the reason',
    examples: [{ kind: 'error', errorClass: 'destination_refused' }],
  },
  {
    outcome: '3xx',
    verdict: 'failed',
    what: '`failed`, redirect not followed (a moved endpoint is a configuration fix, then a replay)',
    examples: [300, 301, 302, 303, 304, 307, 308].map((status) => ({ kind: 'response', status })),
  },
  {
    outcome: 'any other 4xx',
    verdict: 'failed',
    what: '`failed`: terminal, visible, replayable',
    examples: [400, 401, 403, 404, 409, 410, 413, 422, 499].map((status) => ({ kind: 'response', status })),
  },
  {
    outcome: 'any other status (1xx as final, 600 and up)',
    verdict: 'failed',
    what: '`failed`: not HTTP a consumer should send',
    examples: [100, 199, 600, 999].map((status) => ({ kind: 'response', status })),
  },
];

export function isRetried(o: Outcome, r: RetryOn): boolean {
  if (o.kind === 'error') {
    if (o.errorClass === 'unsendable') return false;
    if (o.errorClass === 'destination_refused') return true;
    return r.errors.includes(o.errorClass);
  }
  const cls = Math.floor(o.status / 100);
  return r.statuses.includes(o.status) || ((cls === 3 || cls === 4 || cls === 5) && r.statusClasses.includes(cls));
}

export function classify(o: Outcome, retryOn: RetryOn = DEFAULT_RETRY_ON): Classification {
  if (o.kind === 'error') {
    return { verdict: isRetried(o, retryOn) ? 'retry' : 'failed', reason: `error_${o.errorClass}` };
  }
  const { status } = o;
  if (status >= 200 && status <= 299) return { verdict: 'delivered', reason: `status_${status}` };
  if (isRetried(o, retryOn)) return { verdict: 'retry', reason: `status_${status}` };
  if (status >= 300 && status <= 399) return { verdict: 'failed', reason: 'redirect_not_followed' };
  return { verdict: 'failed', reason: `status_${status}` };
}

const ERROR_TOKENS: Record<string, readonly TransportErrorClass[]> = {
  network: ['refused', 'reset', 'dns', 'network'],
  refused: ['refused'],
  reset: ['reset'],
  dns: ['dns'],
  timeout: ['timeout'],
  tls: ['tls'],
};

/** The words `--retry-on` accepts, for its help and error messages. */
export const RETRY_ON_WORDS =
  '3xx, 4xx, 5xx, a status from 300 to 599, network (refused, reset, dns and others), refused, reset, dns, timeout, tls';

/**
 * `--retry-on 5xx,429,408,425,network,timeout,tls,4xx`: the retried set, replacing the default.
 * 2xx is always delivered, so it cannot be listed. Undefined on an unknown or empty entry.
 */
export function parseRetryOn(text: string): RetryOn | undefined {
  const statusClasses = new Set<3 | 4 | 5>();
  const statuses = new Set<number>();
  const errors = new Set<TransportErrorClass>();
  for (const raw of text.split(',')) {
    const word = raw.trim().toLowerCase();
    const cls = /^([345])xx$/.exec(word);
    if (cls) statusClasses.add(Number(cls[1]) as 3 | 4 | 5);
    else if (/^\d{3}$/.test(word) && Number(word) >= 300 && Number(word) <= 599) statuses.add(Number(word));
    else if (ERROR_TOKENS[word]) for (const e of ERROR_TOKENS[word]) errors.add(e);
    else return undefined;
  }
  return {
    statusClasses: [...statusClasses].sort(),
    statuses: [...statuses].sort((a, b) => a - b),
    errors: ERROR_CLASSES.filter((e) => errors.has(e)),
  };
}

/** The inverse of parseRetryOn, in a stable order: `5xx,408,425,429,network,timeout,tls`. */
export function formatRetryOn(r: RetryOn): string {
  const words: string[] = r.statusClasses.map((c) => `${c}xx`);
  words.push(...r.statuses.map(String));
  const has = (e: TransportErrorClass) => r.errors.includes(e);
  if (ERROR_TOKENS.network!.every(has)) words.push('network');
  else words.push(...ERROR_TOKENS.network!.filter((e) => e !== 'network' && has(e)));
  if (has('timeout')) words.push('timeout');
  if (has('tls')) words.push('tls');
  return words.join(',');
}

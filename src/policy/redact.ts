/**
 * One rule for what human output hides: header names, query and form keys, JSON keys at any depth,
 * and the credentials in a URL. Pure: strings in, strings out. `--reveal` skips it; `--json`,
 * `--raw` and exports never apply it (they keep the stored bytes).
 *
 * A name is split into whole tokens (on `-`, `_`, `.`, `[`, `]`, spaces and camelCase) and the
 * tokens are compared, never substrings: `auth` hides `auth` and `authToken` but not GitHub's
 * `author`, and `tokens` (an LLM's `total_tokens`) is no `token`.
 */

export const REDACTED = '[redacted]';

/** Any one of these tokens makes the name secret. */
const SECRET_TOKENS = new Set([
  'token',
  'secret',
  'secrets',
  'password',
  'passwords',
  'passwd',
  'pwd',
  'passphrase',
  'auth',
  'oauth',
  'authorization',
  'authentication',
  'credential',
  'credentials',
  'apikey',
  'accesskey',
  'secretkey',
  'privatekey',
  'signature',
  'sig',
  'hmac',
  'cookie',
  'cookies',
  'session',
  'sessionid',
  'jwt',
  'bearer',
  'csrf',
  'xsrf',
]);

/**
 * `key` is secret after these (`api_key`, `X-Webhook-Key`, `accessKey`, `private_key`), and alone
 * in a header, query or form (`?key=` is how many webhook URLs carry their secret). It is not after
 * a word that names an identifier (`Idempotency-Key`, `public_key`), nor alone in JSON, where
 * `key` is usually an id (a Jira issue's `PROJ-1`).
 */
const NOT_SECRET_BEFORE_KEY = new Set([
  'idempotency',
  'public',
  'partition',
  'primary',
  'foreign',
  'sort',
  'cache',
  'dedup',
  'dedupe',
  'deduplication',
  'routing',
  'object',
  'issue',
  'event',
  'project',
  'lookup',
  'unique',
  'group',
  'ordering',
  'message',
  'row',
]);

export type KeyContext = 'header' | 'query' | 'form' | 'json';

/** `X-Hub-Signature-256` → [x, hub, signature, 256]; `apiKey` → [api, key]; `APIKey` → [api, key]. */
export function keyTokens(name: string): string[] {
  return name
    .replace(/([a-z0-9])([A-Z])/g, '$1 $2')
    .replace(/([A-Z]+)([A-Z][a-z])/g, '$1 $2')
    .toLowerCase()
    .split(/[-_.\s[\]]+/)
    .filter((t) => t.length > 0);
}

/** True when a value under this name is hidden in human output. */
export function isSecretKey(name: string, context: KeyContext): boolean {
  const tokens = keyTokens(name);
  for (let i = 0; i < tokens.length; i++) {
    const t = tokens[i]!;
    if (SECRET_TOKENS.has(t)) return true;
    if (t === 'key' || t === 'keys') {
      if (i === 0) {
        if (tokens.length === 1 && context !== 'json') return true;
        continue;
      }
      if (!NOT_SECRET_BEFORE_KEY.has(tokens[i - 1]!)) return true;
    }
  }
  return false;
}

/** Header pairs with secret values replaced. */
export function redactHeaders(pairs: ReadonlyArray<readonly [string, string]>): Array<[string, string]> {
  return pairs.map(([n, v]) => [n, isSecretKey(n, 'header') ? REDACTED : v]);
}

function decodeFormComponent(s: string): string {
  try {
    return decodeURIComponent(s.replace(/\+/g, ' '));
  } catch {
    return s;
  }
}

/**
 * A query string or form body (`a=1&token=x`) with secret values replaced and everything else
 * left exactly as sent (no decoding or re-encoding). Keys are percent-decoded only to compare them.
 */
export function redactQuery(query: string, context: 'query' | 'form' = 'query'): string {
  return query
    .split('&')
    .map((part) => {
      const eq = part.indexOf('=');
      if (eq < 0) return part;
      if (isSecretKey(decodeFormComponent(part.slice(0, eq)), context)) return `${part.slice(0, eq + 1)}${REDACTED}`;
      return context === 'form' ? redactJsonFormValue(part, eq) : part;
    })
    .join('&');
}

/**
 * A form value that holds a JSON object or array (Slack's interactive `payload=…`, which carries a
 * `token`): its secret leaves are hidden and it is encoded again. Left as sent when nothing in it is
 * secret.
 */
function redactJsonFormValue(part: string, eq: number): string {
  const raw = part.slice(eq + 1);
  if (!/^(%7B|%5B|\{|\[)/i.test(raw)) return part;
  let value: unknown;
  try {
    value = JSON.parse(decodeFormComponent(raw));
  } catch {
    return part;
  }
  const redacted = JSON.stringify(redactJson(value));
  return redacted === JSON.stringify(value) ? part : `${part.slice(0, eq + 1)}${encodeURIComponent(redacted)}`;
}

/**
 * A parsed JSON value with every leaf under a secret key replaced, the structure kept: `{"auth":
 * {"user": "a", "pass": "b"}}` shows both keys, neither value. null stays null (it reveals nothing).
 */
export function redactJson(value: unknown, hidden = false): unknown {
  if (Array.isArray(value)) return value.map((v) => redactJson(v, hidden));
  if (value !== null && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value as Record<string, unknown>)) out[k] = redactJson(v, hidden || isSecretKey(k, 'json'));
    return out;
  }
  return hidden && value !== null ? REDACTED : value;
}

/**
 * A URL with its userinfo and secret query values replaced: `https://u:p@host/x?token=1&a=2` →
 * `https://[redacted]@host/x?token=[redacted]&a=2`. Textual, so the rest reads exactly as stored.
 */
export function redactUrl(url: string): string {
  let out = url;
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(out);
  if (scheme) {
    const start = scheme[0].length;
    const end = out.slice(start).search(/[/?#]/);
    const authorityEnd = end < 0 ? out.length : start + end;
    const at = out.lastIndexOf('@', authorityEnd - 1);
    if (at >= start) out = `${out.slice(0, start)}${REDACTED}${out.slice(at)}`;
  }
  const q = out.indexOf('?');
  if (q < 0) return out;
  const hash = out.indexOf('#', q);
  const query = hash < 0 ? out.slice(q + 1) : out.slice(q + 1, hash);
  return `${out.slice(0, q + 1)}${redactQuery(query)}${hash < 0 ? '' : out.slice(hash)}`;
}

/**
 * Every URL inside a free text (an error message that echoes an argument, say) passed through
 * redactUrl. The scheme is bounded ({0,31}) so the scan stays linear on long runs of letters; a URL
 * ends at whitespace or a quote, as commander and our own messages quote arguments.
 */
export function redactUrlsIn(text: string): string {
  return text.replace(/\b[a-z][a-z0-9+.-]{0,31}:\/\/[^\s'"<>`]+/gi, (url) => redactUrl(url));
}

/**
 * A database URL for logs and messages: the password in its userinfo and secret query values
 * (`?password=…`) replaced, the user and host kept so an operator can tell servers apart:
 * `postgres://app:s3cret@db:5432/hb` → `postgres://app:[redacted]@db:5432/hb`. Anything that is not
 * a URL (a SQLite path) comes back as it is.
 */
export function redactDbUrl(url: string): string {
  const scheme = /^[a-z][a-z0-9+.-]*:\/\//i.exec(url);
  if (!scheme) return url;
  let out = url;
  const start = scheme[0].length;
  // The last `@` anywhere, not the last one before the first `/`, `?` or `#`: a password with an
  // unencoded `/`, `?`, `#` or `@` (generated ones often have them) makes the URL invalid, and
  // the error message that quotes it must still hide it. An `@` in the query hides the host too:
  // too much hidden is safe, too little is not.
  const at = out.lastIndexOf('@');
  if (at >= start) {
    const colon = out.indexOf(':', start);
    if (colon >= 0 && colon < at) out = `${out.slice(0, colon + 1)}${REDACTED}${out.slice(at)}`;
  }
  const q = out.indexOf('?');
  if (q < 0) return out;
  const hash = out.indexOf('#', q);
  const query = hash < 0 ? out.slice(q + 1) : out.slice(q + 1, hash);
  return `${out.slice(0, q + 1)}${redactQuery(query)}${hash < 0 ? '' : out.slice(hash)}`;
}

/**
 * The path a stored request is forwarded to: the destination's path, then the sub-path the sender
 * chose (after `/b/<bucket>`), made unable to climb above the destination's path. Pure; it imports
 * nothing, so the table in test/policy/forward-path.test.ts is the whole specification.
 *
 * The sender controls the sub-path. Appended verbatim to `http://host/webhooks/stripe`, the sub-path
 * `/../../admin/delete-all` reaches the consumer as `/webhooks/stripe/../../admin/delete-all`, and
 * a consumer or proxy that normalises paths serves `/admin/delete-all`. So, by default, the sub-path
 * alone goes through RFC 3986 §5.2.4 remove_dot_segments (a `..` never pops above its first
 * segment), with these readings that real servers apply and the RFC does not:
 *
 * - `%2e` in either case is `.` (RFC 3986 §2.3 makes them equivalent; WHATWG URL, nginx and
 *   Tomcat all resolve `%2e%2e` as `..`), so `%2e%2e`, `.%2E` and `%2E.` are `..`.
 * - Empty segments collapse (`//evil.example/x` becomes `/evil.example/x`): nginx's merge_slashes
 *   and many routers merge them, and a request line starting `//` reads as a network-path reference
 *   to some clients and frameworks.
 * - A segment whose part before `;` (or `%3b`) is a dot-segment is that dot-segment. RFC 3986 says
 *   `..;` is a plain segment, but Tomcat and Jetty strip path parameters before normalising, so
 *   `/webhooks/stripe/..;/..;/admin` is served as `/admin` behind them (the well-known `..;`
 *   bypass). Resolving it here, inside the sub-path, gives the consumer what Tomcat would have read
 *   without the climb; keeping it literal would leave the climb to Tomcat. Its parameters go with it.
 * - Encoded separators `%2f` and `%5c` stay encoded and do not split segments (`/a%2Fb` stays
 *   `/a%2Fb`: to the RFC it is one segment, and a consumer may route on it). But nginx decodes `%2f`
 *   before it resolves dot-segments, so inside one segment the pieces between encoded separators get
 *   the same dot-segment removal, bounded by that segment: `..%2f..%2fadmin` becomes `admin`,
 *   `a%2f..%2fb` becomes `b`.
 * - A raw `\` is not a URI character (RFC 3986 §2); WHATWG URL parsers read it as `/`. It is sent
 *   as `%5C`, which every reader takes as data, and then counts as an encoded separator.
 * - Double encoding is left alone: `%252e` is a literal segment `%2e` to a reader that decodes once,
 *   which HTTP readers do.
 *
 * A trailing slash survives (`/a/` stays `/a/`; `/a/.` and `/a/..` end in `/` as in the RFC). The
 * query is not part of the sub-path and is never touched.
 *
 * `raw: true` (bucket `--forward-raw-path`) appends the stored sub-path as it is, as hookbucket did
 * before this rule: safe only when nothing between hookbucket and the consumer normalises paths.
 */

/** `'.'` or `'..'` when some reader takes the piece as that dot-segment, else null. */
function dotSegment(piece: string): '.' | '..' | null {
  let name = piece;
  const params = name.search(/;|%3b/i);
  if (params !== -1) name = name.slice(0, params);
  if (name.length === 0 || name.length > 6) return null; // `%2e%2e` is the longest spelling of `..`
  if (name.length > 2) name = name.replace(/%2e/gi, '.');
  return name === '.' || name === '..' ? name : null;
}

/**
 * A segment with encoded separators, its dot pieces removed within it; '' when nothing is left.
 * A segment without dot pieces comes back unchanged.
 */
function segmentPieces(segment: string): string {
  const parts = segment.split(/(%2f|%5c)/i); // piece, separator, piece, …
  const kept: Array<{ sep: string; piece: string }> = [];
  let changed = false;
  for (let i = 0; i < parts.length; i += 2) {
    const piece = parts[i]!;
    const dot = dotSegment(piece);
    if (dot === null) kept.push({ sep: i === 0 ? '' : parts[i - 1]!, piece });
    else {
      changed = true;
      if (dot === '..') kept.pop();
    }
  }
  if (!changed) return segment;
  return kept.map((k, i) => (i === 0 ? '' : k.sep) + k.piece).join('');
}

/** Anything that needs the slow path: a segment starting with `.`, an escape, a backslash or `//` (`..;` starts with `.`). */
const NEEDS_WORK = /\/\.|%|\\|\/\//;

/**
 * The stored sub-path ('' or starting with `/`, still percent-encoded) without dot-segments or empty
 * segments, by the rules above. '' stays ''; the result is '' or starts with `/`.
 */
export function safeSubPath(subPath: string): string {
  if (subPath === '') return '';
  if (subPath.startsWith('/') && !NEEDS_WORK.test(subPath)) return subPath;
  const text = subPath.includes('\\') ? subPath.replaceAll('\\', '%5C') : subPath;
  const segments = text.split('/');
  const out: string[] = [];
  let trailingSlash = false;
  for (let i = 0; i < segments.length; i++) {
    const last = i === segments.length - 1;
    let segment = segments[i]!;
    let dot = dotSegment(segment);
    if (dot === null && segment !== '' && /%2f|%5c/i.test(segment)) {
      segment = segmentPieces(segment);
      if (segment === '') dot = '.';
    }
    if (dot === '..') out.pop();
    if (dot !== null || segment === '') {
      // `/a/`, `/a/.` and `/a/..` end in a slash (RFC 3986 §5.2.4); a leading '' is the root.
      trailingSlash = last && i > 0;
      continue;
    }
    out.push(segment);
    trailingSlash = false;
  }
  if (out.length === 0) return trailingSlash ? '/' : '';
  return `/${out.join('/')}${trailingSlash ? '/' : ''}`;
}

/**
 * The destination's path (a URL pathname, `/` at least), then the sub-path: made safe unless `raw`.
 * A destination ending in `/` and a sub-path starting with `/` share that slash.
 */
export function joinForwardPath(destinationPath: string, subPath: string, raw = false): string {
  const sub = raw ? subPath : safeSubPath(subPath);
  if (sub === '') return destinationPath;
  return destinationPath.endsWith('/') && sub.startsWith('/') ? destinationPath.slice(0, -1) + sub : destinationPath + sub;
}

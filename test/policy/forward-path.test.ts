import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { joinForwardPath, safeSubPath } from '../../src/policy/forward-path.js';

const STRIPE = '/webhooks/stripe';

describe('joinForwardPath: the sub-path never climbs above the destination path', () => {
  const cases: Array<[destinationPath: string, subPath: string, expected: string, why: string]> = [
    // The three shapes that escaped (issue 10, point 7).
    [STRIPE, '/../../admin/delete-all', '/webhooks/stripe/admin/delete-all', '`..` never pops above the sub-path'],
    [STRIPE, '/%2e%2e/%2e%2e/users/1', '/webhooks/stripe/users/1', '`%2e` is `.`'],
    [STRIPE, '//evil.example/x', '/webhooks/stripe/evil.example/x', 'empty segments collapse'],
    ['/', '//evil.example/x', '/evil.example/x', 'no `//` at the start of the request line'],
    ['/', '/../../admin', '/admin', 'a root destination: still never above /'],
    // Case and mixed spellings of `.` and `..`.
    [STRIPE, '/%2E%2e/x', '/webhooks/stripe/x', 'mixed case `%2E%2e`'],
    [STRIPE, '/a/.%2E/b', '/webhooks/stripe/b', '`.%2E` is `..`'],
    [STRIPE, '/a/%2E./b', '/webhooks/stripe/b', '`%2E.` is `..`'],
    [STRIPE, '/a/%2e/b', '/webhooks/stripe/a/b', '`%2e` alone is `.`'],
    [STRIPE, '/a/./b/.', '/webhooks/stripe/a/b/', '`.` segments go; a final one leaves its slash (RFC 3986 §5.2.4)'],
    [STRIPE, '/a/b/..', '/webhooks/stripe/a/', 'a final `..` leaves its slash'],
    [STRIPE, '/a/%2e%2e/b', '/webhooks/stripe/b', 'the old README example: no longer reaches the consumer as `/a/%2e%2e/b`'],
    [STRIPE, '/..', '/webhooks/stripe/', 'only `..`: the destination itself, with the slash'],
    // Encoded separators: data, not separators; dot pieces between them are removed within the segment.
    [STRIPE, '/a%2fb', '/webhooks/stripe/a%2fb', '`%2f` stays encoded: one segment'],
    [STRIPE, '/a%2Fb//c', '/webhooks/stripe/a%2Fb/c', '`%2F` kept, `//` collapsed'],
    [STRIPE, '/a%5cb', '/webhooks/stripe/a%5cb', '`%5c` stays encoded: one segment'],
    [STRIPE, '/..%2f..%2fadmin', '/webhooks/stripe/admin', 'nginx decodes `%2f` before resolving dots: the pieces lose their `..`'],
    [STRIPE, '/x/a%2F..%2Fb', '/webhooks/stripe/x/b', 'a `..` piece pops a piece of its own segment'],
    [STRIPE, '/x/..%5c..%5cadmin', '/webhooks/stripe/x/admin', 'the same for `%5c`, bounded by the segment'],
    [STRIPE, '/x/a%2f..', '/webhooks/stripe/x/', 'a segment with nothing left acts as `.`'],
    [STRIPE, '/x/%2f%2fy', '/webhooks/stripe/x/%2f%2fy', 'empty pieces between encoded slashes stay: they cannot climb'],
    // A raw backslash is not a URI character; WHATWG parsers read it as `/`.
    [STRIPE, '/..\\..\\admin', '/webhooks/stripe/admin', 'raw `\\` becomes `%5C`, then counts as an encoded separator'],
    [STRIPE, '/a\\b', '/webhooks/stripe/a%5Cb', 'raw `\\` is sent as `%5C`'],
    // Path parameters: Tomcat and Jetty strip `;…` before normalising.
    [STRIPE, '/..;/..;/admin', '/webhooks/stripe/admin', '`..;` is `..` to Tomcat: resolved here, inside the sub-path'],
    [STRIPE, '/a/..;jsessionid=1/b', '/webhooks/stripe/b', '`..;params` is `..`, its parameters dropped with it'],
    [STRIPE, '/a/%2e%2e%3b/b', '/webhooks/stripe/b', '`%3b` counts as `;`'],
    [STRIPE, '/a/.;x/b', '/webhooks/stripe/a/b', '`.;x` is `.`'],
    [STRIPE, '/a;v=1/b;v=2', '/webhooks/stripe/a;v=1/b;v=2', 'parameters on ordinary segments stay'],
    // Double encoding: one decode gives `%2e`, a literal.
    [STRIPE, '/%252e%252e/x', '/webhooks/stripe/%252e%252e/x', '`%252e` stays a literal segment'],
    // Not dot-segments.
    [STRIPE, '/.../..a/a../.env/v1.2', '/webhooks/stripe/.../..a/a../.env/v1.2', 'dots inside names are names'],
    [STRIPE, '/%2e%2e%2e', '/webhooks/stripe/%2e%2e%2e', '`...` spelled encoded is a name too'],
    // Ordinary sub-paths go unchanged, trailing slash included.
    [STRIPE, '/invoice/paid', '/webhooks/stripe/invoice/paid', 'ordinary'],
    [STRIPE, '/invoice/paid/', '/webhooks/stripe/invoice/paid/', 'trailing slash kept'],
    [STRIPE, '/a%20b/%E2%82%AC', '/webhooks/stripe/a%20b/%E2%82%AC', 'other escapes kept as sent'],
    [STRIPE, '/', '/webhooks/stripe/', 'a lone slash'],
    [STRIPE, '', STRIPE, 'empty sub-path: the destination as it is'],
    ['/', '', '/', 'empty sub-path, root destination'],
    // Destination with and without a trailing slash.
    ['/hook/', '/x', '/hook/x', 'the destination slash and the sub-path slash are one'],
    ['/hook/', '/../x', '/hook/x', 'and the sub-path still cannot climb'],
    ['/hook/', '', '/hook/', 'empty sub-path keeps the destination slash'],
    ['/hook', '/x/', '/hook/x/', 'no destination slash'],
  ];
  for (const [destinationPath, subPath, expected, why] of cases) {
    it(`${destinationPath} + ${JSON.stringify(subPath)} → ${expected} (${why})`, () =>
      assert.equal(joinForwardPath(destinationPath, subPath), expected));
  }

  it('raw: the stored sub-path as it is (--forward-raw-path)', () => {
    assert.equal(joinForwardPath(STRIPE, '/../../admin/delete-all', true), '/webhooks/stripe/../../admin/delete-all');
    assert.equal(joinForwardPath(STRIPE, '/%2e%2e/%2e%2e/users/1', true), '/webhooks/stripe/%2e%2e/%2e%2e/users/1');
    assert.equal(joinForwardPath('/', '//evil.example/x', true), '//evil.example/x');
    assert.equal(joinForwardPath('/hook/', '/x', true), '/hook/x');
  });

  it('is idempotent: a safe sub-path comes back unchanged', () => {
    for (const [, subPath] of cases) {
      const once = safeSubPath(subPath);
      assert.equal(safeSubPath(once), once, subPath);
    }
  });
});

/**
 * Two readers a consumer may sit behind, as models: WHATWG URL (Node's `new URL`, browsers' fetch:
 * `%2e` is `.`, `\` is `/`), and a decode-once-then-normalise proxy (nginx: `%2f`, `%5c` and `%2e`
 * decoded before dot-segments; Tomcat: `;params` stripped first). Each returns whether the path
 * stays at or below `prefix` segment by segment, never popping into it.
 */
function staysUnderWhatwg(path: string, prefix: string): boolean {
  const pathname = new URL(`http://consumer.test${path}`).pathname;
  return pathname === prefix || pathname.startsWith(prefix.endsWith('/') ? prefix : `${prefix}/`);
}

function staysUnderDecodingProxy(path: string, prefix: string): boolean {
  const floor = prefix.split('/').filter((s) => s !== '').length;
  const decoded = path
    .replace(/%2f|%5c/gi, '/')
    .replace(/%2e/gi, '.')
    .replace(/%3b/gi, ';')
    .replaceAll('\\', '/');
  const stack: string[] = [];
  for (const segment of decoded.split('/').slice(1)) {
    const name = segment.split(';')[0];
    if (name === '..') {
      if (stack.length <= floor) return false;
      stack.pop();
    } else if (name !== '.' && segment !== '') stack.push(segment);
  }
  return true;
}

describe('joinForwardPath against reader models: every combination of hostile pieces', () => {
  const pieces = ['..', '.', '%2e%2e', '%2E.', '..;', '..;x', '', 'a', '..%2f', '%2F..', '..%5c', '..\\', '%252e%252e', 'a%2fb', '%3b'];
  const combos: string[] = [''];
  let frontier = [''];
  for (let depth = 0; depth < 4; depth++) {
    frontier = frontier.flatMap((c) => pieces.map((p) => `${c}/${p}`));
    combos.push(...frontier);
  }
  for (const prefix of [STRIPE, '/hook/', '/']) {
    it(`${combos.length} sub-paths under ${prefix}: neither reader climbs above it; raw would`, () => {
      let rawEscapes = 0;
      for (const sub of combos) {
        const path = joinForwardPath(prefix, sub);
        assert.ok(path.startsWith(prefix), `${sub} → ${path}`);
        assert.ok(!path.startsWith('//'), `${sub} → ${path}`);
        assert.ok(staysUnderWhatwg(path, prefix), `WHATWG: ${sub} → ${path}`);
        assert.ok(staysUnderDecodingProxy(path, prefix), `decoding proxy: ${sub} → ${path}`);
        const raw = joinForwardPath(prefix, sub, true);
        if (!staysUnderWhatwg(raw, prefix) || !staysUnderDecodingProxy(raw, prefix)) rawEscapes++;
      }
      // The models are not vacuous: raw paths escape both of them for many of the same inputs.
      assert.ok(rawEscapes > combos.length / 10, `raw escapes: ${rawEscapes}`);
    });
  }
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { InvalidArgumentError } from 'commander';
import { filterFromOptions, filterJson, parseHeaderMatch, parseStatus, parseTimeBound } from '../../src/cli/filter-options.js';
import { globRegExp, sqliteGlob } from '../../src/store/sqlite/request-query.js';

describe('filter flags (pure)', () => {
  const now = Date.UTC(2026, 11, 2, 12);

  it('--since/--until: durations before now and ISO times, UTC unless an offset is given', () => {
    const table: Array<[string, number]> = [
      ['30m', now - 30 * 60_000],
      ['1h30m', now - 90 * 60_000],
      ['7d', now - 7 * 86_400_000],
      ['2026-12-01', Date.UTC(2026, 11, 1)],
      ['2026-12-01T10:00', Date.UTC(2026, 11, 1, 10)],
      ['2026-12-01T10:00:00.5Z', Date.UTC(2026, 11, 1, 10, 0, 0, 500)],
      ['2026-12-01T10:00:00+02:00', Date.UTC(2026, 11, 1, 8)],
    ];
    for (const [text, ms] of table) assert.equal(filterFromOptions({ since: parseTimeBound(text) }, now).sinceMs, ms, text);
    for (const bad of ['5', 'yesterday', '-5m', '2026-13-45', '']) assert.throws(() => parseTimeBound(bad), InvalidArgumentError, bad);
    assert.throws(() => filterFromOptions({ since: parseTimeBound('1h'), until: parseTimeBound('2h') }, now), /must be before/);
  });

  it('--status, --header', () => {
    assert.deepEqual(parseStatus('5XX'), { class: 5 });
    assert.deepEqual(parseStatus('404'), { code: 404 });
    for (const bad of ['6xx', '99', '600', 'x']) assert.throws(() => parseStatus(bad), InvalidArgumentError);
    assert.deepEqual(parseHeaderMatch('X-A=b=c'), [{ name: 'X-A', value: 'b=c' }]);
    assert.deepEqual(parseHeaderMatch('X-A='), [{ name: 'X-A', value: '' }]);
  });

  it('filterJson gives flags back as absolute values', () => {
    const f = filterFromOptions(
      { state: ['failed', 'failed', 'none'], since: parseTimeBound('1h'), status: { class: 5 }, header: [{ name: 'A', value: 'b' }] },
      now,
    );
    assert.deepEqual(filterJson(f), {
      state: ['failed', 'none'],
      since: new Date(now - 3_600_000).toISOString(),
      header: ['A=b'],
      status: '5xx',
    });
  });

  it('path globs: * stays in a segment, ** crosses, ? is one character; SQLite GLOB is a superset', () => {
    const table: Array<[string, string, boolean]> = [
      ['/events/*', '/events/charge', true],
      ['/events/*', '/events/a/b', false],
      ['/events/**', '/events/a/b', true],
      ['/e?ents', '/events', true],
      ['/a.b', '/aXb', false],
      ['/[x]', '/[x]', true],
      ['/[x]', '/x', false],
      ['*', '/', false],
      ['/*', '/', true],
    ];
    for (const [glob, path, want] of table) {
      assert.equal(globRegExp(glob).test(path), want, `${glob} ${path}`);
    }
    assert.deepEqual(sqliteGlob('/a/**/b'), { pattern: '/a/*/b', exact: true });
    assert.deepEqual(sqliteGlob('/a/*/[b]'), { pattern: '/a/*/[[]b]', exact: false });
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatDuration, isBareNumber, noUnitMessage, parseDuration, parseSize } from '../../src/config/units.js';

describe('parseDuration', () => {
  const cases: Array<[string, number | undefined]> = [
    ['30s', 30_000],
    ['1m30s', 90_000],
    ['2h01m30s', 7_290_000],
    ['500ms', 500],
    // No silent units: a bare number is refused, a bare 0 needs none.
    ['1500', undefined],
    ['10', undefined],
    ['0', 0],
    ['0ms', 0],
    ['7d', 604_800_000],
    ['1.5s', 1500],
    ['', undefined],
    ['10x', undefined],
    ['s', undefined],
    ['1m 30s', undefined],
  ];
  for (const [text, ms] of cases) it(`${JSON.stringify(text)} → ${ms}`, () => assert.equal(parseDuration(text), ms));
  it('reads a bare number as ms only when asked (environment variables, for one release)', () => {
    assert.equal(parseDuration('60000', 'ms'), 60_000);
    assert.equal(parseDuration('60s', 'ms'), 60_000);
    assert.equal(parseDuration('abc', 'ms'), undefined);
  });
});

describe('isBareNumber and the hint', () => {
  const cases: Array<[string, boolean]> = [
    ['10', true],
    [' 60000 ', true],
    ['1.5', true],
    ['0', false],
    ['0.0', false],
    ['10s', false],
    ['10ms', false],
    ['-1', false],
    ['', false],
  ];
  for (const [text, bare] of cases) it(`${JSON.stringify(text)} → ${bare}`, () => assert.equal(isBareNumber(text), bare));
  it('says what to write', () => {
    assert.equal(noUnitMessage('10', 'duration'), '10 has no unit: write 10s or 10ms');
    assert.equal(noUnitMessage('25', 'size'), '25 has no unit: write 25B (bytes), 25KiB or 25MiB');
  });
});

describe('formatDuration', () => {
  const cases: Array<[number, string]> = [
    [30_000, '30s'],
    [90_000, '1m30s'],
    [270_000, '4m30s'],
    [7_290_000, '2h01m30s'],
    [10_800_000, '3h'],
    [86_520_000, '24h02m'],
    [3_600_000 + 5_000, '1h00m05s'],
    [250, '250ms'],
  ];
  for (const [ms, text] of cases) it(`${ms} → ${text}`, () => assert.equal(formatDuration(ms), text));
});

describe('parseSize', () => {
  const cases: Array<[string, number | undefined]> = [
    ['25MiB', 26_214_400],
    ['1GiB', 1_073_741_824],
    ['512kb', 512_000],
    ['100 MiB', 104_857_600],
    ['1048576', undefined],
    ['1048576B', 1_048_576],
    ['1048576b', 1_048_576],
    ['0', 0],
    ['1XB', undefined],
    ['-1', undefined],
    ['', undefined],
  ];
  for (const [text, n] of cases) it(`${JSON.stringify(text)} → ${n}`, () => assert.equal(parseSize(text), n));
  it('reads a bare number as bytes only when asked (environment variables, for one release)', () => {
    assert.equal(parseSize('268435456', 'bytes'), 268_435_456);
    assert.equal(parseSize('256MiB', 'bytes'), 268_435_456);
  });
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { formatDuration, parseDuration, parseSize } from '../../src/config/units.js';

describe('parseDuration', () => {
  const cases: Array<[string, number | undefined]> = [
    ['30s', 30_000],
    ['1m30s', 90_000],
    ['2h01m30s', 7_290_000],
    ['500ms', 500],
    ['1500', 1500],
    ['7d', 604_800_000],
    ['1.5s', 1500],
    ['', undefined],
    ['10x', undefined],
    ['s', undefined],
    ['1m 30s', undefined],
  ];
  for (const [text, ms] of cases) it(`${JSON.stringify(text)} → ${ms}`, () => assert.equal(parseDuration(text), ms));
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
    ['1048576', 1_048_576],
    ['0', 0],
    ['1XB', undefined],
    ['-1', undefined],
    ['', undefined],
  ];
  for (const [text, n] of cases) it(`${JSON.stringify(text)} → ${n}`, () => assert.equal(parseSize(text), n));
});

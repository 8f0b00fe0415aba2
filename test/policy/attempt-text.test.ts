import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { gapText, type AttemptText } from '../../src/policy/attempt-text.js';

const T = Date.UTC(2026, 11, 5, 3);

function attempt(startedAt: number, durationMs: number | null, nextAttemptAt: number | null): AttemptText {
  return { startedAt, durationMs, status: 503, errorClass: null, outcome: 'retry', reason: '503', nextAttemptAt, nextWhy: 'schedule' };
}

describe('gapText: the gap before an attempt, and the real one beside the scheduled one when it went out late', () => {
  const cases: Array<[why: string, prev: AttemptText, startedAt: number, reason: string | null, want: string]> = [
    ['sent when scheduled: the gap from the last start', attempt(T, 100, T + 16_100), T + 16_100, null, '+16s'],
    ['late by under a second: as scheduled', attempt(T, 100, T + 16_100), T + 16_900, 'rate', '+17s'],
    [
      'held back by the retry budget: both gaps, and why',
      attempt(T, 100, T + 16_100),
      T + 57_100,
      'retry_budget',
      'scheduled +16s, sent +57s (deferred: retry_budget)',
    ],
    [
      'late without a deferral on record (a pause, a busy worker): both gaps',
      attempt(T, 0, T + 2000),
      T + 9000,
      null,
      'scheduled +2s, sent +9s',
    ],
    [
      'a lease that expired (no duration): gaps from its start',
      attempt(T, null, T),
      T + 30_000,
      'rate',
      'scheduled +0s, sent +30s (deferred: rate)',
    ],
    ['no next time on record: the gap from the last start', attempt(T, 100, null), T + 5000, 'rate', '+5s'],
    ['sub-second gaps in ms', attempt(T, 10, T + 10), T + 250, null, '+250ms'],
  ];
  for (const [why, prev, startedAt, reason, want] of cases) it(why, () => assert.equal(gapText(prev, { startedAt }, reason), want));
});

import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { noteLogEvent, tickLogWindow, type LogLine, type LogStep, type LogWindow } from '../../src/policy/log-window.js';

const W = 60_000;

type Step = ['event', number, string] | ['tick', number];

/** Runs the steps from no window; returns every line written, with the time of the step that wrote it. */
function run(steps: readonly Step[]): { lines: Array<[number, LogLine]>; window: LogWindow | null } {
  let w: LogWindow | null = null;
  const lines: Array<[number, LogLine]> = [];
  for (const s of steps) {
    const r: LogStep = s[0] === 'event' ? noteLogEvent(w, s[2], s[1], W) : tickLogWindow(w, s[1], W);
    w = r.window;
    for (const l of r.lines) lines.push([s[1], l]);
  }
  return { lines, window: w };
}

const first = (kind: string): LogLine => ({ type: 'first', kind });
const more = (fromMs: number, toMs: number, counts: Record<string, number>): LogLine => ({
  type: 'more',
  fromMs,
  toMs,
  counts,
  total: Object.values(counts).reduce((a, n) => a + n, 0),
});

describe('log window: the first failure at once, the rest of the window as one count', () => {
  const cases: Array<[why: string, steps: Step[], lines: Array<[number, LogLine]>, open: LogWindow | null]> = [
    [
      'nothing happened: nothing written, no window',
      [
        ['tick', 0],
        ['tick', 120_000],
      ],
      [],
      null,
    ],
    ['one failure: logged at once, a window opens', [['event', 1000, 'failed']], [[1000, first('failed')]], { startMs: 1000, counts: {} }],
    [
      'a quiet window closes without a line',
      [
        ['event', 1000, 'failed'],
        ['tick', 61_000],
      ],
      [[1000, first('failed')]],
      null,
    ],
    [
      'the window is still open one ms before its end',
      [
        ['event', 1000, 'failed'],
        ['event', 60_999, 'failed'],
        ['tick', 60_999],
      ],
      [[1000, first('failed')]],
      { startMs: 1000, counts: { failed: 1 } },
    ],
    [
      'failures within the window are counted by kind, one line at its end, and a new window opens',
      [
        ['event', 1000, 'failed'],
        ['event', 2000, 'failed'],
        ['event', 3000, 'exhausted'],
        ['event', 4000, 'failed'],
        ['tick', 61_000],
      ],
      [
        [1000, first('failed')],
        [61_000, more(1000, 61_000, { failed: 2, exhausted: 1 })],
      ],
      { startMs: 61_000, counts: {} },
    ],
    [
      'a lasting outage: one count line per window, never the failure itself again',
      [
        ['event', 0, 'failed'],
        ['event', 30_000, 'failed'],
        ['tick', 60_000],
        ['event', 70_000, 'failed'],
        ['event', 80_000, 'failed'],
        ['tick', 100_000],
        ['tick', 120_000],
        ['tick', 180_000],
      ],
      [
        [0, first('failed')],
        [60_000, more(0, 60_000, { failed: 1 })],
        [120_000, more(60_000, 120_000, { failed: 2 })],
      ],
      null,
    ],
    [
      'a late tick: the count line comes with the next event, which opens the next window as counted',
      [
        ['event', 0, 'failed'],
        ['event', 10_000, 'exhausted'],
        ['event', 90_000, 'failed'],
      ],
      [
        [0, first('failed')],
        [90_000, more(0, 90_000, { exhausted: 1 })],
      ],
      { startMs: 90_000, counts: { failed: 1 } },
    ],
    [
      'after a window closed quietly, the next failure is logged at once again',
      [
        ['event', 0, 'failed'],
        ['tick', 60_000],
        ['event', 65_000, 'exhausted'],
      ],
      [
        [0, first('failed')],
        [65_000, first('exhausted')],
      ],
      { startMs: 65_000, counts: {} },
    ],
  ];
  for (const [why, steps, lines, open] of cases) {
    it(why, () => {
      const r = run(steps);
      assert.deepEqual(r.lines, lines);
      assert.deepEqual(r.window, open);
    });
  }

  it('an outage of 10,000 failures over 10 windows writes 1 + 10 lines, and counts every failure', () => {
    const steps: Step[] = [];
    for (let i = 0; i < 10_000; i++) {
      steps.push(['event', i * 60, 'failed']); // 10,000 over 600 s
      if (i % 100 === 0) steps.push(['tick', i * 60]);
    }
    steps.push(['tick', 600_000], ['tick', 660_000], ['tick', 720_000]);
    const r = run(steps);
    assert.equal(r.lines.length, 11);
    const counted = r.lines.reduce((a, [, l]) => a + (l.type === 'more' ? l.total : 1), 0);
    assert.equal(counted, 10_000);
    assert.equal(r.window, null);
  });

  it('does not change the window it is given', () => {
    const w: LogWindow = Object.freeze({ startMs: 0, counts: Object.freeze({ failed: 1 }) });
    noteLogEvent(w, 'failed', 1000, W);
    tickLogWindow(w, 60_000, W);
    assert.deepEqual(w, { startMs: 0, counts: { failed: 1 } });
  });
});

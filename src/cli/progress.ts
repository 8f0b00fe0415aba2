import { SingleBar } from 'cli-progress';
import type { CliIo } from './io.js';

export interface Progress {
  /** `value` of `total` done; `text` is what the bar shows beside it. */
  update(value: number, total: number, text: string): void;
  stop(): void;
}

/**
 * A progress bar on stderr when stderr is a TTY (cli-progress redraws one line); nothing otherwise,
 * so pipes and CI logs get only the final summary. No colours are used, so NO_COLOR holds.
 */
export function createProgress(io: CliIo): Progress {
  if (!io.stderr.isTTY) return { update: () => undefined, stop: () => undefined };
  const bar = new SingleBar({
    format: '{bar} {percentage}% | {text}',
    stream: io.stderr as NodeJS.WritableStream & { isTTY: boolean } as never,
    hideCursor: true,
    barsize: 24,
    fps: 5,
  });
  let started = false;
  return {
    update(value, total, text) {
      if (!started) {
        bar.start(Math.max(total, 1), value, { text });
        started = true;
      } else {
        bar.setTotal(Math.max(total, 1));
        bar.update(value, { text });
      }
    },
    stop() {
      if (started) bar.stop();
    },
  };
}

import { SingleBar } from 'cli-progress';
import { interruptOf, type CliIo } from './io.js';

export interface Progress {
  /** `value` of `total` done; `text` is what the bar shows beside it. */
  update(value: number, total: number, text: string): void;
  stop(): void;
}

/**
 * A progress bar on stderr when stderr is a TTY (cli-progress redraws one line); nothing otherwise,
 * so pipes and CI logs get only the final summary. No colours are used, so NO_COLOR holds.
 *
 * The bar hides the cursor (ESC[?25l) and turns line wrap off (ESC[?7l) while it shows; stopping
 * it puts both back. Ctrl-C or SIGTERM while it shows stops it first (interrupt.ts), and after
 * that it stays stopped: a late update does not hide the cursor again.
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
  let stopped = false;
  let release: (() => void) | undefined;
  const stop = () => {
    stopped = true;
    release?.();
    release = undefined;
    if (started) bar.stop();
  };
  return {
    update(value, total, text) {
      if (stopped) return;
      if (!started) {
        // Registered before the cursor is hidden, so no moment has it hidden with nothing to restore it.
        release = interruptOf(io).onInterrupt(stop);
        bar.start(Math.max(total, 1), value, { text });
        started = true;
      } else {
        bar.setTotal(Math.max(total, 1));
        bar.update(value, { text });
      }
    },
    stop,
  };
}

/**
 * Ctrl-C and SIGTERM for the commands that have something to put back: a progress bar that hid the
 * cursor and turned line wrap off, a `.partial-*` file, a replay the user should know how to follow
 * again. No process.* here: bin.ts installs the signal listeners and exits (`listen`, `exit`).
 *
 * - `onInterrupt(fn)` registers what to put back. When a signal arrives, every registered function
 *   runs once, synchronously, newest first (like finally blocks): the terminal is restored and the
 *   file removed before anything else happens, even if the command is stuck in a call.
 * - `hold()` gives long work an AbortSignal. While one is held, the command gets `graceMs` to
 *   unwind (its finally blocks close the store) and then exits; otherwise the process exits at once.
 * - Either way the exit code is 130 after SIGINT and 143 after SIGTERM (128 + the signal's number),
 *   and a second signal exits at once.
 *
 * The listeners are installed only while something is registered or held, so a command that never
 * asks (serve, worker and their own graceful stop; a quick `bucket list`) keeps Node's defaults.
 */

export type StopSignal = 'SIGINT' | 'SIGTERM';

export const STOP_SIGNALS: readonly StopSignal[] = ['SIGINT', 'SIGTERM'];

/** 130 after SIGINT, 143 after SIGTERM: what a shell reports for a process ended by the signal. */
export function signalExitCode(signal: StopSignal): number {
  return signal === 'SIGINT' ? 130 : 143;
}

/** The reason of a held AbortSignal, and what a command throws when it stops because of one. */
export class Interrupted extends Error {
  readonly signal: StopSignal;
  constructor(signal: StopSignal) {
    super(`interrupted by ${signal}`);
    this.name = 'Interrupted';
    this.signal = signal;
  }
  get exitCode(): number {
    return signalExitCode(this.signal);
  }
}

export interface Interrupt {
  /** The signal that arrived, once one has. */
  readonly interrupted: StopSignal | undefined;
  /**
   * Runs `fn` once, synchronously, if SIGINT or SIGTERM arrives before the returned function is
   * called (the command finished normally). Newest first; an exception in one does not stop the rest.
   */
  onInterrupt(fn: (signal: StopSignal) => void): () => void;
  /**
   * An AbortSignal (reason: an Interrupted) for work that stops at its next step. Until `release`,
   * a signal lets the command unwind for a bounded time before the process exits anyway.
   */
  hold(): { signal: AbortSignal; release(): void };
}

/** For a CliIo without one (in-process tests): never fires. */
export const NO_INTERRUPT: Interrupt = {
  interrupted: undefined,
  onInterrupt: () => () => undefined,
  hold: () => ({ signal: new AbortController().signal, release: () => undefined }),
};

export interface InterruptHooks {
  /** Installs a listener for SIGINT and SIGTERM; returns what removes it. */
  listen(handler: (signal: StopSignal) => void): () => void;
  /** Ends the process with this code (after the output is flushed). */
  exit(code: number): void;
  /** How long a held command may take to unwind after the signal; default 2 s. */
  graceMs?: number;
}

/** The default unwind time: a poll (250 ms) plus closing the store, with room on a loaded machine. */
export const UNWIND_GRACE_MS = 2000;

export class InterruptController implements Interrupt {
  readonly #hooks: InterruptHooks;
  readonly #cleanups = new Map<number, (signal: StopSignal) => void>();
  readonly #abort = new AbortController();
  #nextId = 0;
  #holds = 0;
  #unlisten: (() => void) | undefined;
  #signal: StopSignal | undefined;

  constructor(hooks: InterruptHooks) {
    this.#hooks = hooks;
  }

  get interrupted(): StopSignal | undefined {
    return this.#signal;
  }

  onInterrupt(fn: (signal: StopSignal) => void): () => void {
    if (this.#signal !== undefined) {
      // Registered after the signal (work still unwinding): put it back now.
      this.#run(fn, this.#signal);
      return () => undefined;
    }
    const id = this.#nextId++;
    this.#cleanups.set(id, fn);
    this.#arm();
    return () => {
      this.#cleanups.delete(id);
      this.#disarm();
    };
  }

  hold(): { signal: AbortSignal; release(): void } {
    this.#holds++;
    this.#arm();
    let released = false;
    return {
      signal: this.#abort.signal,
      release: () => {
        if (released) return;
        released = true;
        this.#holds--;
        this.#disarm();
      },
    };
  }

  /** What the installed listener calls: exported for tests that drive the controller without a process. */
  fire(signal: StopSignal): void {
    if (this.#signal !== undefined) {
      // A second Ctrl-C: the user does not want to wait for the unwind.
      this.#runCleanups(signal);
      this.#hooks.exit(signalExitCode(this.#signal));
      return;
    }
    this.#signal = signal;
    this.#runCleanups(signal);
    this.#abort.abort(new Interrupted(signal));
    if (this.#holds === 0) {
      this.#hooks.exit(signalExitCode(signal));
      return;
    }
    // Not unref'd: if the command never returns, this ends the process.
    setTimeout(() => {
      this.#runCleanups(signal);
      this.#hooks.exit(signalExitCode(signal));
    }, this.#hooks.graceMs ?? UNWIND_GRACE_MS);
  }

  #runCleanups(signal: StopSignal): void {
    const fns = [...this.#cleanups.values()].reverse();
    this.#cleanups.clear();
    for (const fn of fns) this.#run(fn, signal);
  }

  #run(fn: (signal: StopSignal) => void, signal: StopSignal): void {
    try {
      fn(signal);
    } catch {
      // Putting one thing back must not keep the rest from it.
    }
  }

  #arm(): void {
    this.#unlisten ??= this.#hooks.listen((s) => this.fire(s));
  }

  #disarm(): void {
    // Once fired the listener stays: a second signal must exit at once, not kill by default.
    if (this.#signal !== undefined || this.#holds > 0 || this.#cleanups.size > 0) return;
    this.#unlisten?.();
    this.#unlisten = undefined;
  }
}

/**
 * Sleeps `ms` or until `signal` aborts (then rejects with its reason, an Interrupted): the poll
 * loops of replay --wait and tail stop within one step.
 */
export function sleepUnlessInterrupted(ms: number, signal: AbortSignal): Promise<void> {
  return new Promise((resolve, reject) => {
    if (signal.aborted) return reject(signal.reason);
    const onAbort = () => {
      clearTimeout(timer);
      reject(signal.reason);
    };
    const timer = setTimeout(() => {
      signal.removeEventListener('abort', onAbort);
      resolve();
    }, ms);
    signal.addEventListener('abort', onAbort, { once: true });
  });
}

/**
 * The items of `source` until `signal` aborts, then its reason (an Interrupted) at once, even while
 * the source waits for its next item (an export stalled on a slow link). The source is then left
 * to finish on its own; closing the store ends it. Otherwise it is closed as a for-await closes it.
 */
export async function* untilInterrupted<T>(source: AsyncIterable<T>, signal: AbortSignal): AsyncGenerator<T> {
  const it = source[Symbol.asyncIterator]();
  let onAbort: () => void = () => undefined;
  const aborted = new Promise<never>((_, reject) => {
    onAbort = () => reject(signal.reason);
    if (signal.aborted) onAbort();
    else signal.addEventListener('abort', onAbort, { once: true });
  });
  aborted.catch(() => undefined);
  let done = false;
  try {
    while (true) {
      const step = await Promise.race([it.next(), aborted]);
      if (step.done) {
        done = true;
        return;
      }
      yield step.value;
    }
  } finally {
    signal.removeEventListener('abort', onAbort);
    if (!done) {
      if (signal.aborted) void it.return?.()?.catch(() => undefined);
      else await it.return?.();
    }
  }
}

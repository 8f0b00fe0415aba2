import { execFile } from 'node:child_process';
import { BIN } from './cli.js';

/**
 * Runs the real CLI binary in a real pseudo-terminal (python3's pty module: the child is a session
 * leader with the pty as its controlling terminal, so stdin, stdout and stderr are TTYs and Ctrl-C
 * goes through the line discipline as SIGINT to its process group, as at a keyboard).
 *
 * Once `trigger` has appeared in the output (and `ready`, if given, says yes) it sends `send`:
 * `ctrl-c` writes 0x03 to the terminal, `sigterm` signals the process. Every wait is bounded:
 * the child is killed (SIGKILL) if it has not exited `timeoutMs` after the start.
 */
export interface PtyRun {
  /** Exit code, or null when a signal ended the process (then `signal` names it). */
  code: number | null;
  signal: number | null;
  /** Everything the terminal showed (stdout and stderr interleaved), raw bytes as latin1. */
  output: string;
  /** The offset in `output` where the key or signal was sent; -1 if never. */
  sentAt: number;
  timedOut: boolean;
}

const DRIVER = String.raw`
import base64, fcntl, json, os, pty, select, signal, struct, sys, termios, time
cfg = json.loads(sys.argv[1])
pid, fd = pty.fork()
if pid == 0:
    os.chdir(cfg['cwd'])
    os.execve(cfg['argv'][0], cfg['argv'], cfg['env'])
fcntl.ioctl(fd, termios.TIOCSWINSZ, struct.pack('HHHH', 24, 120, 0, 0))
trigger = cfg['trigger'].encode('latin1')
out = bytearray()
deadline = time.monotonic() + cfg['timeout']
sent_at = -1
status = None
timed_out = False
ready = cfg.get('ready')
def is_ready():
    return ready is None or any(ready['contains'] in n for n in os.listdir(ready['dir']))
def read_some(wait):
    r, _, _ = select.select([fd], [], [], wait)
    if not r:
        return True
    try:
        data = os.read(fd, 65536)
    except OSError:
        return False
    if not data:
        return False
    out.extend(data)
    return True
open_fd = True
while status is None:
    if time.monotonic() > deadline:
        timed_out = True
        os.kill(pid, signal.SIGKILL)
        _, status = os.waitpid(pid, 0)
        break
    if open_fd:
        open_fd = read_some(0.05)
    else:
        time.sleep(0.05)
    if sent_at < 0 and trigger in out and is_ready():
        sent_at = len(out)
        if cfg['send'] == 'ctrl-c':
            os.write(fd, b'\x03')
        else:
            os.kill(pid, signal.SIGTERM)
    wpid, st = os.waitpid(pid, os.WNOHANG)
    if wpid:
        status = st
while open_fd:
    open_fd = read_some(0.2) and len(out) < 64 * 1024 * 1024
code = os.waitstatus_to_exitcode(status)
print(json.dumps({'code': code if code >= 0 else None, 'signal': -code if code < 0 else None,
                  'output': base64.b64encode(bytes(out)).decode(), 'sentAt': sent_at, 'timedOut': timed_out}))
`;

export function runInPty(
  args: string[],
  opts: {
    trigger: string;
    send: 'ctrl-c' | 'sigterm';
    env?: Record<string, string>;
    cwd?: string;
    /** A second condition for sending: a file whose name contains `contains` is in `dir` (a partial export). */
    ready?: { dir: string; contains: string };
    timeoutMs?: number;
  },
): Promise<PtyRun> {
  const timeoutMs = opts.timeoutMs ?? 30_000;
  const cfg = {
    argv: [process.execPath, BIN, ...args],
    env: { ...process.env, NO_COLOR: '1', TERM: 'xterm', ...opts.env },
    cwd: opts.cwd ?? process.cwd(),
    trigger: opts.trigger,
    send: opts.send,
    ready: opts.ready ?? null,
    timeout: timeoutMs / 1000,
  };
  return new Promise((resolve, reject) => {
    execFile(
      'python3',
      ['-c', DRIVER, JSON.stringify(cfg)],
      { timeout: timeoutMs + 15_000, maxBuffer: 128 * 1024 * 1024 },
      (err, stdout, stderr) => {
        if (err) return reject(new Error(`pty driver failed: ${err.message}\n${stderr}`));
        const r = JSON.parse(stdout) as Omit<PtyRun, 'output'> & { output: string };
        resolve({ ...r, output: Buffer.from(r.output, 'base64').toString('latin1') });
      },
    );
  });
}

/**
 * How long one step of closing a PostgreSQL part may take: ending a pool waits for every
 * checked-out connection to come back, and ending a client for its socket's 'end'. After a
 * connection was cut mid-call (pg_terminate_backend, a restart, a dropped network) either can wait
 * for an event that never comes; with nothing else left running, Node then ends the process with
 * exit code 13 (an unsettled await) instead of finishing the shutdown (reliability case 7q, 1 run
 * in 10). Past this bound, closing goes on; the sockets left are destroyed with the process.
 */
export const CLOSE_STEP_MS = 5_000; // 5 s

/** Waits for `p` at most CLOSE_STEP_MS; true when it settled (either way) in time. */
export async function settleWithin(p: Promise<unknown>, ms = CLOSE_STEP_MS): Promise<boolean> {
  let timer: NodeJS.Timeout | undefined;
  const late = new Promise<false>((resolve) => {
    timer = setTimeout(() => resolve(false), ms);
  });
  try {
    return await Promise.race([
      p.then(
        () => true as const,
        () => true as const,
      ),
      late,
    ]);
  } finally {
    clearTimeout(timer);
  }
}

import type { Received } from '../../helpers/consumer.js';

export { startConsumer, type Consumer, type Received, type Script } from '../../helpers/consumer.js';

/** How many times the consumer saw each hookbucket request id (`x-hookbucket-request-id`). */
export function countByRequestId(received: readonly Received[]): Map<string, number> {
  const out = new Map<string, number>();
  for (const r of received) {
    for (let i = 0; i + 1 < r.rawHeaders.length; i += 2) {
      if (r.rawHeaders[i]!.toLowerCase() === 'x-hookbucket-request-id') {
        const id = r.rawHeaders[i + 1]!;
        out.set(id, (out.get(id) ?? 0) + 1);
      }
    }
  }
  return out;
}

/** Deliveries seen more than once: the sum over request ids of (times seen − 1). */
export function duplicatesIn(received: readonly Received[]): number {
  let n = 0;
  for (const c of countByRequestId(received).values()) n += Math.max(0, c - 1);
  return n;
}

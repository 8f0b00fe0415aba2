import type { StorageErrorCode } from '../storage-error.js';

// Pure: no driver import, so storage-error.ts can ask it about any error.

/**
 * What a PostgreSQL error means for the caller, from its SQLSTATE (PostgreSQL docs, appendix A)
 * or the driver's connection errors. Undefined: not a storage error (a bug, a constraint we check).
 */
export function pgStorageErrorCode(e: unknown): StorageErrorCode | undefined {
  const code = (e as { code?: unknown } | null)?.code;
  // The driver's own: the socket failed or the server went away mid-query.
  if (typeof code === 'string' && /^E(CONNREFUSED|CONNRESET|PIPE|TIMEDOUT|HOSTUNREACH|NETUNREACH|AI_AGAIN|NOTFOUND)$/.test(code))
    return 'storage_error';
  // SQLSTATEs are five characters of digits and upper-case letters (EPIPE, five letters too, is
  // matched above first).
  if (typeof code === 'string' && /^[0-9A-Z]{5}$/.test(code)) {
    if (code === '53100') return 'storage_full'; // disk_full
    if (code.startsWith('53')) return 'storage_error'; // insufficient resources: memory, connections
    // lock_not_available, deadlock, serialization failure, query_canceled (statement_timeout)
    if (code === '55P03' || code === '40P01' || code === '40001' || code === '57014') return 'store_busy';
    if (code.startsWith('08') || code.startsWith('57P') || code.startsWith('58') || code === '25P03' || code === 'XX000')
      return 'storage_error';
    // object_not_in_prerequisite_state at connect: the database is closed to connections
    // (ALTER DATABASE … ALLOW_CONNECTIONS false, as during maintenance); ingest answers 503 until
    // it opens again (reliability case 7q). Any other 55000 stays a bug, not a storage error.
    if (code === '55000' && /not currently accepting connections/.test(String((e as { message?: unknown }).message)))
      return 'storage_error';
    return undefined;
  }
  const message = (e as { message?: unknown } | null)?.message;
  if (
    typeof message === 'string' &&
    /Connection terminated|timeout exceeded when trying to connect|Client has encountered a connection error/i.test(message)
  ) {
    return 'storage_error';
  }
  return undefined;
}

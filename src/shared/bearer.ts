/**
 * Bearer-token checks for the listeners that sit beside ingest (a standalone worker's /metrics;
 * the admin listener can share them). Both sides are hashed with SHA-256 before a constant-time
 * compare, so neither the token's bytes nor its length leak through timing.
 */
import { createHash, timingSafeEqual } from 'node:crypto';

/** Whether `given` equals `expected`, in time that depends on neither. */
export function tokensEqual(given: string, expected: string): boolean {
  const a = createHash('sha256').update(given, 'utf8').digest();
  const b = createHash('sha256').update(expected, 'utf8').digest();
  return timingSafeEqual(a, b);
}

/** The token of an `Authorization: Bearer <token>` header (scheme case-insensitive, RFC 9110 §11.1); undefined otherwise. */
export function bearerToken(header: string | undefined): string | undefined {
  if (header === undefined) return undefined;
  const m = /^bearer +(\S+) *$/i.exec(header);
  return m ? m[1] : undefined;
}

/** Whether a request's Authorization header carries the expected token. */
export function bearerMatches(header: string | undefined, expected: string): boolean {
  const given = bearerToken(header);
  // Compared even when absent, so a missing header costs the same as a wrong one.
  return tokensEqual(given ?? '', expected) && given !== undefined;
}

/** Whether a bind address only accepts connections from this host: localhost, 127.0.0.0/8, ::1. */
export function isLoopbackHost(host: string): boolean {
  const h = host.trim().toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost' || h === '::1') return true;
  const v4 = h.startsWith('::ffff:') ? h.slice(7) : h;
  return /^127\.\d{1,3}\.\d{1,3}\.\d{1,3}$/.test(v4);
}

/**
 * Bearer-token checks for the listeners that sit beside ingest (the admin listener, a standalone
 * worker's /metrics). Both sides are hashed with SHA-256 before a constant-time
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
  const m = /^bearer[ \t]+(\S+)[ \t]*$/i.exec(header);
  return m ? m[1] : undefined;
}

/** Whether a request's Authorization header carries the expected token. */
export function bearerMatches(header: string | undefined, expected: string): boolean {
  const given = bearerToken(header);
  // Compared even when absent, so a missing header costs the same as a wrong one.
  return tokensEqual(given ?? '', expected) && given !== undefined;
}

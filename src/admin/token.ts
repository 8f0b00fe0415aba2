import { createHash, createHmac, timingSafeEqual } from 'node:crypto';

// Both sides hashed first, then compared in constant time (shared/bearer.ts).
export { tokensEqual } from '../shared/bearer.js';

/** The session cookie's name. */
export const SESSION_COOKIE = 'hookbucket_session';

/** How long a login lasts. */
export const SESSION_TTL_MS = 12 * 60 * 60_000; // 12 h

/**
 * Sessions are stateless: `v1.<expires ms>.<mac>`, with mac = HMAC-SHA256 over `v1.<expires>`
 * under a key derived from the token. Nothing is stored, so a session works across restarts and
 * on every receiver that shares the token, and changing the token ends every session.
 */
function sessionKey(token: string): Buffer {
  return createHash('sha256').update(`hookbucket-session:${token}`, 'utf8').digest();
}

function mac(token: string, payload: string): Buffer {
  return createHmac('sha256', sessionKey(token)).update(payload, 'utf8').digest();
}

/** A session cookie value that expires `ttlMs` after `nowMs`. */
export function issueSession(token: string, nowMs: number, ttlMs = SESSION_TTL_MS): string {
  const payload = `v1.${nowMs + ttlMs}`;
  return `${payload}.${mac(token, payload).toString('base64url')}`;
}

/** Whether a session cookie value was issued under `token` and has not expired at `nowMs`. */
export function verifySession(token: string, value: string | undefined, nowMs: number): boolean {
  if (!value) return false;
  const m = /^(v1\.(\d{1,16}))\.([A-Za-z0-9_-]{43})$/.exec(value);
  if (!m) return false;
  const expected = mac(token, m[1]!);
  const given = Buffer.from(m[3]!, 'base64url');
  // 43 base64url characters are 32 bytes, like the MAC: timingSafeEqual needs equal lengths.
  if (given.length !== expected.length || !timingSafeEqual(given, expected)) return false;
  return Number(m[2]) > nowMs;
}

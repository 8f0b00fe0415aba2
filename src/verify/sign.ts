/**
 * Re-signing deliveries the Standard Webhooks way, so that a consumer checks hookbucket's signature
 * with a fresh timestamp on every attempt and replay, however late: `webhook-id`,
 * `webhook-timestamp` (this attempt's send time, in seconds) and `webhook-signature`, a
 * space-separated list of `v1,<base64 HMAC-SHA256 over "<id>.<timestamp>.<body>">`, one per secret
 * (several while a secret is rotated).
 */
import { createHmac, randomBytes, webcrypto } from 'node:crypto';
import { secretKey } from '../policy/verify.js';

/** The three headers, in the order they are sent. */
export function standardSignatureHeaders(id: string, sentAtMs: number, body: Uint8Array, secrets: readonly string[]): string[] {
  const ts = String(Math.floor(sentAtMs / 1000));
  const prefix = Buffer.from(`${id}.${ts}.`, 'utf8');
  const signatures = secrets.map((s) => {
    const mac = createHmac('sha256', secretKey({ kind: 'standard' }, s));
    mac.update(prefix);
    mac.update(body);
    return `v1,${mac.digest('base64')}`;
  });
  return ['webhook-id', id, 'webhook-timestamp', ts, 'webhook-signature', signatures.join(' ')];
}

/**
 * Bodies from this size up are signed on libuv's thread pool (WebCrypto's HMAC runs there), so a
 * 100 MiB delivery does not hold the event loop, and every other attempt, for the HMAC's length.
 */
export const OFF_THREAD_SIGN_BYTES = 1024 * 1024;

/**
 * `standardSignatureHeaders` for a delivery attempt: the same headers, computed off the event loop
 * for a large body (OFF_THREAD_SIGN_BYTES).
 */
export async function signatureHeaders(id: string, sentAtMs: number, body: Uint8Array, secrets: readonly string[]): Promise<string[]> {
  if (body.byteLength < OFF_THREAD_SIGN_BYTES) return standardSignatureHeaders(id, sentAtMs, body, secrets);
  const ts = String(Math.floor(sentAtMs / 1000));
  const data = Buffer.concat([Buffer.from(`${id}.${ts}.`, 'utf8'), body]);
  const signatures = await Promise.all(
    secrets.map(async (s) => {
      const key = await webcrypto.subtle.importKey('raw', secretKey({ kind: 'standard' }, s), { name: 'HMAC', hash: 'SHA-256' }, false, [
        'sign',
      ]);
      return `v1,${Buffer.from(await webcrypto.subtle.sign('HMAC', key, data)).toString('base64')}`;
    }),
  );
  return ['webhook-id', id, 'webhook-timestamp', ts, 'webhook-signature', signatures.join(' ')];
}

/** A new signing secret for `--sign-secret generate`: 32 random bytes, `whsec_` and base64. */
export function generateSigningSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

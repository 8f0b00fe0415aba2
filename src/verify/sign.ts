/**
 * Re-signing deliveries the Standard Webhooks way, so that a consumer checks hookbucket's signature
 * with a fresh timestamp on every attempt and replay, however late: `webhook-id`,
 * `webhook-timestamp` (this attempt's send time, in seconds) and `webhook-signature`, a
 * space-separated list of `v1,<base64 HMAC-SHA256 over "<id>.<timestamp>.<body>">`, one per secret
 * (several while a secret is rotated).
 */
import { createHmac, randomBytes } from 'node:crypto';
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

/** A new signing secret for `--sign-secret generate`: 32 random bytes, `whsec_` and base64. */
export function generateSigningSecret(): string {
  return `whsec_${randomBytes(32).toString('base64')}`;
}

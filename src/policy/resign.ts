/**
 * What a delivery attempt of a provider-ready bucket says about the request (issue 15, point 6),
 * decided from the bucket's settings and the request's stored verdict and dedup key. Pure: the
 * worker signs with src/verify/sign.ts and sends with forward.ts.
 *
 * - `webhook-id` names the event, not the attempt: the same on every attempt and every replay
 *   generation, so a consumer de-duplicates with it. It is the request's stored dedup key without
 *   its source tag (`h:`/`j:`, src/policy/dedup.ts), so a Stripe event arrives with its own
 *   `evt_…` id and a GitHub delivery with its `X-GitHub-Delivery`; a request without one (no
 *   `--dedup` when it was received, or no key in it) uses the request id. The key is the one
 *   stored with the request at ingest, never recomputed from the bucket's current setting, so a
 *   later `bucket update --dedup …` cannot change the id of an event already delivered. A key that
 *   is not a plain header token (a JSON value with spaces, control bytes or non-ASCII) would not
 *   survive as a header value byte for byte, and uses the request id instead.
 * - The signature is only ever hookbucket's word that the sender was verified (or that the bucket
 *   does not verify): on a verifying bucket only a request whose stored verdict is `verified` is
 *   signed. Anything else (an imported row marked `unverified`, a request received before
 *   `--verify` was set) is not sent at all: the attempt is recorded `failed` with reason
 *   `not_verified`, visible in `requests show`, until `requests verify` re-checks it and `replay`
 *   sends it. Sending it unsigned instead would have a verifying consumer refuse it on every retry
 *   of the schedule, and a careless one accept what nobody vouched for.
 * - A request carrying a non-`verified` verdict is never signed, even if the bucket no longer
 *   verifies (a quarantined request replayed by naming its state, say).
 */

/** The verdict as stored with the request: `result` is a VerifyResult or `unverified` (imported). */
export interface VerdictLike {
  scheme: string;
  result: string;
}

export interface ResignSettings {
  /** The bucket verifies senders (`--verify`); only its presence matters here. */
  verify: unknown | null;
  sign: { scheme: 'standard'; secrets: readonly string[] } | null;
}

export type SignPlan =
  /** No re-signing: the request goes as stored (minus our namespace). */
  | { kind: 'plain' }
  /** Re-sign with these secrets under this `webhook-id`. */
  | { kind: 'sign'; id: string; secrets: readonly string[] }
  /** Not sent: the attempt is recorded `failed` with this reason and message. */
  | { kind: 'refuse'; reason: 'not_verified'; message: string };

/** A `webhook-id` taken from a dedup key must go out byte for byte: visible ASCII, no spaces. */
const HEADER_TOKEN = /^[\x21-\x7e]{1,512}$/;

/** The `webhook-id` of every attempt of the request (file comment). */
export function webhookId(requestId: string, dedupKey: string | null): string {
  if (dedupKey === null) return requestId;
  const value = /^[hj]:/.test(dedupKey) ? dedupKey.slice(2) : dedupKey;
  return HEADER_TOKEN.test(value) ? value : requestId;
}

/** Whether and how to sign an attempt of this request (file comment). */
export function signPlan(
  settings: ResignSettings,
  request: { id: string; verdict: VerdictLike | null; dedupKey: string | null },
): SignPlan {
  const { sign } = settings;
  if (sign === null) return { kind: 'plain' };
  const v = request.verdict;
  if ((v !== null && v.result !== 'verified') || (v === null && settings.verify !== null)) {
    const what =
      v === null
        ? 'it has no verdict (it was stored before the bucket verified senders)'
        : `its verdict is ${v.result}${v.result === 'unverified' ? ' (imported from a file)' : ''}`;
    return {
      kind: 'refuse',
      reason: 'not_verified',
      message: `not sent: the bucket re-signs deliveries and signs only verified requests; ${what}. \`hookbucket requests verify ${request.id}\` re-checks it, then \`hookbucket replay\` sends it`,
    };
  }
  return { kind: 'sign', id: webhookId(request.id, request.dedupKey), secrets: sign.secrets };
}

/** The headers a re-signed attempt carries, in the order it sends them. */
export const SIGNATURE_HEADERS: readonly string[] = ['webhook-id', 'webhook-timestamp', 'webhook-signature'];

/**
 * The name a stored header goes out under on a re-signed attempt; null: not a `webhook-*` header,
 * so the usual rules apply (src/drain/forward.ts). A `webhook-*` header, a Standard Webhooks
 * sender's own, goes as `x-hookbucket-original-<name>` (its case kept), so no `webhook-*` header is
 * sent twice and the consumer checks only hookbucket's signature. Always: also when a bucket
 * `--forward-header` has its name. Renamed, it no longer collides with that header, and dropping it
 * in favour of the forward header (the rule for other names) would lose the sender's value without
 * a word. Decided on the name alone: the `x-hookbucket-` namespace is hookbucket's, so a stored
 * `x-hookbucket-original-*` is dropped before it could pass as one of these.
 */
export function originalHeaderName(name: string): string | null {
  return name.toLowerCase().startsWith('webhook-') ? `x-hookbucket-original-${name}` : null;
}

/** Whether a bucket `--forward-header` goes out on a re-signed attempt: one named like a signature header would break it. */
export function keepsForwardHeader(name: string): boolean {
  return !SIGNATURE_HEADERS.includes(name.toLowerCase());
}

/**
 * The `x-hookbucket-verified` value: the scheme the request was verified with, on a bucket that
 * verifies; null (no header) for any other request.
 */
export function verifiedHeader(settings: ResignSettings, verdict: VerdictLike | null): string | null {
  return settings.verify !== null && verdict !== null && verdict.result === 'verified' ? verdict.scheme : null;
}

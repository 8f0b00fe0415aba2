/**
 * `bucket create|update --destination` and `replay --to` (CLI and admin API) refuse a destination
 * the `destinations` setting refuses (src/policy/destination-policy.ts): an IP literal judged as
 * it is, a host name by every address it resolves to here and now. This is the early, friendly
 * check; the drain's connect-time check (src/drain/destination-guard.ts) is the one that holds,
 * since DNS can answer differently later or on the worker's host. A name that does not resolve
 * now is accepted: the connect-time check judges it at each attempt.
 */
import { lookup as dnsLookup } from 'node:dns/promises';
import { judgeAddress, judgeAddresses, parseIp, type DestinationPolicy } from '../policy/destination-policy.js';
import { destinationPolicyOf } from '../settings/settings.js';
import { AppError } from '../shared/errors.js';
import type { Store } from '../store/store.js';

/** Every address a name resolves to (getaddrinfo, as the connection would). */
export type ResolveAll = (host: string) => Promise<string[]>;

export const resolveAll: ResolveAll = async (host) => (await dnsLookup(host, { all: true, verbatim: true })).map((a) => a.address);

/** The judgement of one URL under a policy; throws destination_refused. */
export async function checkDestinationUrl(url: string, policy: DestinationPolicy, resolve: ResolveAll = resolveAll): Promise<void> {
  if (policy.kind === 'any') return;
  let hostname: string;
  try {
    hostname = new URL(url).hostname;
  } catch {
    return; // not a URL: the option's own parser refuses it
  }
  const literal = parseIp(hostname);
  if (literal !== undefined) {
    const j = judgeAddress(hostname.replace(/^\[|\]$/g, ''), policy);
    if (!j.allowed) throw new AppError('destination_refused', j.message);
    return;
  }
  let addresses: string[];
  try {
    addresses = await resolve(hostname);
  } catch {
    return;
  }
  const j = judgeAddresses(addresses, policy, hostname);
  if (!j.allowed) throw new AppError('destination_refused', j.message);
}

/** Reads the setting, then checks `url` (nothing to check when null or undefined). */
export async function checkDestinationAllowed(
  store: Pick<Store, 'getSettings'>,
  url: string | null | undefined,
  resolve: ResolveAll = resolveAll,
): Promise<void> {
  if (url === null || url === undefined) return;
  await checkDestinationUrl(url, destinationPolicyOf(await store.getSettings()), resolve);
}

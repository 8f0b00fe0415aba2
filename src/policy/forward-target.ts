/**
 * Where an attempt goes: the bucket's destination URL joined with the stored sub-path and raw
 * query, as undici takes it (`{ origin, path }`, never a URL string it would normalise). Pure: the
 * store computes it inside its claim transaction, forward.ts sends to it.
 */
import { joinForwardPath } from './forward-path.js';

export interface ForwardTarget {
  origin: string;
  /** Path and query, raw, as undici writes them on the request line. */
  path: string;
}

/** Parsed destinations, by URL: a bucket has one, so each is parsed once rather than for every claimed attempt. */
const destinations = new Map<string, { origin: string; pathname: string; search: string }>();
const DESTINATIONS_KEPT = 256;

function parsedDestination(destination: string): { origin: string; pathname: string; search: string } {
  let u = destinations.get(destination);
  if (u === undefined) {
    const url = new URL(destination);
    u = { origin: url.origin, pathname: url.pathname, search: url.search };
    if (destinations.size >= DESTINATIONS_KEPT) destinations.clear();
    destinations.set(destination, u);
  }
  return u;
}

/**
 * The destination URL, then the stored sub-path (unless `forwardPath` is off) without its
 * dot-segments, or as stored when `rawPath`, then the stored raw query, after any query the
 * destination already has, joined with `&`.
 */
export function forwardTarget(
  destination: string,
  subPath: string,
  query: string | null,
  forwardPath: boolean,
  rawPath = false,
): ForwardTarget {
  const u = parsedDestination(destination);
  let path = u.pathname;
  if (forwardPath) path = joinForwardPath(path, subPath, rawPath);
  const own = u.search.length > 1 ? u.search.slice(1) : null;
  if (own !== null && query !== null && query !== '') path += `?${own}&${query}`;
  else if (own !== null) path += `?${own}`;
  else if (query !== null) path += `?${query}`;
  return { origin: u.origin, path };
}

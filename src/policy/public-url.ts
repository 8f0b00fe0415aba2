/**
 * The base URL a bucket's address is printed with (`bucket create`, `bucket show`), in order:
 * HOOKBUCKET_PUBLIC_URL (what senders use, e.g. behind a proxy), else the ingest address a running
 * serve recorded in the workers table, else a placeholder that says it is one. Pure.
 */

export type IngestUrlSource = 'public_url' | 'serve' | 'placeholder';

export interface IngestBaseUrl {
  /** No trailing slash: `${base}/b/<name>`. */
  readonly base: string;
  readonly source: IngestUrlSource;
}

export const PLACEHOLDER_BASE_URL = 'http://HOST:8787';

/** HOOKBUCKET_PUBLIC_URL as a base: an http(s) URL without query or fragment; undefined when it is not one. */
export function parsePublicUrl(raw: string): string | undefined {
  let u: URL;
  try {
    u = new URL(raw.trim());
  } catch {
    return undefined;
  }
  if ((u.protocol !== 'http:' && u.protocol !== 'https:') || u.search || u.hash || u.username || u.password) return undefined;
  return u.href.replace(/\/+$/, '');
}

/** The `url` a live receiver recorded in its workers row's info (JSON), if any. */
export function recordedUrl(info: string): string | undefined {
  try {
    const j = JSON.parse(info) as { url?: unknown };
    return typeof j.url === 'string' && /^https?:\/\//.test(j.url) ? j.url.replace(/\/+$/, '') : undefined;
  } catch {
    return undefined;
  }
}

/**
 * `publicUrl`: HOOKBUCKET_PUBLIC_URL already parsed (undefined when unset); `recorded`: the URLs
 * live serves recorded, newest first.
 */
export function ingestBaseUrl(publicUrl: string | undefined, recorded: readonly string[]): IngestBaseUrl {
  if (publicUrl !== undefined) return { base: publicUrl, source: 'public_url' };
  if (recorded[0] !== undefined) return { base: recorded[0], source: 'serve' };
  return { base: PLACEHOLDER_BASE_URL, source: 'placeholder' };
}

/** A bucket's address for people, labelled when it is not what senders can use as it is. */
export function bucketUrlText(u: IngestBaseUrl, name: string): string {
  const url = `${u.base}/b/${name}`;
  if (u.source === 'placeholder') return `${url} (placeholder: set HOOKBUCKET_PUBLIC_URL)`;
  if (u.source === 'serve' && isLoopbackUrl(u.base)) return `${url} (serve's local address; senders elsewhere: set HOOKBUCKET_PUBLIC_URL)`;
  return url;
}

function isLoopbackUrl(base: string): boolean {
  const host = new URL(base).hostname.replace(/^\[(.*)\]$/, '$1');
  return host === 'localhost' || host === '::1' || /^127\./.test(host);
}

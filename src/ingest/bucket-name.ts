/** Bucket names: lower-case letters, digits, '_' and '-', 1 to 63 characters, starting alphanumeric. */
export const BUCKET_NAME = /^[a-z0-9][a-z0-9_-]{0,62}$/;

export function isValidBucketName(name: string): boolean {
  return BUCKET_NAME.test(name);
}

export interface IngestTarget {
  bucket: string;
  /** Raw sub-path after the bucket name, still percent-encoded: '', '/', '/a/b%2Fc'. */
  path: string;
  /** Raw query without '?', or null when the target has no '?'. */
  query: string | null;
}

/**
 * Splits a raw request target (`/b/<bucket>[/<sub/path>][?query]`) without decoding or normalising
 * anything, so `..%2F` stays literal and fails the name check. Absolute-form targets
 * (`http://host/b/x`) are reduced to their path first. Returns undefined when the target is not an
 * ingest URL or the bucket segment is not a valid name.
 */
export function parseIngestTarget(rawTarget: string): IngestTarget | undefined {
  let target = rawTarget;
  if (!target.startsWith('/')) {
    const m = /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*/i.exec(target);
    if (!m) return undefined;
    target = target.slice(m[0].length) || '/';
  }
  if (!target.startsWith('/b/')) return undefined;
  const q = target.indexOf('?');
  const pathPart = q === -1 ? target : target.slice(0, q);
  const query = q === -1 ? null : target.slice(q + 1);
  const rest = pathPart.slice(3);
  const slash = rest.indexOf('/');
  const bucket = slash === -1 ? rest : rest.slice(0, slash);
  if (!isValidBucketName(bucket)) return undefined;
  return { bucket, path: slash === -1 ? '' : rest.slice(slash), query };
}

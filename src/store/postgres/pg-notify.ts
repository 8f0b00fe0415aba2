import { sql, type Kysely } from 'kysely';

/**
 * LISTEN/NOTIFY channels: the PostgreSQL half of the store's change feed (the SQLite half polls
 * data_version). A NOTIFY is delivered when its transaction commits, and only then, so a notice
 * never announces a row a listener cannot read yet.
 */

/** New work: requests stored, deliveries made due by a replay. Payload: bucket names, or `*`. */
export const REQUESTS_CHANNEL = 'hookbucket_requests';
/** A bucket was created, changed, paused, resumed or deleted. Payload: the bucket name, or `*`. */
export const BUCKETS_CHANNEL = 'hookbucket_buckets';

/** PostgreSQL refuses payloads of 8,000 bytes or more; past this, the payload is `*` (any bucket). */
export const MAX_PAYLOAD_BYTES = 7_900;

/** Bucket names (valid names hold no comma), deduplicated, comma-separated; `*` when too long. */
export function noticePayload(buckets: Iterable<string>): string {
  const names = [...new Set(buckets)];
  const payload = names.join(',');
  return names.length === 0 || Buffer.byteLength(payload) > MAX_PAYLOAD_BYTES ? '*' : payload;
}

/** The bucket names a payload names; `*` means any bucket. */
export function parseNoticePayload(payload: string | undefined): string[] | '*' {
  if (payload === undefined || payload === '' || payload === '*') return '*';
  return payload.split(',');
}

/** Queues a NOTIFY inside the caller's transaction (sent at its commit). */
export async function notify(
  // biome-ignore lint/suspicious/noExplicitAny: needs no table, so it takes any schema
  db: Kysely<any>,
  channel: typeof REQUESTS_CHANNEL | typeof BUCKETS_CHANNEL,
  buckets: Iterable<string>,
): Promise<void> {
  await sql`select pg_notify(${channel}, ${noticePayload(buckets)})`.execute(db);
}

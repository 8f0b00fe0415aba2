import type pg from 'pg';
import { newId } from '../../shared/ids.js';
import { verdictColumns } from '../provider-row.js';
import type { Disposition, StoredVerdict } from '../store.js';
import { DB_NOW_TEXT } from './pg-clock.js';
import { noticePayload, REQUESTS_CHANNEL } from './pg-notify.js';

/**
 * One PostgreSQL group-commit transaction's statements, between the caller's BEGIN and COMMIT
 * (pg-ingest.ts owns the connection and the COMMIT, because a COMMIT's failure means something
 * else than a statement's). The pg client is used directly, as the SQLite sink uses cached
 * better-sqlite3 statements: this is the hot path, and it must run on the one connection the sink
 * can destroy when a batch outlives its deadline.
 */

/** A request ready for its INSERT: hashed and encoded before any connection is taken. */
export interface PgIngestRow {
  seq: number;
  id: string;
  bucket: string;
  receivedAt: number;
  method: string;
  path: string;
  query: string | null;
  headers: string;
  body: Buffer;
  sha256: string;
  peer: string | null;
  trailers: string | null;
  createDelivery: boolean;
  /** What ingest made of it; absent: accepted (only accepted requests get a delivery). */
  disposition?: Disposition;
  verdict?: StoredVerdict;
  /** Checked and recorded inside the batch's transaction (CapturedRequest.dedup). */
  dedup?: { key: string; windowMs: number };
}

/** Refusals counted per (bucket, reason): [bucket, reason, count, lastAt]. */
export type PgRejectionCount = [bucket: string, reason: string, count: number, lastAt: number];

/** PostgreSQL's protocol counts bind parameters in an Int16: 65,535 at most per statement. */
export const MAX_BIND_PARAMS = 65_535;
/**
 * Body bytes per INSERT statement. pg builds each statement's Bind message whole in memory and the
 * server reads it whole before it starts, so a batch of many large bodies goes as several
 * statements of about this size in the same transaction (a single body over it goes alone).
 */
export const MAX_STATEMENT_BYTES = 8 * 1024 * 1024; // 8 MiB

const REQUEST_COLUMNS = [
  'id',
  'bucket',
  'received_at',
  'method',
  'path',
  'query',
  'headers',
  'body',
  'size',
  'sha256',
  'peer',
  'trailers',
  'disposition',
  'verify_scheme',
  'verify_result',
  'verify_reason',
  'dedup_key',
  'duplicate_of',
] as const;

/**
 * Splits rows into consecutive [start, end) runs, each one statement: at most `maxParams` bind
 * parameters, and no more than `maxBytes` of row bytes unless a single row is larger by itself.
 */
export function planStatements(
  bytes: readonly number[],
  paramsPerRow: number,
  maxBytes: number,
  maxParams = MAX_BIND_PARAMS,
): Array<[number, number]> {
  const rowsPerStatement = Math.max(1, Math.floor(maxParams / paramsPerRow));
  const runs: Array<[number, number]> = [];
  let start = 0;
  let size = 0;
  for (let i = 0; i < bytes.length; i++) {
    const b = bytes[i]!;
    if (i > start && (i - start >= rowsPerStatement || size + b > maxBytes)) {
      runs.push([start, i]);
      start = i;
      size = 0;
    }
    size += b;
  }
  if (start < bytes.length) runs.push([start, bytes.length]);
  return runs;
}

export interface BatchLimits {
  maxStatementBytes: number;
  maxParams: number;
}

export interface BatchOutcome {
  /** Seqs not stored because their bucket is deleting or gone (answered 404, as on SQLite). */
  missing: number[];
  /** Buckets that received requests in this transaction (the NOTIFY payload). */
  stored: string[];
}

/**
 * Inserts the batch inside the caller's open transaction. Lock order, the same in every batch so
 * concurrent batches (and receivers) cannot deadlock each other: bucket rows (FOR SHARE, by name),
 * then bucket_due rows (by name), then rejections (by bucket and reason). The bucket_due and
 * rejection upserts come last, so their row locks are held for the COMMIT only, not while large
 * bodies are sent.
 */
export async function writeIngestBatch(
  client: pg.PoolClient,
  rows: readonly PgIngestRow[],
  rejections: readonly PgRejectionCount[],
  limits: BatchLimits,
  /** Tests with a manual clock: first attempts due at their receipt time, as on SQLite, not the database's now. */
  useCallerClock = false,
): Promise<BatchOutcome> {
  // A bucket deleted, or made a tombstone (deleting_at set), before this point is refused, like
  // SQLite's check inside its write lock. FOR SHARE conflicts with the UPDATE that sets
  // deleting_at and with the DELETE of the bucket, so neither can commit between this check and our
  // COMMIT: a purge that begins after the tombstone sees every row stored before it. (FOR KEY SHARE,
  // what the foreign key takes, would let the tombstone UPDATE through.) A tombstone set while we
  // waited is seen here: READ COMMITTED re-checks the row's newest version after the wait.
  const names = [...new Set([...rows.map((r) => r.bucket), ...rejections.map((r) => r[0]).filter((b) => b !== '')])].sort();
  const live = new Set<string>();
  if (names.length > 0) {
    const res = await client.query<{ name: string }>({
      text: 'select name from buckets where name = any($1::text[]) and deleting_at is null order by name for share',
      values: [names],
    });
    for (const r of res.rows) live.add(r.name);
  }
  const missing: number[] = [];
  const keep: PgIngestRow[] = [];
  for (const r of rows) {
    if (live.has(r.bucket)) keep.push(r);
    else missing.push(r.seq);
  }

  const decided = await decideDedup(client, keep);

  const runs = planStatements(
    keep.map((r) => r.body.byteLength + r.headers.length),
    REQUEST_COLUMNS.length,
    limits.maxStatementBytes,
    limits.maxParams,
  );
  for (const [start, end] of runs) {
    const values: unknown[] = [];
    const tuples: string[] = [];
    for (let i = start; i < end; i++) {
      const r = keep[i]!;
      const d = decided.get(r);
      const v = verdictColumns(r.disposition, r.verdict);
      const n = values.length;
      tuples.push(`(${REQUEST_COLUMNS.map((_, k) => `$${n + k + 1}`).join(', ')})`);
      values.push(
        r.id,
        r.bucket,
        r.receivedAt,
        r.method,
        r.path,
        r.query,
        r.headers,
        r.body,
        r.body.byteLength,
        r.sha256,
        r.peer,
        r.trailers,
        d === undefined ? v.disposition : 'duplicate',
        v.verify_scheme,
        v.verify_result,
        v.verify_reason,
        r.dedup?.key ?? null,
        d ?? null,
      );
    }
    await client.query({ text: `insert into requests (${REQUEST_COLUMNS.join(', ')}) values ${tuples.join(', ')}`, values });
  }

  // First deliveries: four array parameters whatever the row count, so no cap is needed.
  // Only accepted requests are delivered: quarantined, duplicate and handshake ones never are.
  const delivered = keep.filter((r) => r.createDelivery && (r.disposition ?? 'accepted') === 'accepted' && !decided.has(r));
  if (delivered.length > 0) {
    // Due from the database's clock (read once: an uncorrelated subquery is evaluated once per
    // statement), which the worker compares against: a receiver whose clock runs behind or ahead
    // does not make its requests wait or jump the queue. created_at keeps the receipt time.
    const inserted = await client.query<{ bucket: string; next_attempt_at: number }>({
      text: `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at,
               lease_until, trigger, replay_id, deferrals, last_deferral_reason, created_at, updated_at)
             select t.id, t.request_id, t.bucket, null, 1, 'pending', 0, ${useCallerClock ? 't.at' : `(select ${DB_NOW_TEXT})`}, null, 'initial', null, 0, null, t.at, t.at
             from unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) as t(id, request_id, bucket, at)
             returning bucket, next_attempt_at`,
      values: [
        delivered.map(() => newId()),
        delivered.map((r) => r.id),
        delivered.map((r) => r.bucket),
        delivered.map((r) => r.receivedAt),
      ],
    });
    // The earliest first attempt per bucket lowers its due time (bucket-due.ts). The upsert locks
    // the row even when it changes nothing, and must: a claim reading the bucket's due rows under
    // that lock then either sees this delivery or runs after this COMMIT and is lowered again.
    const dueAt = new Map<string, number>();
    for (const r of inserted.rows) {
      const at = dueAt.get(r.bucket);
      const next = Number(r.next_attempt_at);
      if (at === undefined || next < at) dueAt.set(r.bucket, next);
    }
    const due = [...dueAt].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    await client.query({
      text: `insert into bucket_due (bucket, next_due_at) select * from unnest($1::text[], $2::bigint[])
             on conflict (bucket) do update set next_due_at = excluded.next_due_at
             where bucket_due.next_due_at is null or bucket_due.next_due_at > excluded.next_due_at`,
      values: [due.map(([b]) => b), due.map(([, at]) => at)],
    });
  }

  // A refusal counted for a bucket that is gone or deleting counts as naming no bucket, so a new
  // bucket of that name does not inherit it. Merged again after that mapping: one upsert may not
  // touch the same (bucket, reason) twice.
  if (rejections.length > 0) {
    const merged = new Map<string, PgRejectionCount>();
    for (const [bucket, reason, count, lastAt] of rejections) {
      const b = bucket === '' || live.has(bucket) ? bucket : '';
      const key = `${b}\u0000${reason}`;
      const prev = merged.get(key);
      if (prev) {
        prev[2] += count;
        prev[3] = Math.max(prev[3], lastAt);
      } else merged.set(key, [b, reason, count, lastAt]);
    }
    const sorted = [...merged.entries()].sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0)).map(([, r]) => r);
    await client.query({
      text: `insert into rejections (bucket, reason, count, last_at)
             select * from unnest($1::text[], $2::text[], $3::bigint[], $4::bigint[])
             on conflict (bucket, reason) do update
             set count = rejections.count + excluded.count, last_at = greatest(rejections.last_at, excluded.last_at)`,
      values: [sorted.map((r) => r[0]), sorted.map((r) => r[1]), sorted.map((r) => r[2]), sorted.map((r) => r[3])],
    });
  }

  const stored = [...new Set(keep.map((r) => r.bucket))];
  // One notice per commit, delivered by the server only if the COMMIT succeeds (pg-notify.ts).
  if (stored.length > 0) await client.query({ text: 'select pg_notify($1, $2)', values: [REQUESTS_CHANNEL, noticePayload(stored)] });
  return { missing, stored };
}

/**
 * Dedup inside the ingest transaction (CapturedRequest.dedup): returns the accepted rows that are
 * duplicates, each with the request it repeats. Within the batch the first row of a key (in batch
 * order) is the candidate and later ones repeat it; each candidate then takes its key with one
 * upsert that replaces only an expired holder. The upsert locks the key's row whether or not it
 * replaces it, and waits for a concurrent transaction that inserted or took the same key, so of
 * several receivers (or batches) with one key exactly one gets it: the others see its committed
 * row (READ COMMITTED re-checks the newest version) and store their request as a duplicate. Keys
 * are taken in (bucket, key) order, the same in every transaction, so two batches cannot deadlock.
 */
async function decideDedup(client: pg.PoolClient, rows: readonly PgIngestRow[]): Promise<Map<PgIngestRow, string>> {
  const dup = new Map<PgIngestRow, string>();
  const first = new Map<string, PgIngestRow>();
  const later: Array<[PgIngestRow, PgIngestRow]> = [];
  for (const r of rows) {
    if ((r.disposition ?? 'accepted') !== 'accepted' || r.dedup === undefined) continue;
    const k = `${r.bucket}\u0000${r.dedup.key}`;
    const f = first.get(k);
    if (f === undefined) first.set(k, r);
    else later.push([r, f]);
  }
  if (first.size === 0) return dup;
  // One statement per window length (a bucket's window is one value), so that the upsert's WHERE
  // can tell the candidate's receipt time from its new expiry: received_at = expires_at - window.
  const byWindow = new Map<number, PgIngestRow[]>();
  for (const r of first.values()) {
    const w = r.dedup!.windowMs;
    const list = byWindow.get(w);
    if (list) list.push(r);
    else byWindow.set(w, [r]);
  }
  const taken = new Set<string>();
  for (const [windowMs, list] of [...byWindow].sort(([a], [b]) => a - b)) {
    const res = await client.query<{ bucket: string; key: string }>({
      text: `insert into dedup_keys (bucket, key, request_id, expires_at)
             select * from unnest($1::text[], $2::text[], $3::text[], $4::bigint[]) as t(bucket, key, request_id, expires_at)
             order by bucket, key
             on conflict (bucket, key) do update set request_id = excluded.request_id, expires_at = excluded.expires_at
             where dedup_keys.expires_at <= excluded.expires_at - $5::bigint
             returning bucket, key`,
      values: [
        list.map((r) => r.bucket),
        list.map((r) => r.dedup!.key),
        list.map((r) => r.id),
        list.map((r) => r.receivedAt + windowMs),
        windowMs,
      ],
    });
    for (const t of res.rows) taken.add(`${t.bucket}\u0000${t.key}`);
  }
  const lost = [...first].filter(([k]) => !taken.has(k)).map(([, r]) => r);
  if (lost.length > 0) {
    // Still locked by our upsert: the live holder cannot change or go before our COMMIT.
    const res = await client.query<{ bucket: string; key: string; request_id: string }>({
      text: `select d.bucket, d.key, d.request_id from dedup_keys d
             join unnest($1::text[], $2::text[]) as t(bucket, key) on d.bucket = t.bucket and d.key = t.key`,
      values: [lost.map((r) => r.bucket), lost.map((r) => r.dedup!.key)],
    });
    const holder = new Map(res.rows.map((h) => [`${h.bucket}\u0000${h.key}`, h.request_id]));
    for (const r of lost) {
      const h = holder.get(`${r.bucket}\u0000${r.dedup!.key}`);
      if (h === undefined) throw new Error(`dedup key of bucket ${r.bucket} vanished inside the ingest transaction`);
      dup.set(r, h);
    }
  }
  for (const [r, f] of later) dup.set(r, dup.get(f) ?? f.id);
  return dup;
}

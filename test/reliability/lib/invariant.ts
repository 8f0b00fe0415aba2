import { createHash } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import BetterSqlite3 from 'better-sqlite3';
import type { AckEntry, SentRequest } from './ack-log.js';

/**
 * The suite's invariant, checked on the database itself through a connection of its own (read
 * only when it can be), never through the receiver; the same checks on SQLite and (pg-invariant.ts)
 * PostgreSQL:
 * - every acknowledged request is present with the same method, raw path, raw query, raw header
 *   list (order, case, repeats) and a body with the same sha256 (recomputed from the stored bytes);
 * - every stored row is whole: its body hashes to its sha256 column and has its size, and a row
 *   that traces back to a sent request (x-reliability-seq) matches what was sent, acked or not;
 *   no sent request is stored twice;
 * - every delivery references an existing request, every attempt an existing delivery, and (when
 *   asked) every request in a bucket with a destination has its first delivery;
 * - the database's own check is ok (`PRAGMA integrity_check` on SQLite).
 */

export interface InvariantOptions {
  db: string;
  /** Acknowledged requests to look for (their bodies are read and hashed again). */
  acks: readonly AckEntry[];
  /**
   * Acknowledged requests verified whole in an earlier check: only looked up (present, same
   * sha256 column), so a repeated check costs an index probe each, not a re-read of every body.
   */
  stillPresent?: readonly AckEntry[];
  /** Everything sent, by seq: stored rows that carry a seq are compared with it. */
  sent?: ReadonlyMap<number, SentRequest>;
  /** Buckets whose rows are scanned for partial or altered rows (default: every bucket). */
  buckets?: readonly string[];
  /** Ids already scanned in an earlier check (skipped, then added to): keeps repeated checks cheap. */
  scanned?: Set<string>;
  /** Seqs seen stored in earlier checks, to find a request stored twice across checks. */
  seqs?: Map<number, string>;
  /** Every request in a bucket with a destination must have a delivery (ingest writes both in one commit). */
  expectDeliveries?: boolean;
  /** Skip PRAGMA integrity_check (for a check repeated while the file is large and a full one follows). */
  skipIntegrity?: boolean;
}

export interface InvariantReport {
  ok: boolean;
  /** Acked requests found intact. */
  verified: number;
  /** Acked ids missing from the database. */
  lost: string[];
  /** Acked or traced rows that differ from what was sent, with why. */
  altered: Array<{ id: string; why: string }>;
  /** Rows whose stored bytes do not hash to their own sha256 or size. */
  partial: Array<{ id: string; why: string }>;
  /** Seqs stored more than once. */
  duplicateRows: number;
  /** Rows scanned in this check, and of those, traced to a request that got no 2xx. */
  rowsScanned: number;
  storedUnacked: number;
  orphanDeliveries: number;
  orphanAttempts: number;
  missingDeliveries: number;
  integrity: string;
  ms: number;
  /** One line per problem (at most 20), for the case's error. */
  problems: string[];
}

export interface RequestRow {
  id: string;
  bucket: string;
  method: string;
  path: string;
  query: string | null;
  headers: string;
  body: Buffer;
  /** A number (SQLite) or a bigint's text (pg). */
  size: number | string;
  sha256: string;
}

/**
 * What the invariant reads from a database: one small reader per dialect (SQLite here,
 * PostgreSQL in pg-invariant.ts), so the comparisons below are the same code for both.
 */
export interface InvariantRows {
  requestById(id: string): Promise<RequestRow | undefined>;
  sha256Of(id: string): Promise<string | undefined>;
  bucketNames(): Promise<string[]>;
  requestIds(bucket: string): Promise<string[]>;
  orphanDeliveries(): Promise<number>;
  orphanAttempts(): Promise<number>;
  /** Requests in a bucket with a destination that have no delivery. */
  missingDeliveries(): Promise<number>;
  /** The database's own consistency check ('ok' when it passes). */
  integrity(): Promise<string>;
  close(): Promise<void>;
}

/** Opens the file for checking: read-only, or (when SQLite needs to write the WAL index) read-write. */
export function openForCheck(path: string): BetterSqlite3.Database {
  try {
    const db = new BetterSqlite3(path, { readonly: true, fileMustExist: true, timeout: 5000 });
    db.prepare('select count(*) from sqlite_master').get();
    return db;
  } catch {
    return new BetterSqlite3(path, { fileMustExist: true, timeout: 5000 });
  }
}

/** The SQLite reader: a connection of its own on the file. */
export function sqliteInvariantRows(path: string): InvariantRows {
  const db = openForCheck(path);
  const byId = db.prepare('select id, bucket, method, path, query, headers, body, size, sha256 from requests where id = ?');
  const shaOf = db.prepare('select sha256 from requests where id = ?').pluck();
  const ids = db.prepare('select id from requests where bucket = ? order by id').pluck();
  return {
    requestById: async (id) => byId.get(id) as RequestRow | undefined,
    sha256Of: async (id) => shaOf.get(id) as string | undefined,
    bucketNames: async () => db.prepare('select name from buckets').pluck().all() as string[],
    requestIds: async (bucket) => ids.all(bucket) as string[],
    orphanDeliveries: async () => db.prepare(ORPHAN_DELIVERIES).pluck().get() as number,
    orphanAttempts: async () => db.prepare(ORPHAN_ATTEMPTS).pluck().get() as number,
    missingDeliveries: async () => db.prepare(MISSING_DELIVERIES).pluck().get() as number,
    integrity: async () => (db.pragma('integrity_check') as Array<{ integrity_check: string }>).map((x) => x.integrity_check).join('; '),
    close: async () => void db.close(),
  };
}

/** The checks' SQL, the same text on both dialects. */
export const ORPHAN_DELIVERIES = 'select count(*) from deliveries d where not exists (select 1 from requests q where q.id = d.request_id)';
export const ORPHAN_ATTEMPTS = 'select count(*) from attempts a where not exists (select 1 from deliveries d where d.id = a.delivery_id)';
export const MISSING_DELIVERIES = `select count(*) from requests q join buckets b on b.name = q.bucket
  where b.destination is not null and not exists (select 1 from deliveries d where d.request_id = q.id)`;

/** The invariant on a SQLite file. */
export function checkInvariant(o: InvariantOptions): Promise<InvariantReport> {
  return checkRows(sqliteInvariantRows(o.db), o);
}

/** The invariant through any dialect's reader (closed at the end). */
export async function checkRows(db: InvariantRows, o: Omit<InvariantOptions, 'db'>): Promise<InvariantReport> {
  const t0 = performance.now();
  const r: InvariantReport = {
    ok: true,
    verified: 0,
    lost: [],
    altered: [],
    partial: [],
    duplicateRows: 0,
    rowsScanned: 0,
    storedUnacked: 0,
    orphanDeliveries: 0,
    orphanAttempts: 0,
    missingDeliveries: 0,
    integrity: 'skipped',
    ms: 0,
    problems: [],
  };
  try {
    for (const a of o.acks) {
      const row = await db.requestById(a.id);
      if (!row) {
        r.lost.push(a.id);
        continue;
      }
      const why = [...wholeProblems(row), ...matchProblems(row, a)];
      if (why.length > 0) r.altered.push({ id: a.id, why: why.join('; ') });
      else r.verified++;
    }

    for (const a of o.stillPresent ?? []) {
      const sha = await db.sha256Of(a.id);
      if (sha === undefined) r.lost.push(a.id);
      else if (sha !== a.sha256) r.altered.push({ id: a.id, why: 'sha256 column changed since an earlier check' });
      else r.verified++;
    }

    const acked = new Set([...o.acks, ...(o.stillPresent ?? [])].map((a) => a.id));
    const seqs = o.seqs ?? new Map<number, string>();
    const buckets = o.buckets ?? (await db.bucketNames());
    for (const b of buckets) {
      for (const id of await db.requestIds(b)) {
        if (o.scanned?.has(id)) continue;
        const rw = await db.requestById(id);
        if (!rw) continue;
        r.rowsScanned++;
        o.scanned?.add(id);
        const whole = wholeProblems(rw);
        if (whole.length > 0) r.partial.push({ id, why: whole.join('; ') });
        const seq = seqOf(rw.headers);
        if (seq === undefined) continue;
        const earlier = seqs.get(seq);
        if (earlier !== undefined && earlier !== id) r.duplicateRows++;
        seqs.set(seq, id);
        if (!acked.has(id)) r.storedUnacked++;
        const sent = o.sent?.get(seq);
        if (sent) {
          const why = matchProblems(rw, sent);
          if (why.length > 0) r.altered.push({ id, why: `seq ${seq}: ${why.join('; ')}` });
        }
      }
    }

    r.orphanDeliveries = await db.orphanDeliveries();
    r.orphanAttempts = await db.orphanAttempts();
    if (o.expectDeliveries) r.missingDeliveries = await db.missingDeliveries();
    if (!o.skipIntegrity) r.integrity = await db.integrity();
  } finally {
    await db.close();
  }
  const p = r.problems;
  if (r.lost.length) p.push(`${r.lost.length} acknowledged request(s) missing: ${r.lost.slice(0, 5).join(', ')}`);
  for (const a of r.altered.slice(0, 5)) p.push(`altered ${a.id}: ${a.why}`);
  for (const a of r.partial.slice(0, 5)) p.push(`partial ${a.id}: ${a.why}`);
  if (r.duplicateRows) p.push(`${r.duplicateRows} sent request(s) stored twice`);
  if (r.orphanDeliveries) p.push(`${r.orphanDeliveries} delivery row(s) without their request`);
  if (r.orphanAttempts) p.push(`${r.orphanAttempts} attempt row(s) without their delivery`);
  if (r.missingDeliveries) p.push(`${r.missingDeliveries} request(s) in a bucket with a destination have no delivery`);
  if (r.integrity !== 'ok' && r.integrity !== 'skipped') p.push(`integrity check: ${r.integrity.slice(0, 300)}`);
  r.ok = p.length === 0;
  r.ms = performance.now() - t0;
  return r;
}

/** A stored row is whole when its bytes hash to its own sha256 and have its size. */
function wholeProblems(row: RequestRow): string[] {
  const out: string[] = [];
  const body = row.body ?? Buffer.alloc(0);
  if (body.length !== Number(row.size)) out.push(`body ${body.length} bytes, size column ${row.size}`);
  if (createHash('sha256').update(body).digest('hex') !== row.sha256) out.push('body does not hash to its sha256 column');
  try {
    const h = JSON.parse(row.headers) as unknown;
    if (!Array.isArray(h) || h.length % 2 !== 0) out.push('header list is not name/value pairs');
  } catch {
    out.push('header list is not JSON');
  }
  return out;
}

function matchProblems(row: RequestRow, sent: SentRequest): string[] {
  const out: string[] = [];
  if (row.bucket !== sent.bucket) out.push(`bucket ${row.bucket} ≠ ${sent.bucket}`);
  if (row.method !== sent.method) out.push(`method ${row.method} ≠ ${sent.method}`);
  if (row.path !== sent.path) out.push(`path ${JSON.stringify(row.path)} ≠ ${JSON.stringify(sent.path)}`);
  if (row.query !== sent.query) out.push(`query ${JSON.stringify(row.query)} ≠ ${JSON.stringify(sent.query)}`);
  let digest = '';
  try {
    digest = createHash('sha256')
      .update(JSON.stringify(JSON.parse(row.headers)))
      .digest('hex');
  } catch {
    // reported by wholeProblems
  }
  if (digest !== sent.headersDigest) out.push('raw header list differs');
  const bodySha = createHash('sha256')
    .update(row.body ?? Buffer.alloc(0))
    .digest('hex');
  if (bodySha !== sent.sha256) out.push(`body sha256 ${bodySha.slice(0, 12)}… ≠ sent ${sent.sha256.slice(0, 12)}…`);
  if (Number(row.size) !== sent.size) out.push(`size ${row.size} ≠ sent ${sent.size}`);
  return out;
}

function seqOf(headersJson: string): number | undefined {
  try {
    const h = JSON.parse(headersJson) as string[];
    for (let i = 0; i + 1 < h.length; i += 2) if (h[i]!.toLowerCase() === 'x-reliability-seq') return Number(h[i + 1]);
  } catch {
    // not ours
  }
  return undefined;
}

/**
 * `requests verify` on SQLite: stores re-checked verdicts and, with release, turns a quarantined
 * request that now verifies into an accepted one with its first delivery (generation 1, pending,
 * due now: what ingest would have created, ingest-batch.ts), when the bucket has a destination.
 * One immediate transaction per call (the CLI sends at most VERDICT_BATCH updates).
 *
 * Dedup (VerdictUpdate.dedup): a released request is judged as ingest judges an accepted one, at
 * its own arrival time. If the sender retried while it sat in quarantine and the retry verified,
 * the retry holds the key, and the released request becomes its `duplicate` with no delivery, so
 * the event is not delivered twice. Otherwise it takes the key, so a later retry is the duplicate.
 * Updates are applied in id order (ids sort by creation), as on PostgreSQL: of two released
 * requests with one key, the older takes it.
 */
import { bucketNotFound } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { VerdictUpdate, VerdictsApplied } from '../store.js';
import { lowerDueStatement } from './bucket-due.js';
import { dedupKeyStatements, firstDeliveryStatement } from './ingest-batch.js';
import type { SqliteDb } from './open.js';

export function applyVerdicts(db: SqliteDb, bucket: string, updates: readonly VerdictUpdate[], nowMs: number): VerdictsApplied {
  const bucketRow = db.prepare('select destination from buckets where name = ? and deleting_at is null');
  const setVerdict = db.prepare(
    'update requests set verify_scheme = ?, verify_result = ?, verify_reason = ? where id = ? and bucket = ? returning disposition, received_at',
  );
  const accept = db.prepare(`update requests set disposition = 'accepted', dedup_key = coalesce(?, dedup_key) where id = ?`);
  const markDuplicate = db.prepare(`update requests set disposition = 'duplicate', duplicate_of = ?, dedup_key = ? where id = ?`);
  // Ingest's own statements (ingest-batch.ts): the key's live holder, else take the key; the first delivery.
  const { liveKey, takeKey } = dedupKeyStatements(db);
  const insertDelivery = firstDeliveryStatement(db);
  const lowerDue = lowerDueStatement(db);
  const sorted = [...updates].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
  return db
    .transaction((): VerdictsApplied => {
      const row = bucketRow.get(bucket) as { destination: string | null } | undefined;
      if (!row) throw bucketNotFound(bucket);
      let updated = 0;
      const released: string[] = [];
      const duplicates: VerdictsApplied['duplicates'] = [];
      for (const u of sorted) {
        const r = setVerdict.get(u.verdict.scheme, u.verdict.result, u.verdict.reason, u.id, bucket) as
          | { disposition: string; received_at: number }
          | undefined;
        if (r === undefined) continue;
        updated++;
        if (!u.release || u.verdict.result !== 'verified' || r.disposition !== 'quarantined') continue;
        if (u.dedup !== undefined) {
          const holder = liveKey.get(bucket, u.dedup.key, r.received_at) as string | undefined;
          if (holder !== undefined && holder !== u.id) {
            markDuplicate.run(holder, u.dedup.key, u.id);
            duplicates.push({ id: u.id, duplicateOf: holder });
            continue;
          }
          takeKey.run(bucket, u.dedup.key, u.id, r.received_at + u.dedup.windowMs);
        }
        accept.run(u.dedup?.key ?? null, u.id);
        released.push(u.id);
        if (row.destination !== null) insertDelivery.run(newId(), u.id, bucket, nowMs, nowMs, nowMs);
      }
      if (released.length > 0 && row.destination !== null) lowerDue.run(bucket, nowMs);
      return { updated, released, duplicates };
    })
    .immediate();
}

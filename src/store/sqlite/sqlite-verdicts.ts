/**
 * `requests verify` on SQLite: stores re-checked verdicts and, with release, turns a quarantined
 * request that now verifies into an accepted one with its first delivery (generation 1, pending,
 * due now: what ingest would have created, ingest-batch.ts), when the bucket has a destination.
 * One immediate transaction per call (the CLI sends at most VERDICT_BATCH updates).
 */
import { bucketNotFound } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { VerdictUpdate, VerdictsApplied } from '../store.js';
import { lowerDueStatement } from './bucket-due.js';
import type { SqliteDb } from './open.js';

export function applyVerdicts(db: SqliteDb, bucket: string, updates: readonly VerdictUpdate[], nowMs: number): VerdictsApplied {
  const bucketRow = db.prepare('select destination from buckets where name = ? and deleting_at is null');
  const setVerdict = db.prepare('update requests set verify_scheme = ?, verify_result = ?, verify_reason = ? where id = ? and bucket = ?');
  const accept = db.prepare(`update requests set disposition = 'accepted' where id = ? and bucket = ? and disposition = 'quarantined'`);
  const insertDelivery = db.prepare(
    `insert into deliveries (id, request_id, bucket, destination, generation, state, attempts, next_attempt_at,
       lease_until, trigger, replay_id, deferrals, last_deferral_reason, created_at, updated_at)
     values (?, ?, ?, null, 1, 'pending', 0, ?, null, 'initial', null, 0, null, ?, ?)`,
  );
  const lowerDue = lowerDueStatement(db);
  return db
    .transaction((): VerdictsApplied => {
      const row = bucketRow.get(bucket) as { destination: string | null } | undefined;
      if (!row) throw bucketNotFound(bucket);
      let updated = 0;
      const released: string[] = [];
      for (const u of updates) {
        const changes = setVerdict.run(u.verdict.scheme, u.verdict.result, u.verdict.reason, u.id, bucket).changes;
        if (changes === 0) continue;
        updated++;
        if (!u.release || u.verdict.result !== 'verified') continue;
        if (accept.run(u.id, bucket).changes === 0) continue;
        released.push(u.id);
        if (row.destination !== null) insertDelivery.run(newId(), u.id, bucket, nowMs, nowMs, nowMs);
      }
      if (released.length > 0 && row.destination !== null) lowerDue.run(bucket, nowMs);
      return { updated, released };
    })
    .immediate();
}

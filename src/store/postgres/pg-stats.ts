/**
 * Raw per-bucket figures for `stats` and `health` on PostgreSQL: the same figures, from the same
 * indexes, as src/store/sqlite/sqlite-stats.ts (read its header for which index serves which).
 * The bucket set goes in as one text[] parameter (SQLite's json_each), so the number of statements
 * is fixed however many buckets there are; every statement runs in one REPEATABLE READ, read-only
 * transaction, so all figures come from the same snapshot, as on SQLite.
 */
import { sql, type Kysely } from 'kysely';
import { bucketNotFound } from '../../shared/errors.js';
import { idFloorAt } from '../../shared/ids.js';
import type { Database } from '../schema.js';
import type { StatsQuery, StatsSample } from '../store.js';
import {
  oldestWaitingId,
  toStatsSamples,
  type AttemptGroupRow,
  type DeferralRow,
  type DispositionRow,
  type LatestStateRow,
  type RejectionRow,
  type SettledRow,
  type StatsBucketRow,
} from '../stats-rows.js';

/** Same slack as SQLite: an id is made at capture, its row may commit a little later. */
const ID_SLACK_MS = 60_000; // 1m

export async function pgStatsSamples(
  db: Kysely<Database>,
  q: StatsQuery,
): Promise<{ buckets: StatsSample[]; unattributedRejections: Record<string, number> }> {
  return db
    .transaction()
    .setIsolationLevel('repeatable read')
    .setAccessMode('read only')
    .execute(async (trx) => {
      // Every bucket but the ones being deleted (their held rows would read as a growing backlog to
      // `health --fail-on`); named, a deleting bucket still shows its figures. Byte order of names
      // (collate "C"), as SQLite's BINARY collation lists them.
      const { rows: bucketRows } =
        q.bucket === undefined
          ? await sql<{
              name: string;
              paused: number;
            }>`select name, paused from buckets where deleting_at is null order by name collate "C"`.execute(trx)
          : await sql<{ name: string; paused: number }>`select name, paused from buckets where name = ${q.bucket}`.execute(trx);
      if (q.bucket !== undefined && bucketRows.length === 0) throw bucketNotFound(q.bucket);
      const buckets = bucketRows.map((r) => ({ name: r.name, paused: Number(r.paused) === 1 }));
      const names = buckets.map((b) => b.name);
      const since = q.sinceMs;
      const until = q.untilMs;
      const idFloor = idFloorAt(q.sinceMs - ID_SLACK_MS);

      const perBucket = await sql<StatsBucketRow>`
        select j.name as bucket,
          (select count(*) from requests r where r.bucket = j.name) as requests,
          (select count(*) from deliveries d where d.bucket = j.name and d.state = 'superseded') as superseded,
          (select count(*) from requests r where r.bucket = j.name and r.id >= ${idFloor} and r.received_at >= ${since} and r.received_at < ${until}) as in_window,
          (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = j.name and d.state = 'pending') as oldest_pending,
          (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = j.name and d.state = 'retrying') as oldest_retrying,
          (select min(d.request_id) from deliveries d where d.latest = 1 and d.bucket = j.name and d.state = 'delivering') as oldest_delivering
        from unnest(${names}::text[]) as j(name)`.execute(trx);

      const latest = await sql<LatestStateRow>`
        select d.bucket, d.state, count(*) as n from deliveries d
        where d.bucket = any(${names}::text[]) and d.latest = 1 group by d.bucket, d.state`.execute(trx);

      const settled = await sql<SettledRow>`
        select d.bucket, count(*) filter (where d.state = 'delivered') as delivered, count(*) filter (where d.state = 'failed') as failed,
          count(*) filter (where d.state = 'exhausted') as exhausted
        from deliveries d
        where d.bucket = any(${names}::text[]) and d.destination is null and d.settled_at >= ${since} and d.settled_at < ${until}
        group by d.bucket`.execute(trx);

      // Ordered as SQLite's GROUP BY hands its groups out (by key: null durations first, failures first).
      const attempts = await sql<AttemptGroupRow>`
        select a.bucket, a.duration_ms as ms, (a.outcome = 'delivered')::int as ok, count(*) as n
        from attempts a join deliveries d on d.id = a.delivery_id
        where a.bucket = any(${names}::text[]) and a.started_at >= ${since} and a.started_at < ${until}
          and a.outcome is not null and a.outcome != 'released' and d.destination is null
        group by a.bucket, a.duration_ms, (a.outcome = 'delivered')
        order by a.bucket, a.duration_ms nulls first, ok`.execute(trx);

      const rejections = await sql<RejectionRow>`select bucket, reason, count from rejections`.execute(trx);
      // requests_by_disposition: the requests that are not accepted, by bucket and disposition.
      const dispositions = await sql<DispositionRow>`
        select bucket, disposition, count(*) as n from requests
        where bucket = any(${names}::text[]) and disposition <> 'accepted' group by bucket, disposition`.execute(trx);
      const deferrals = await sql<DeferralRow>`
        select bucket, deferred_rate, deferred_retry_budget, deferred_retry_after, deferred_replay_rate
        from bucket_pacer where bucket = any(${names}::text[])`.execute(trx);

      // Each bucket's oldest waiting request, then all their received_at in one statement (SQLite
      // reads them one by one, which is cheap in-process but a round trip each here).
      const oldestIds = new Set<string>();
      for (const r of perBucket.rows) {
        const id = oldestWaitingId(r);
        if (id !== undefined) oldestIds.add(id);
      }
      const receivedAt = new Map<string, number>();
      if (oldestIds.size > 0) {
        const { rows: at } = await sql<{ id: string; received_at: number }>`
          select id, received_at from requests where id = any(${[...oldestIds]}::text[])`.execute(trx);
        for (const a of at) receivedAt.set(a.id, Number(a.received_at));
      }

      return toStatsSamples(
        buckets,
        {
          perBucket: perBucket.rows,
          latest: latest.rows,
          settled: settled.rows,
          attempts: attempts.rows,
          rejections: rejections.rows,
          deferrals: deferrals.rows,
          dispositions: dispositions.rows,
        },
        (id) => receivedAt.get(id),
      );
    });
}

import { createHash } from 'node:crypto';
import { sql, type Kysely } from 'kysely';
import type { Clock } from '../../shared/clock.js';
import { AppError } from '../../shared/errors.js';
import { newId } from '../../shared/ids.js';
import type { Database } from '../schema.js';
import { deletingError, importedVerdict, type RequestImporter } from '../store.js';
import { verdictColumns } from '../provider-row.js';
import { notify, REQUESTS_CHANNEL } from './pg-notify.js';
import { pgStorageErrorCode } from './pg-pool.js';

/** Rows per INSERT statement, and body bytes per statement (bodies can be 100 MiB each). */
const ROWS_PER_INSERT = 100;
const BYTES_PER_INSERT = 8 * 1024 * 1024; // 8 MiB

/**
 * `requests import` on PostgreSQL: the twin of ../sqlite/sqlite-import.ts. Each batch is one
 * transaction with the rows ingest's group commit writes (request, first delivery when asked, the
 * bucket's due time lowered, a NOTIFY on REQUESTS_CHANNEL for the worker), committed with
 * synchronous_commit = on whatever the pool's durability: an import that reported success
 * survives a crash of the server, like an acknowledged ingest.
 *
 * Between two batches the bucket may be deleted, or deleted and created anew with another
 * destination, so each batch checks first, holding the bucket row FOR SHARE until its commit, that
 * the bucket is still the one checked at the start (same name and created_at, no tombstone). A
 * delete marks its tombstone with an UPDATE of that row, so it waits for the batch, and its purge
 * then sees the batch's rows.
 */
export function createPgRequestImporter(db: Kysely<Database>, clock: Clock): RequestImporter {
  return {
    async write(target, items, { createDelivery }) {
      const bucket = target.name;
      const now = clock.now();
      const verdict = verdictColumns('accepted', importedVerdict(target.verifyScheme));
      // Hash and encode before the transaction, so a large body never holds the row lock long.
      const rows = items.map((it) => ({
        // Made now, in file order: ids stay time-ordered, so the import lists and exports in that order.
        id: newId(),
        bucket,
        received_at: now,
        method: it.method,
        path: it.path,
        query: it.query,
        headers: JSON.stringify(it.rawHeaders),
        body: it.body,
        size: it.body.byteLength,
        sha256: createHash('sha256').update(it.body).digest('hex'),
        peer: null,
        trailers: it.rawTrailers && it.rawTrailers.length > 0 ? JSON.stringify(it.rawTrailers) : null,
        ...verdict,
      }));
      try {
        await db.transaction().execute(async (trx) => {
          await sql`set local synchronous_commit = on`.execute(trx);
          const row = await trx
            .selectFrom('buckets')
            .select(['deleting_at', 'created_at'])
            .where('name', '=', bucket)
            .forShare()
            .executeTakeFirst();
          if (row === undefined || Number(row.created_at) !== target.createdAt || row.deleting_at !== null) {
            if (row !== undefined && row.deleting_at !== null) throw deletingError(bucket);
            throw new AppError(
              'not_found',
              row === undefined
                ? `bucket ${bucket} was deleted during the import; the rest was not stored`
                : `bucket ${bucket} was deleted and created again during the import; the rest was not stored in the new bucket`,
            );
          }
          for (let i = 0; i < rows.length; ) {
            const chunk = [rows[i++]!];
            let bytes = chunk[0]!.size;
            while (i < rows.length && chunk.length < ROWS_PER_INSERT && bytes + rows[i]!.size <= BYTES_PER_INSERT) {
              bytes += rows[i]!.size;
              chunk.push(rows[i++]!);
            }
            await trx.insertInto('requests').values(chunk).execute();
            if (createDelivery) {
              await trx
                .insertInto('deliveries')
                .values(
                  chunk.map((r) => ({
                    id: newId(),
                    request_id: r.id,
                    bucket,
                    destination: null,
                    generation: 1,
                    state: 'pending' as const,
                    attempts: 0,
                    next_attempt_at: now,
                    lease_until: null,
                    trigger: 'initial' as const,
                    replay_id: null,
                    deferrals: 0,
                    last_deferral_reason: null,
                    created_at: now,
                    updated_at: now,
                    supersede_requested: 0,
                    latest: 1,
                  })),
                )
                .execute();
            }
          }
          if (createDelivery && rows.length > 0) {
            // The bucket is due from now (../sqlite/bucket-due.ts), and the worker hears of it at commit.
            await sql`insert into bucket_due (bucket, next_due_at) values (${bucket}, ${now})
              on conflict (bucket) do update set next_due_at = excluded.next_due_at
              where bucket_due.next_due_at is null or bucket_due.next_due_at > excluded.next_due_at`.execute(trx);
            await notify(trx, REQUESTS_CHANNEL, [bucket]);
          }
        });
      } catch (e) {
        if (e instanceof AppError) throw e;
        const code = pgStorageErrorCode(e);
        if (code) throw new AppError(code, `import could not write: ${(e as Error).message}`, { cause: e });
        throw e;
      }
      return rows.map((r) => r.id);
    },
    // Batches run on the store's pool: nothing of its own to close.
    async close() {},
  };
}

import type { Kysely } from 'kysely';

// Frozen: never edit a migration that has shipped; add a new dated one instead.
// Deferrals counted by reason, per bucket, on the bucket's pacer row (which every claim reads under
// its lock): each claim adds the deferrals it recorded on the head of the line (once per walk and
// reason, policy/admission.ts), the same count as the Prometheus counter hookbucket_deferrals_total.
// `stats` reports them as `deferred.<reason>`. Counts start at 0 for a bucket made anew under an
// older bucket's name (bucket_created_at tells them apart).

const COLUMNS = ['deferred_rate', 'deferred_retry_budget', 'deferred_retry_after', 'deferred_replay_rate'];

export async function up(db: Kysely<any>): Promise<void> {
  for (const c of COLUMNS)
    await db.schema
      .alterTable('bucket_pacer')
      .addColumn(c, 'bigint', (col) => col.notNull().defaultTo(0))
      .execute();
}

export async function down(db: Kysely<any>): Promise<void> {
  for (const c of COLUMNS) await db.schema.alterTable('bucket_pacer').dropColumn(c).execute();
}

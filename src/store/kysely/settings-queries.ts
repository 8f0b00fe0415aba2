/** The settings table, the same Kysely queries on every dialect (an upsert both SQLite and PostgreSQL spell `on conflict`). */
import type { Kysely } from 'kysely';
import type { Database } from '../schema.js';
import type { StoredSetting } from '../store.js';

export async function selectSettings(db: Kysely<Database>): Promise<StoredSetting[]> {
  const rows = await db.selectFrom('settings').selectAll().orderBy('key').execute();
  return rows.map((r) => ({ key: r.key, value: r.value, updatedAt: Number(r.updated_at) }));
}

export async function upsertSetting(db: Kysely<Database>, key: string, value: string, nowMs: number): Promise<StoredSetting> {
  await db
    .insertInto('settings')
    .values({ key, value, updated_at: nowMs })
    .onConflict((oc) => oc.column('key').doUpdateSet({ value, updated_at: nowMs }))
    .execute();
  return { key, value, updatedAt: nowMs };
}

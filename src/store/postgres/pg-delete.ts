// Placeholder until w/pgops is merged (the coordinator takes that branch's file): same exports.
import type { Kysely } from 'kysely';
import type { Database } from '../schema.js';
import type { PurgeHooks, PurgeResult } from '../store.js';

export async function pgDeleteBucket(_db: Kysely<Database>, _name: string, _options: { force: boolean }, _nowMs: number): Promise<{ requests: number }> {
  throw new Error('not merged yet');
}

export async function pgPurgeDeleting(_db: Kysely<Database>, _hooks: PurgeHooks | undefined, _nowMs: number): Promise<PurgeResult> {
  throw new Error('not merged yet');
}

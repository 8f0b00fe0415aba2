// Placeholder until w/pgops is merged (the coordinator takes that branch's file): same exports.
import type { Kysely } from 'kysely';
import type { Database } from '../schema.js';
import type { PruneHooks, PruneOptions, PruneResult } from '../store.js';

export async function pgPrune(_db: Kysely<Database>, _options: PruneOptions, _hooks?: PruneHooks): Promise<PruneResult> {
  throw new Error('not merged yet');
}

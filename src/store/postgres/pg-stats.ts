// Placeholder until w/pgops is merged (the coordinator takes that branch's file): same exports.
import type { Kysely } from 'kysely';
import type { Database } from '../schema.js';
import type { StatsQuery, StatsSample } from '../store.js';

export async function pgStatsSamples(
  _db: Kysely<Database>,
  _query: StatsQuery,
): Promise<{ buckets: StatsSample[]; unattributedRejections: Record<string, number> }> {
  throw new Error('not merged yet');
}

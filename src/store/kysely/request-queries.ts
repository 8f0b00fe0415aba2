/**
 * Request reads that are the same Kysely query, and the same SQL, on every dialect (the listing
 * queries differ: ../sqlite/request-query.ts, ../postgres/pg-request-query.ts).
 */
import { sql, type Kysely, type RawBuilder } from 'kysely';
import { toStoredRequest } from '../request-rows.js';
import type { Database } from '../schema.js';
import type { RequestState, StoredRequest } from '../store.js';

/**
 * The request state: the latest generation's delivery to the bucket destination, 'held' when the
 * bucket is paused (`paused` is an SQL expression: a literal or the joined `b.paused` column).
 * A request that is not accepted has its disposition as state. Reads the requests row as `r`.
 */
export function latestStateSql(paused: RawBuilder<unknown>): RawBuilder<unknown> {
  // `latest = 1` marks that delivery (maintained by ingest and replay); deliveries_request finds it.
  const latest = sql`(select d.state from deliveries d where d.request_id = r.id and d.latest = 1)`;
  // A request that is not accepted (quarantined, duplicate, handshake) has its disposition as state.
  return sql`case when r.disposition <> 'accepted' then r.disposition else coalesce(case when ${paused} = 1 and ${latest} in ('pending', 'retrying') then 'held' else ${latest} end, 'none') end`;
}

/** One request with its headers, body and state (`requests show`). */
export async function selectStoredRequest(db: Kysely<Database>, id: string): Promise<StoredRequest | undefined> {
  const row = await db
    .selectFrom('requests as r')
    .innerJoin('buckets as b', 'b.name', 'r.bucket')
    .selectAll('r')
    .select(sql<RequestState>`${latestStateSql(sql.ref('b.paused'))}`.as('state'))
    .where('r.id', '=', id)
    .executeTakeFirst();
  return row ? toStoredRequest(row) : undefined;
}

import { sql, type Kysely, type RawBuilder } from 'kysely';
import { idFloorAt } from '../../shared/ids.js';
import type { Database } from '../schema.js';
import type { ListedRequest, RequestBatch, RequestBatchCursor, RequestFilter, StoredRequest } from '../store.js';
import {
  deliveryStatesFor,
  dispositionStatesIn,
  ID_SLACK_MS,
  iterateWithBodies,
  readBatch,
  startCursor,
  toListed,
  type BodyRows,
  type IdRange,
  type ListedRow,
  type RequestBodyRow,
  type SummaryPage,
} from '../request-rows.js';

/**
 * Finding a bucket's requests by filter on PostgreSQL: the twin of ../sqlite/request-query.ts,
 * with the same plans and results.
 *
 * - A state is a range of the partial index deliveries_latest_state (bucket, state, request_id)
 *   where latest = 1; several states are one branch each of a UNION ALL whose branches are each
 *   ordered and limited, so the planner merges k index ranges (k ≤ 7) instead of sorting a bucket.
 * - `none` and "any state" walk requests_bucket_id (bucket, id, size).
 * - `--since/--until` become id bounds widened by ID_SLACK_MS (UUIDv7 ids begin with their time in
 *   ms), and received_at is then compared exactly.
 * - Method, path, header, body and status filters are checked per row on the walk.
 *
 * Ids are compared as text. With UUIDv7 ids (fixed-width lower-case hex, dashes at fixed places)
 * every collation PostgreSQL offers orders them as bytes, as SQLite's binary collation and the
 * JavaScript merge below do.
 */

type Fragment = RawBuilder<unknown>;

/**
 * A path glob as a PostgreSQL regular expression (ARE), anchored: `**` any run, `*` any run without
 * `/`, `?` one character; every other character literal. The same language as globRegExp() in
 * ../sqlite/request-query.ts (which SQLite runs through GLOB and a JavaScript function).
 */
export function pgGlobRegex(glob: string): string {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        re += '.*';
        while (glob[i + 1] === '*') i++;
      } else re += '[^/]*';
    } else if (c === '?') re += '.';
    // An escaped non-alphanumeric is that character in an ARE; letters and digits are never escaped
    // (a backslash before them starts an escape such as \d).
    else re += /[\\^$.|?*+()[\]{}]/.test(c) ? `\\${c}` : c;
  }
  return `^${re}$`;
}

const SHOWN_PATH = sql`(case when r.path = '' then '/' else r.path end)`;

function residuals(filter: RequestFilter): { where: Fragment[]; usesDelivery: boolean } {
  const where: Fragment[] = [];
  if (filter.sinceMs !== undefined) where.push(sql`r.received_at >= ${filter.sinceMs}`);
  if (filter.untilMs !== undefined) where.push(sql`r.received_at < ${filter.untilMs}`);
  if (filter.methods && filter.methods.length > 0) where.push(sql`r.method in (${sql.join(filter.methods)})`);
  if (filter.ids && filter.ids.length > 0) where.push(sql`r.id in (${sql.join(filter.ids)})`);
  if (filter.pathGlob !== undefined) where.push(sql`${SHOWN_PATH} ~ ${pgGlobRegex(filter.pathGlob)}`);
  for (const h of filter.headers ?? []) {
    // The stored text is JSON.stringify's, so a substring test for the value's JSON form skips most
    // rows before the array is parsed; the element walk then checks the pairing: a name at an even
    // zero-based index (odd ordinality), its value right after it.
    where.push(
      sql`position(${JSON.stringify(h.value)} in r.headers) > 0 and exists (
        select 1 from json_array_elements_text(r.headers::json) with ordinality h(v, i)
        where h.i % 2 = 1 and lower(h.v) = ${h.name.toLowerCase()} and (r.headers::json ->> h.i::int) = ${h.value})`,
    );
  }
  if (filter.verified && filter.verified.length > 0) where.push(sql`r.verify_result in (${sql.join(filter.verified)})`);
  // The body's bytes (bytea), searched for the UTF-8 bytes of the text: non-UTF-8 bodies match too.
  if (filter.search !== undefined) where.push(sql`position(${Buffer.from(filter.search, 'utf8')}::bytea in r.body) > 0`);
  let usesDelivery = false;
  if (filter.status) {
    usesDelivery = true;
    if ('code' in filter.status) where.push(sql`d.last_status = ${filter.status.code}`);
    else where.push(sql`d.last_status >= ${filter.status.class * 100} and d.last_status < ${filter.status.class * 100 + 100}`);
  }
  return { where, usesDelivery };
}

function idBounds(col: Fragment, filter: RequestFilter, range: IdRange): Fragment[] {
  const where: Fragment[] = [];
  if (filter.sinceMs !== undefined) where.push(sql`${col} >= ${idFloorAt(filter.sinceMs - ID_SLACK_MS)}`);
  if (filter.untilMs !== undefined) where.push(sql`${col} < ${idFloorAt(filter.untilMs + ID_SLACK_MS)}`);
  if (range.before !== undefined) where.push(sql`${col} < ${range.before}`);
  if (range.after !== undefined) where.push(sql`${col} > ${range.after}`);
  if (range.atMost !== undefined) where.push(sql`${col} <= ${range.atMost}`);
  return where;
}

const and = (parts: Fragment[]) => sql.join(parts, sql` and `);

const COLUMNS = sql`r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, r.disposition, r.verify_scheme, r.verify_result, r.verify_reason`;
const DELIVERY_COLUMNS = sql`d.state, d.attempts, d.last_status, d.generation`;

/** The queries for one page (one per index range), or their `count(*)` forms when `count`. */
export function planPgRequestQueries(bucket: string, filter: RequestFilter, paused: boolean, range: IdRange, count = false): Fragment[] {
  const res = residuals(filter);
  const dir = sql.raw(range.order === 'desc' ? 'desc' : 'asc');
  const finish = (q: Fragment, idCol: Fragment) => (count ? q : sql`${q} order by ${idCol} ${dir} limit ${range.limit}`);

  if (!filter.states) {
    const select = count ? sql`count(*) as n` : sql`${COLUMNS}, ${DELIVERY_COLUMNS}`;
    const where = and([sql`r.bucket = ${bucket}`, ...idBounds(sql`r.id`, filter, range), ...res.where]);
    return [
      finish(
        sql`select ${select} from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 where ${where}`,
        sql`r.id`,
      ),
    ];
  }

  const plans: Fragment[] = [];
  const { states, none } = deliveryStatesFor(filter.states, paused);
  for (const state of states) {
    const select = count ? sql`count(*) as n` : sql`${COLUMNS}, ${DELIVERY_COLUMNS}`;
    const where = and([
      sql`d.bucket = ${bucket}`,
      sql`d.state = ${state}`,
      sql`d.latest = 1`,
      ...idBounds(sql`d.request_id`, filter, range),
      ...res.where,
    ]);
    plans.push(finish(sql`select ${select} from deliveries d join requests r on r.id = d.request_id where ${where}`, sql`d.request_id`));
  }
  // A request without a delivery has no last status, so a status filter leaves `none` empty.
  if (none && !res.usesDelivery) {
    const select = count
      ? sql`count(*) as n`
      : sql`${COLUMNS}, null::text as state, 0 as attempts, null::integer as last_status, null::integer as generation`;
    const where = and([
      sql`r.bucket = ${bucket}`,
      ...idBounds(sql`r.id`, filter, range),
      // `none` is an accepted request without a delivery; the others' state is their disposition.
      sql`r.disposition = 'accepted'`,
      sql`not exists (select 1 from deliveries d where d.request_id = r.id and d.latest = 1)`,
      ...res.where,
    ]);
    plans.push(finish(sql`select ${select} from requests r where ${where}`, sql`r.id`));
  }
  // Quarantined, duplicate and handshake requests: a range of the partial index
  // requests_by_disposition (bucket, disposition, id). They have no delivery, so a status filter
  // leaves them out.
  for (const disposition of res.usesDelivery ? [] : dispositionStatesIn(filter.states)) {
    const select = count
      ? sql`count(*) as n`
      : sql`${COLUMNS}, null::text as state, 0 as attempts, null::integer as last_status, null::integer as generation`;
    const where = and([
      sql`r.bucket = ${bucket}`,
      sql`r.disposition <> 'accepted'`,
      sql`r.disposition = ${disposition}`,
      ...idBounds(sql`r.id`, filter, range),
      ...res.where,
    ]);
    plans.push(finish(sql`select ${select} from requests r where ${where}`, sql`r.id`));
  }
  return plans;
}

/** One page in id order; the extra row (limit + 1) says whether there is a next page. */
export async function pgQueryPage(
  db: Kysely<Database>,
  bucket: string,
  filter: RequestFilter,
  paused: boolean,
  range: IdRange,
): Promise<{ requests: ListedRequest[]; more: boolean }> {
  const plans = planPgRequestQueries(bucket, filter, paused, { ...range, limit: range.limit + 1 });
  if (plans.length === 0) return { requests: [], more: false };
  const dir = sql.raw(range.order === 'desc' ? 'desc' : 'asc');
  const query =
    plans.length === 1
      ? plans[0]!
      : sql`select * from (${sql.join(
          plans.map((p) => sql`(${p})`),
          sql` union all `,
        )}) t order by t.id ${dir} limit ${range.limit + 1}`;
  const rows = (await sql<ListedRow>`${query}`.execute(db)).rows;
  const more = rows.length > range.limit;
  return { requests: rows.slice(0, range.limit).map((r) => toListed(r, paused)), more };
}

export async function pgCountMatching(db: Kysely<Database>, bucket: string, filter: RequestFilter, paused: boolean): Promise<number> {
  const plans = planPgRequestQueries(bucket, filter, paused, { order: 'desc', limit: 0 }, true);
  if (plans.length === 0) return 0;
  const q = sql<{ n: number | null }>`select sum(t.n) as n from (${sql.join(
    plans.map((p) => sql`(${p})`),
    sql` union all `,
  )}) t`;
  return Number((await q.execute(db)).rows[0]?.n ?? 0);
}

/**
 * Every matching request, oldest first, in batches (iterateWithBodies in ../request-rows.ts). The
 * newest id when the iteration starts bounds it. Every request committed before then has an id at
 * or below that bound, and each page is its own statement that sees it, so none is missed. Ids are not in commit order once
 * several receivers write (each makes UUIDv7 ids from its own clock), so a request committed during
 * the export with an id below the bound is included too; those with a newer id are left out.
 */
export async function* pgIterateMatching(
  db: Kysely<Database>,
  bucket: string,
  filter: RequestFilter,
  paused: boolean,
  limit?: number,
): AsyncGenerator<StoredRequest> {
  const newest = await pgNewestId(db, bucket);
  if (newest === null) return;
  const walk = pgWalkOf(db, bucket, filter, paused);
  yield* iterateWithBodies(newest, walk.page, walk.bodies, limit);
}

/** One batch of pgIterateMatching's walk (readBatch in ../request-rows.ts); a null cursor starts it. */
export async function pgMatchingBatch(
  db: Kysely<Database>,
  bucket: string,
  filter: RequestFilter,
  paused: boolean,
  cursor: RequestBatchCursor | null,
  limit?: number,
): Promise<RequestBatch> {
  const from = cursor ?? startCursor(await pgNewestId(db, bucket), limit);
  if (from === null) return { requests: [], next: null };
  const walk = pgWalkOf(db, bucket, filter, paused);
  return readBatch(from, walk.page, walk.bodies);
}

async function pgNewestId(db: Kysely<Database>, bucket: string): Promise<string | null> {
  return (await sql<{ id: string | null }>`select max(id) as id from requests where bucket = ${bucket}`.execute(db)).rows[0]?.id ?? null;
}

/** The summary pages and body reads of a walk over a bucket's matching requests. */
function pgWalkOf(db: Kysely<Database>, bucket: string, filter: RequestFilter, paused: boolean): { page: SummaryPage; bodies: BodyRows } {
  return {
    page: (range) => pgQueryPage(db, bucket, filter, paused, range),
    bodies: async (ids) =>
      (
        await sql<RequestBodyRow>`select id, headers, body, sha256, peer, trailers, dedup_key, duplicate_of from requests where id in (${sql.join(ids)})`.execute(
          db,
        )
      ).rows,
  };
}

import type { Statement } from 'better-sqlite3';
import type { DeliveryState } from '../schema.js';
import type { ListedRequest, RequestBatch, RequestBatchCursor, RequestFilter, StoredRequest } from '../store.js';
import { idFloorAt } from '../../shared/ids.js';
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
import type { SqliteDb } from './open.js';

/**
 * Finding a bucket's requests by filter (`requests list`, `requests export`, `replay`), in id order.
 *
 * Each query is one index range walked in request-id order, so a page costs about `limit` index
 * steps however many rows the bucket holds, and SQLite never sorts:
 * - a state is a range of the partial index `deliveries_latest_state` (bucket, state, request_id)
 *   where latest = 1; several states are one query each, merged here (k ranges, k ≤ 7);
 * - `held` is pending and retrying in a paused bucket (and those two are empty while paused);
 * - `none` (no delivery to the bucket destination) and "any state" walk `requests_bucket_id`
 *   (bucket, id), probing `deliveries_request` per row;
 * - `--since/--until` become id bounds: ids are UUIDv7, whose first 48 bits are the receipt time in
 *   ms. The bound is widened by ID_SLACK_MS and received_at is then compared exactly, because an
 *   id's time and received_at can differ by a clock tick (or more after a clock step back, when the
 *   uuidv7 generator keeps the last time).
 * Method, path, header, body and status filters are checked per row on the walk, so a rare match
 * walks further: body search reads every body it passes (README "Benchmark: Listing" has the figures).
 */

export interface PlannedQuery {
  /** Which index range this walks: one delivery state, `none`, or every request (`all`). */
  source: DeliveryState | 'none' | 'all' | 'quarantined' | 'duplicate' | 'handshake';
  sql: string;
  params: unknown[];
}

/** A path glob as a JavaScript RegExp: `**` any run, `*` any run without `/`, `?` one character. */
export function globRegExp(glob: string): RegExp {
  let re = '';
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') {
        re += '[\\s\\S]*';
        while (glob[i + 1] === '*') i++;
      } else re += '[^/]*';
    } else if (c === '?') re += '[\\s\\S]';
    else re += c.replace(/[\\^$.*+?()[\]{}|]/g, '\\$&');
  }
  return new RegExp(`^${re}$`);
}

/**
 * The same glob as SQLite GLOB, a superset (both stars become `*`): evaluated in C, it leaves the
 * JavaScript check for the rows it lets through, and only when a single `*` must stop at `/`.
 */
export function sqliteGlob(glob: string): { pattern: string; exact: boolean } {
  let pattern = '';
  let exact = true;
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i]!;
    if (c === '*') {
      if (glob[i + 1] === '*') while (glob[i + 1] === '*') i++;
      else exact = false;
      pattern += '*';
    } else if (c === '[') pattern += '[[]';
    else pattern += c;
  }
  return { pattern, exact };
}

const SHOWN_PATH = `(case when r.path = '' then '/' else r.path end)`;

/** Conditions every plan applies per row (after the index range), with their parameters. */
function residuals(filter: RequestFilter): { where: string[]; params: unknown[]; usesDelivery: boolean } {
  const where: string[] = [];
  const params: unknown[] = [];
  if (filter.sinceMs !== undefined) {
    where.push('r.received_at >= ?');
    params.push(filter.sinceMs);
  }
  if (filter.untilMs !== undefined) {
    where.push('r.received_at < ?');
    params.push(filter.untilMs);
  }
  if (filter.methods && filter.methods.length > 0) {
    where.push(`r.method in (${filter.methods.map(() => '?').join(', ')})`);
    params.push(...filter.methods);
  }
  if (filter.ids && filter.ids.length > 0) {
    where.push(`r.id in (${filter.ids.map(() => '?').join(', ')})`);
    params.push(...filter.ids);
  }
  if (filter.pathGlob !== undefined) {
    const g = sqliteGlob(filter.pathGlob);
    where.push(`${SHOWN_PATH} glob ?`);
    params.push(g.pattern);
    if (!g.exact) {
      where.push(`hookbucket_glob(?, ${SHOWN_PATH})`);
      params.push(filter.pathGlob);
    }
  }
  for (const h of filter.headers ?? []) {
    // The substring test runs in C over the stored JSON text (written by JSON.stringify, so the
    // value's encoding there is exactly JSON.stringify(value)); json_each then checks the pairing.
    where.push(
      `instr(r.headers, ?) > 0 and exists (select 1 from json_each(r.headers) h
         where h.key % 2 = 0 and lower(h.value) = ? and json_extract(r.headers, '$[' || (h.key + 1) || ']') = ?)`,
    );
    params.push(JSON.stringify(h.value), h.name.toLowerCase(), h.value);
  }
  if (filter.verified && filter.verified.length > 0) {
    where.push(`r.verify_result in (${filter.verified.map(() => '?').join(', ')})`);
    params.push(...filter.verified);
  }
  if (filter.search !== undefined) {
    where.push('instr(r.body, ?) > 0');
    params.push(Buffer.from(filter.search, 'utf8'));
  }
  let usesDelivery = false;
  if (filter.status) {
    usesDelivery = true;
    if ('code' in filter.status) {
      where.push('d.last_status = ?');
      params.push(filter.status.code);
    } else {
      where.push('d.last_status >= ? and d.last_status < ?');
      params.push(filter.status.class * 100, filter.status.class * 100 + 100);
    }
  }
  return { where, params, usesDelivery };
}

/** Id bounds on `col` from the time filter (widened by ID_SLACK_MS) and the page cursor. */
function idBounds(col: string, filter: RequestFilter, range: IdRange): { where: string[]; params: unknown[] } {
  const where: string[] = [];
  const params: unknown[] = [];
  if (filter.sinceMs !== undefined) {
    where.push(`${col} >= ?`);
    params.push(idFloorAt(filter.sinceMs - ID_SLACK_MS));
  }
  if (filter.untilMs !== undefined) {
    where.push(`${col} < ?`);
    params.push(idFloorAt(filter.untilMs + ID_SLACK_MS));
  }
  if (range.before !== undefined) {
    where.push(`${col} < ?`);
    params.push(range.before);
  }
  if (range.after !== undefined) {
    where.push(`${col} > ?`);
    params.push(range.after);
  }
  if (range.atMost !== undefined) {
    where.push(`${col} <= ?`);
    params.push(range.atMost);
  }
  return { where, params };
}

const COLUMNS =
  'r.id, r.bucket, r.received_at, r.method, r.path, r.query, r.size, r.disposition, r.verify_scheme, r.verify_result, r.verify_reason';

/**
 * The queries for one page: one per index range. Pure (SQL text and parameters), so the plan test
 * can EXPLAIN exactly what runs. `count` gives `select count(*)` forms without order or limit.
 */
export function planRequestQueries(bucket: string, filter: RequestFilter, paused: boolean, range: IdRange, count = false): PlannedQuery[] {
  const res = residuals(filter);
  const dir = range.order === 'desc' ? 'desc' : 'asc';
  const finish = (sql: string, params: unknown[], idCol: string) =>
    count ? { sql, params } : { sql: `${sql} order by ${idCol} ${dir} limit ?`, params: [...params, range.limit] };
  const plans: PlannedQuery[] = [];

  if (!filter.states) {
    const b = idBounds('r.id', filter, range);
    const where = ['r.bucket = ?', ...b.where, ...res.where].join(' and ');
    const select = count ? 'count(*) as n' : `${COLUMNS}, d.state, d.attempts, d.last_status, d.generation`;
    const q = finish(
      `select ${select} from requests r left join deliveries d on d.request_id = r.id and d.latest = 1 where ${where}`,
      [bucket, ...b.params, ...res.params],
      'r.id',
    );
    return [{ source: 'all', ...q }];
  }

  const { states, none } = deliveryStatesFor(filter.states, paused);
  for (const state of states) {
    const b = idBounds('d.request_id', filter, range);
    const where = ['d.bucket = ?', 'd.state = ?', 'd.latest = 1', ...b.where, ...res.where].join(' and ');
    const select = count ? 'count(*) as n' : `${COLUMNS}, d.state, d.attempts, d.last_status, d.generation`;
    const q = finish(
      `select ${select} from deliveries d join requests r on r.id = d.request_id where ${where}`,
      [bucket, state, ...b.params, ...res.params],
      'd.request_id',
    );
    plans.push({ source: state, ...q });
  }
  // A request without a delivery has no last status, so a status filter leaves `none` empty.
  if (none && !res.usesDelivery) {
    const b = idBounds('r.id', filter, range);
    const where = [
      'r.bucket = ?',
      ...b.where,
      // `none` is an accepted request without a delivery; the others' state is their disposition.
      `r.disposition = 'accepted'`,
      'not exists (select 1 from deliveries d where d.request_id = r.id and d.latest = 1)',
      ...res.where,
    ].join(' and ');
    const select = count ? 'count(*) as n' : `${COLUMNS}, null as state, 0 as attempts, null as last_status, null as generation`;
    const q = finish(`select ${select} from requests r where ${where}`, [bucket, ...b.params, ...res.params], 'r.id');
    plans.push({ source: 'none', ...q });
  }
  // Quarantined, duplicate and handshake requests: a range of the partial index requests_by_disposition
  // (bucket, disposition, id) where disposition <> 'accepted' (the literal term lets SQLite use it).
  // They have no delivery, so a status filter leaves them out.
  for (const disposition of res.usesDelivery ? [] : dispositionStatesIn(filter.states)) {
    const b = idBounds('r.id', filter, range);
    const where = ['r.bucket = ?', `r.disposition <> 'accepted'`, 'r.disposition = ?', ...b.where, ...res.where].join(' and ');
    const select = count ? 'count(*) as n' : `${COLUMNS}, null as state, 0 as attempts, null as last_status, null as generation`;
    const q = finish(
      `select ${select} from requests r indexed by requests_by_disposition where ${where}`,
      [bucket, disposition, ...b.params, ...res.params],
      'r.id',
    );
    plans.push({ source: disposition, ...q });
  }
  return plans;
}

const statementCache = new WeakMap<SqliteDb, Map<string, Statement>>();
const prepared = new WeakSet<SqliteDb>();

function prepare(db: SqliteDb, sql: string): Statement {
  if (!prepared.has(db)) {
    const regexps = new Map<string, RegExp>();
    db.function('hookbucket_glob', { deterministic: true }, (glob: unknown, path: unknown) => {
      const g = String(glob);
      let re = regexps.get(g);
      if (!re) {
        if (regexps.size > 100) regexps.clear();
        regexps.set(g, (re = globRegExp(g)));
      }
      return re.test(String(path)) ? 1 : 0;
    });
    prepared.add(db);
  }
  let cache = statementCache.get(db);
  if (!cache) statementCache.set(db, (cache = new Map()));
  let st = cache.get(sql);
  if (!st) {
    if (cache.size > 200) cache.clear();
    cache.set(sql, (st = db.prepare(sql)));
  }
  return st;
}

/** EXPLAIN QUERY PLAN lines of a planned query (for the plan test and diagnostics). */
export function explainPlan(db: SqliteDb, q: PlannedQuery): string[] {
  prepare(db, 'select 1');
  return (db.prepare(`explain query plan ${q.sql}`).all(...q.params) as Array<{ detail: string }>).map((r) => r.detail);
}

/**
 * One page in id order: each range gives at most limit + 1 rows, the ranges are merged, and the
 * extra row (if any) says there is a next page.
 */
export function queryPage(
  db: SqliteDb,
  bucket: string,
  filter: RequestFilter,
  paused: boolean,
  range: IdRange,
): { requests: ListedRequest[]; more: boolean } {
  const plans = planRequestQueries(bucket, filter, paused, { ...range, limit: range.limit + 1 });
  let rows: ListedRow[] = [];
  for (const p of plans) rows = rows.concat(prepare(db, p.sql).all(...p.params) as ListedRow[]);
  if (plans.length > 1) rows.sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0) * (range.order === 'desc' ? -1 : 1));
  const more = rows.length > range.limit;
  return { requests: rows.slice(0, range.limit).map((r) => toListed(r, paused)), more };
}

export function countMatching(db: SqliteDb, bucket: string, filter: RequestFilter, paused: boolean): number {
  let n = 0;
  for (const p of planRequestQueries(bucket, filter, paused, { order: 'desc', limit: 0 }, true)) {
    n += Number((prepare(db, p.sql).get(...p.params) as { n: number }).n);
  }
  return n;
}

/** The summary pages and body reads of a walk over a bucket's matching requests. */
function walkOf(db: SqliteDb, bucket: string, filter: RequestFilter, paused: boolean): { page: SummaryPage; bodies: BodyRows } {
  return {
    page: (range) => queryPage(db, bucket, filter, paused, range),
    bodies: (ids) =>
      prepare(
        db,
        `select id, headers, body, sha256, peer, trailers, dedup_key, duplicate_of from requests where id in (${new Array(ids.length).fill('?').join(', ')})`,
      ).all(...ids) as RequestBodyRow[],
  };
}

function newestId(db: SqliteDb, bucket: string): string | null {
  return db.prepare('select max(id) from requests where bucket = ?').pluck().get(bucket) as string | null;
}

/**
 * Every matching request, oldest first, in batches (iterateWithBodies in ../request-rows.ts), so
 * memory stays bounded whatever the bucket holds. Requests stored after the iteration starts are
 * left out.
 */
export async function* iterateMatching(
  db: SqliteDb,
  bucket: string,
  filter: RequestFilter,
  paused: boolean,
  limit?: number,
): AsyncGenerator<StoredRequest> {
  const newest = newestId(db, bucket);
  if (newest === null) return;
  const walk = walkOf(db, bucket, filter, paused);
  yield* iterateWithBodies(newest, walk.page, walk.bodies, limit);
}

/** One batch of iterateMatching's walk (readBatch in ../request-rows.ts); a null cursor starts it. */
export async function matchingBatch(
  db: SqliteDb,
  bucket: string,
  filter: RequestFilter,
  paused: boolean,
  cursor: RequestBatchCursor | null,
  limit?: number,
): Promise<RequestBatch> {
  const from = cursor ?? startCursor(newestId(db, bucket), limit);
  if (from === null) return { requests: [], next: null };
  const walk = walkOf(db, bucket, filter, paused);
  return readBatch(from, walk.page, walk.bodies);
}

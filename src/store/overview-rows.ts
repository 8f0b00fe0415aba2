/**
 * Dialect-neutral fold of the bucket overview statement (sqlite/sqlite-overview.ts,
 * postgres/pg-overview.ts): one row per bucket of the page, its aggregates as JSON arrays of
 * [key, count] pairs (a JSON string on SQLite, already parsed on PostgreSQL).
 */
import type { Selectable } from 'kysely';
import { toBucket } from './bucket-row.js';
import type { BucketsTable } from './schema.js';
import { toBucketCounts } from './stats-rows.js';
import type { BucketOverviewPage, BucketOverviewQuery, RequestState } from './store.js';

/** A bucket row with the overview's aggregates. */
export type OverviewRowIn = Selectable<BucketsTable> & {
  total_buckets: number | string;
  n: number | string;
  bytes: number | string;
  states: unknown;
  rejections: unknown;
  oldest_waiting_at: number | string | null;
  arrivals: unknown;
  delivered: unknown;
};

const pairs = (v: unknown): Array<[string | number, number]> =>
  ((typeof v === 'string' ? JSON.parse(v) : (v ?? [])) as Array<[string | number, number | string]>).map(([k, n]) => [k, Number(n)]);

/** Counts per window index, `bins` long; pairs outside it are left out. */
function perBin(v: unknown, bins: number): number[] {
  const out = new Array<number>(bins).fill(0);
  for (const [k, n] of pairs(v)) {
    const i = Number(k);
    if (Number.isInteger(i) && i >= 0 && i < bins) out[i] = (out[i] ?? 0) + n;
  }
  return out;
}

/**
 * `rows` holds up to limit + 1 buckets in name order (the extra one only says there is a next
 * page), or one row without a bucket (name null) that carries the total of an empty page.
 */
export function toOverviewPage(rows: readonly OverviewRowIn[], q: BucketOverviewQuery): BucketOverviewPage {
  const named = rows.filter((r) => r.name !== null);
  const shown = named.slice(0, q.limit);
  const counts = toBucketCounts(
    shown.map((r) => ({ name: r.name, paused: Number(r.paused), n: Number(r.n), bytes: Number(r.bytes) })),
    shown.flatMap((r) => pairs(r.states).map(([state, n]) => ({ bucket: r.name, state: state as RequestState, n }))),
    shown.flatMap((r) => pairs(r.rejections).map(([reason, count]) => ({ bucket: r.name, reason: String(reason), count }))),
  );
  return {
    buckets: shown.map((r) => {
      const { total_buckets, n, bytes, states, rejections, oldest_waiting_at, arrivals, delivered, ...bucket } = r;
      return {
        bucket: toBucket(bucket as Selectable<BucketsTable>),
        counts: counts.get(r.name)!,
        oldestWaitingAt: oldest_waiting_at === null ? null : Number(oldest_waiting_at),
        arrivals: perBin(arrivals, q.bins),
        delivered: perBin(delivered, q.bins),
      };
    }),
    total: Number(rows[0]?.total_buckets ?? 0),
    nextAfter: named.length > q.limit ? (shown[shown.length - 1]?.name ?? null) : null,
  };
}

import type { Database } from '../schema.js';
import { MIGRATION_LOCK_TABLE, MIGRATION_TABLE } from './data-end.js';

/**
 * What `migrate-data` does with each table: every table of the Database interface (schema.ts) is
 * listed here, copied or excluded with its reason (a Record over keyof Database: a new table in
 * schema.ts does not compile until it is listed), and so is every other table the migrations
 * create (test/store/migrate-data/tables.test.ts migrates a fresh database of each dialect and
 * fails on a table named nowhere here).
 *
 * Copied tables go in this order, parents first (PostgreSQL's foreign keys: buckets, then replays
 * and requests, then deliveries, then attempts). Rows are copied whole (`select *`), so a column a
 * later migration adds travels without a change here; both ends are on the same schema version.
 */
export interface CopiedTable {
  copy: true;
  /** Copy order, parents first. */
  order: number;
  /** The primary key: rows are read in its order (keyset pages) and matched by it. */
  key: readonly string[];
  /** Byte columns: counted against the batch's byte bound, and hashed by the verify. */
  bytes: readonly string[];
  /** A byte column whose sha256 (hex) the row records: the verify checks the target's bytes against it too. */
  recordedSha256?: { bytes: string; column: string };
  /**
   * What a key present in the target already means (under --append): `refuse` (an id collision),
   * or `sum` (a counter: the source's count is added to the target's, last_at the later one).
   */
  onExisting: 'refuse' | 'sum';
  /** Rows of the source left out (meta's own counters and run markers). */
  skip?: (row: Record<string, unknown>) => boolean;
}

export interface ExcludedTable {
  copy: false;
  reason: string;
}

export type TablePlan = CopiedTable | ExcludedTable;

/** Meta keys that are each database's own: bucket_epoch is bumped in the target instead. */
export const RUN_MARKER_PREFIX = 'migrate_data/';
const ownMetaKey = (key: unknown) => key === 'bucket_epoch' || (typeof key === 'string' && key.startsWith(RUN_MARKER_PREFIX));

export const TABLES = {
  buckets: { copy: true, order: 1, key: ['name'], bytes: [], onExisting: 'refuse' },
  replays: { copy: true, order: 2, key: ['id'], bytes: [], onExisting: 'refuse' },
  requests: {
    copy: true,
    order: 3,
    key: ['id'],
    bytes: ['body'],
    recordedSha256: { bytes: 'body', column: 'sha256' },
    onExisting: 'refuse',
  },
  deliveries: { copy: true, order: 4, key: ['id'], bytes: [], onExisting: 'refuse' },
  attempts: { copy: true, order: 5, key: ['id'], bytes: ['response_body'], onExisting: 'refuse' },
  rejections: { copy: true, order: 6, key: ['bucket', 'reason'], bytes: [], onExisting: 'sum' },
  meta: { copy: true, order: 7, key: ['key'], bytes: [], onExisting: 'refuse', skip: (r) => ownMetaKey(r.key) },
  bucket_pacer: { copy: true, order: 8, key: ['bucket'], bytes: [], onExisting: 'refuse' },
  replay_pacer: { copy: true, order: 9, key: ['replay_id'], bytes: [], onExisting: 'refuse' },
  dedup_keys: { copy: true, order: 10, key: ['bucket', 'key'], bytes: [], onExisting: 'refuse' },
  // The destination policy travels with the data: a hardened database must not arrive open. Under
  // --append, a key the target has set already is an id_collision (set one side to match first).
  settings: { copy: true, order: 11, key: ['key'], bytes: [], onExisting: 'refuse' },
  worker_lease: { copy: false, reason: "the source's single-worker lease: a worker on the target takes its own" },
  workers: { copy: false, reason: "the source's receivers and workers: each process registers with the database it runs against" },
} as const satisfies Record<keyof Database, TablePlan>;

/** Tables the migrations create that are not in the Database interface. */
export const OTHER_TABLES: Record<string, ExcludedTable> = {
  bucket_due: { copy: false, reason: 'derived from deliveries: recomputed in the target for every copied bucket after the copy' },
  [MIGRATION_TABLE]: { copy: false, reason: "Kysely's migration log: the target's own migrator writes it" },
  [MIGRATION_LOCK_TABLE]: { copy: false, reason: "Kysely's migration lock: the target's own" },
};

export type CopiedName = { [K in keyof typeof TABLES]: (typeof TABLES)[K] extends { copy: true } ? K : never }[keyof typeof TABLES];

/** The copied tables in copy order. */
export function copiedTables(): Array<{ name: CopiedName; plan: CopiedTable }> {
  return (Object.entries(TABLES) as Array<[keyof Database, TablePlan]>)
    .filter((e): e is [CopiedName, CopiedTable] => e[1].copy)
    .sort((a, b) => a[1].order - b[1].order)
    .map(([name, plan]) => ({ name, plan }));
}

/**
 * `migrate-data`: a whole deployment from one database to another, either dialect to either. The
 * engine sees two DataEnds (Kysely on today's schema types) and no driver, so one copy and one
 * verify serve SQLite → PostgreSQL, PostgreSQL → SQLite, and each to itself.
 *
 * The run, in order:
 * 1. the source's schema version must be this program's (the source is never written, so never
 *    migrated here); the target is migrated to the latest version;
 * 2. neither side may be held by a live process (holdersOf), unless --force;
 * 3. the run marker: `meta` rows in the target, keyed by the source's identity. A first run
 *    refuses a target that holds buckets or requests unless --append; a run that finds its marker
 *    resumes from it;
 * 4. each copied table (tables.ts) in order, in keyset pages of the source's primary key, bounded
 *    by rows and by body bytes; each page is one target transaction that also moves the table's
 *    cursor in the marker, so a run cut short anywhere resumes after its last committed page;
 * 5. bucket_due recomputed for the copied buckets, bucket_epoch bumped (a running process on the
 *    target reloads its bucket cache);
 * 6. the verify: every source row is looked up in the target by key and compared column by column
 *    (body bytes by the sha256 of each side's stored bytes, and a request's body also against its
 *    recorded sha256), then the marker is marked done.
 *
 * In-flight deliveries (`delivering`, a lease of the source's worker) are copied as lease recovery
 * would leave them if a worker started on the target at the run's time (recoverExpired in both
 * dialects): the open attempt row stays as evidence, closed `lease_expired` (counted: it may have
 * reached the consumer), and the delivery is `retrying`, due at the run's time, lease cleared, or
 * `exhausted` when that was its schedule's last attempt (`superseded` when a replay asked for it).
 * The run's time is the marker's, so a resumed run and its verify transform rows the same way.
 */
import { createHash } from 'node:crypto';
import { sql, type Expression, type Kysely, type RawBuilder } from 'kysely';
import { afterLeaseExpiry, type LeaseExpiry } from '../../policy/admission.js';
import { AppError } from '../../shared/errors.js';
import { toBucket } from '../bucket-row.js';
import type { Bucket } from '../store.js';
import type { BucketsTable, Database } from '../schema.js';
import type { DataEnd } from './data-end.js';
import { copiedTables, RUN_MARKER_PREFIX, type CopiedName, type CopiedTable } from './tables.js';

type Row = Record<string, unknown>;
// biome-ignore lint/suspicious/noExplicitAny: copies tables of either dialect without their schema types
type AnyDb = Kysely<any>;

export interface MigrateDataOptions {
  from: DataEnd;
  to: DataEnd;
  /** The source's identity in the run marker (a hash of the --from value, made by the caller). */
  sourceId: string;
  /** Copy into a target that holds other data (ids must not collide). */
  append: boolean;
  /** Go on although a process holds the source or the target. */
  force: boolean;
  /** Rows per page at most. */
  batchRows: number;
  /** Body bytes per page at most (a page has one row at least, whatever its size). */
  batchBytes: number;
  onProgress?: (p: Progress) => void;
  /** Tests: end the run (as if killed) after this many committed pages. */
  stopAfterBatches?: number;
  /** Tests: runs between the copy and the verify (to tamper with the target). */
  beforeVerify?: () => Promise<void>;
}

export interface Progress {
  phase: 'copy' | 'verify';
  table: string;
  /** Rows done in all tables, of `total`. */
  done: number;
  total: number;
}

export interface TableSummary {
  table: string;
  /** Rows in the source (meta: without each database's own keys). */
  source: number;
  /** Rows copied by this invocation (a resumed run counts only its own). */
  copied: number;
  /** Source rows found in the target by key. */
  found: number;
  /** Source rows not in the target. */
  missing: number;
  /** Found rows whose columns differ from the source's (after the in-flight transform). */
  mismatched: number;
  /** Existing target counters the source's were added to (rejections under --append). */
  merged: number;
}

export interface MigrateDataResult {
  /** The run's time (epoch ms): in-flight deliveries are due at it. */
  runAt: number;
  resumed: boolean;
  tables: TableSummary[];
  bodies: { checked: number; mismatched: number; examples: string[] };
  /** In-flight deliveries made due again (or exhausted) in the copy. */
  leasesRecovered: number;
  ok: boolean;
}

/** A live process on a database: a worker's lease today. */
export interface Holder {
  kind: 'worker' | 'receiver';
  holder: string;
  info: string;
  expiresAt: number;
}

/**
 * Who holds a database now. Today that is a live row in worker_lease (Store.activeWorker's
 * question); the `workers` table, where receivers and workers heartbeat, joins here as one more
 * query (rows with expires_at > now and stopped_at null).
 */
export async function holdersOf(end: DataEnd): Promise<Holder[]> {
  const now = await end.nowMs();
  const leases = await end.db.selectFrom('worker_lease').select(['holder', 'info', 'expires_at']).where('expires_at', '>', now).execute();
  const holders: Holder[] = leases.map((r) => ({
    kind: 'worker' as const,
    holder: r.holder,
    info: r.info,
    expiresAt: Number(r.expires_at),
  }));
  // Receivers and workers beating in the workers table (a worker of SQLite also holds the lease row: named once).
  const beating = await end.db
    .selectFrom('workers')
    .select(['id', 'roles', 'host', 'pid', 'expires_at'])
    .where('expires_at', '>', now)
    .where('stopped_at', 'is', null)
    .execute();
  for (const r of beating) {
    if (holders.some((h) => h.holder === r.id)) continue;
    holders.push({
      kind: r.roles.includes('worker') ? 'worker' : 'receiver',
      holder: r.id,
      info: `pid ${r.pid} on ${r.host}`,
      expiresAt: Number(r.expires_at),
    });
  }
  return holders;
}

/** Marker keys in the target's meta (value: an integer, so a cursor's key values ride in the key). */
function markerKeys(sourceId: string) {
  const base = `${RUN_MARKER_PREFIX}${sourceId}/`;
  return {
    base,
    started: `${base}started`,
    done: `${base}done`,
    cursorPrefix: (table: string) => `${base}cursor/${table}/`,
  };
}

/** The key columns of a row as a JSON array: the cursor's form in the marker, and a map key. */
const keyOf = (plan: CopiedTable, row: Row) => JSON.stringify(plan.key.map((k) => row[k]));

/**
 * The key in the column's own collation, on both dialects: the primary-key index serves each page
 * (a `collate "C"` here made PostgreSQL sort the whole table for every page: a seq scan and sort
 * in EXPLAIN). Keyset paging needs only that ORDER BY and `>` agree, which they do in any
 * deterministic collation; the cursor is only ever compared in the source it came from.
 */
function keyExprs(_end: DataEnd, plan: CopiedTable): RawBuilder<unknown>[] {
  return plan.key.map((k) => sql`${sql.ref(k)}`);
}

// biome-ignore lint/suspicious/noExplicitAny: copies tables of either dialect without their schema types
function afterCursor(end: DataEnd, plan: CopiedTable, cursor: unknown[] | null): Expression<any> {
  if (cursor === null) return sql<boolean>`1 = 1`;
  return sql<boolean>`(${sql.join(keyExprs(end, plan))}) > (${sql.join(cursor.map((v) => sql`${v}`))})`;
}

// biome-ignore lint/suspicious/noExplicitAny: copies tables of either dialect without their schema types
function keyIn(plan: CopiedTable, keys: unknown[][]): Expression<any> {
  if (plan.key.length === 1) return sql<boolean>`${sql.ref(plan.key[0]!)} in (${sql.join(keys.map((k) => sql`${k[0]}`))})`;
  const rows = keys.map((k) => sql`(${sql.join(k.map((v) => sql`${v}`))})`);
  return sql<boolean>`(${sql.join(plan.key.map((k) => sql.ref(k)))}) in (values ${sql.join(rows)})`;
}

/**
 * Keyset pages of a source table after `cursor`: at most `rows` rows and (past the first row)
 * `bytes` bytes of its byte columns. A table with byte columns is paged on its keys and sizes
 * first, so a page of large bodies is never read whole before it is cut.
 */
async function* pages(
  end: DataEnd,
  name: string,
  plan: CopiedTable,
  cursor: unknown[] | null,
  rows: number,
  bytes: number,
): AsyncGenerator<Row[]> {
  const db = end.db as AnyDb;
  for (;;) {
    let page: Row[];
    if (plan.bytes.length === 0) {
      page = await db
        .selectFrom(name)
        .selectAll()
        .where(afterCursor(end, plan, cursor))
        .orderBy(sql.join(keyExprs(end, plan)))
        .limit(rows)
        .execute();
    } else {
      const size = sql.join(
        plan.bytes.map((c) => sql`coalesce(length(${sql.ref(c)}), 0)`),
        sql` + `,
      );
      const heads = (await db
        .selectFrom(name)
        .select([...plan.key.map((k) => sql.ref(k).as(k)), sql<number>`${size}`.as('__bytes')])
        .where(afterCursor(end, plan, cursor))
        .orderBy(sql.join(keyExprs(end, plan)))
        .limit(rows)
        .execute()) as Row[];
      if (heads.length === 0) return;
      let n = 0;
      let total = 0;
      for (const h of heads) {
        const b = Number(h.__bytes);
        if (n > 0 && total + b > bytes) break;
        total += b;
        n++;
      }
      const last = heads[n - 1]!;
      const upTo = sql<boolean>`(${sql.join(keyExprs(end, plan))}) <= (${sql.join(plan.key.map((k) => sql`${last[k]}`))})`;
      page = await db
        .selectFrom(name)
        .selectAll()
        .where(afterCursor(end, plan, cursor))
        .where(upTo)
        .orderBy(sql.join(keyExprs(end, plan)))
        .execute();
    }
    if (page.length === 0) return;
    yield page;
    const last = page[page.length - 1]!;
    cursor = plan.key.map((k) => last[k]);
  }
}

/** Parameters per statement at most: SQLite allows 32,766, PostgreSQL 65,535. */
const MAX_PARAMS = 30_000;

async function insertRows(trx: AnyDb, name: string, rows: Row[]): Promise<void> {
  if (rows.length === 0) return;
  const per = Math.max(1, Math.floor(MAX_PARAMS / Object.keys(rows[0]!).length));
  for (let i = 0; i < rows.length; i += per)
    await trx
      .insertInto(name)
      .values(rows.slice(i, i + per))
      .execute();
}

/** The in-flight transform (see the header): what lease recovery makes of each delivering row. */
interface InFlight {
  /** delivery id → what follows its expired lease. */
  deliveries: Map<string, LeaseExpiry>;
  /** the open attempt (lease_attempt) → the same. */
  attempts: Map<string, LeaseExpiry>;
}

async function inFlightOf(from: DataEnd, runAt: number): Promise<InFlight> {
  const buckets = new Map<string, Bucket>();
  const rows = await from.db
    .selectFrom('deliveries')
    .select(['id', 'bucket', 'attempts', 'lease_attempt'])
    .where('state', '=', 'delivering')
    .execute();
  const names = [...new Set(rows.map((r) => r.bucket))];
  for (let i = 0; i < names.length; i += 500) {
    const bs = await from.db
      .selectFrom('buckets')
      .selectAll()
      .where('name', 'in', names.slice(i, i + 500))
      .execute();
    for (const b of bs) buckets.set(b.name, toBucket(b as BucketsTable));
  }
  const out: InFlight = { deliveries: new Map(), attempts: new Map() };
  for (const r of rows) {
    const n = afterLeaseExpiry(buckets.get(r.bucket), Number(r.attempts), runAt);
    out.deliveries.set(r.id, n);
    if (r.lease_attempt !== null) out.attempts.set(r.lease_attempt, n);
  }
  return out;
}

function transform(name: CopiedName, row: Row, inFlight: InFlight, runAt: number): Row {
  // counted_at is the clock reading the pacer was last moved at, on the source's clock (the
  // worker host's on SQLite): on the target's clock it could lie ahead, and a claim never counts
  // below it. 0 lets the target's first claim start from its own clock.
  if (name === 'bucket_pacer') return { ...row, counted_at: 0 };
  if (name === 'deliveries' && row.state === 'delivering') {
    const n = inFlight.deliveries.get(row.id as string);
    if (n === undefined) return row;
    const superseded = Number(row.supersede_requested) === 1;
    const common = { lease_until: null, lease_attempt: null, last_error: 'lease_expired', updated_at: runAt };
    return n.kind === 'retry'
      ? { ...row, ...common, state: superseded ? 'superseded' : 'retrying', settled_at: superseded ? runAt : null, next_attempt_at: n.atMs }
      : { ...row, ...common, state: superseded ? 'superseded' : 'exhausted', settled_at: runAt };
  }
  if (name === 'attempts' && row.outcome === null) {
    const n = inFlight.attempts.get(row.id as string);
    if (n === undefined) return row;
    return {
      ...row,
      outcome: 'lease_expired',
      error_class: 'lease_expired',
      reason: 'lease_expired',
      next_attempt_at: n.kind === 'retry' ? n.atMs : null,
      next_why: 'lease_expired',
    };
  }
  return row;
}

/** A value as the verify compares it: numbers as numbers, bytes by their sha256. */
function normal(v: unknown): unknown {
  if (Buffer.isBuffer(v) || v instanceof Uint8Array) return `sha256:${createHash('sha256').update(v).digest('hex')}`;
  if (typeof v === 'bigint') return Number(v);
  return v;
}

/** Column names whose normalised values differ (columns on one side only count too). */
function differing(a: Row, b: Row): string[] {
  const cols = new Set([...Object.keys(a), ...Object.keys(b)]);
  return [...cols].filter((c) => normal(a[c]) !== normal(b[c]));
}

async function sourceCount(end: DataEnd, name: string, plan: CopiedTable): Promise<number> {
  const db = end.db as AnyDb;
  if (plan.skip) return (await db.selectFrom(name).selectAll().execute()).filter((r: Row) => !plan.skip!(r)).length;
  const r = await db.selectFrom(name).select(sql<number>`count(*)`.as('n')).executeTakeFirstOrThrow();
  return Number(r.n);
}

/** Sets bucket_due for the named buckets to their earliest waiting delivery (the migration's backfill). */
async function recomputeDue(trx: AnyDb, names: string[]): Promise<void> {
  if (names.length === 0) return;
  await sql`insert into bucket_due (bucket, next_due_at)
    select b.name, (select min(d.next_attempt_at) from deliveries d where d.bucket = b.name and d.state in ('pending', 'retrying'))
    from buckets b where b.name in (${sql.join(names.map((n) => sql`${n}`))})
    on conflict (bucket) do update set next_due_at = excluded.next_due_at`.execute(trx);
}

export async function migrateData(o: MigrateDataOptions): Promise<MigrateDataResult> {
  const { from, to } = o;
  // 1. Schema versions.
  const sourceVersion = await from.appliedVersion();
  if (sourceVersion !== from.programVersion) {
    const hint =
      sourceVersion === null
        ? 'it has no hookbucket schema (is it a hookbucket database?)'
        : sourceVersion > from.programVersion
          ? `it was written by a newer hookbucket (schema ${sourceVersion}, this program's is ${from.programVersion}): run that version's migrate-data`
          : `its schema is ${sourceVersion}, this program's ${from.programVersion}: run any command of this version against it once (e.g. \`hookbucket stats --db <from>\`, which migrates it), then migrate-data again`;
    throw new AppError('schema_mismatch', `source ${from.location}: ${hint}`);
  }
  // 2. Quiescence (the source before anything is written anywhere).
  const held = async (end: DataEnd, side: string) => {
    const hs = await holdersOf(end);
    if (hs.length > 0 && !o.force) {
      const h = hs[0]!;
      throw new AppError(
        'database_in_use',
        `${side} ${end.location} is in use: ${h.kind} ${h.info} (${h.holder}) holds it until ${new Date(h.expiresAt).toISOString()}; stop it first, or pass --force to copy it as it is`,
      );
    }
  };
  await held(from, 'source');
  await to.migrate();
  await held(to, 'target');

  // 3. The run marker.
  const keys = markerKeys(o.sourceId);
  const markers = new Map(
    // meta is a handful of rows: read whole and filtered here (LIKE would treat `_` as a wildcard).
    (await to.db.selectFrom('meta').select(['key', 'value']).execute())
      .filter((r) => r.key.startsWith(keys.base))
      .map((r) => [r.key, Number(r.value)] as const),
  );
  let runAt = markers.get(keys.started);
  const resumed = runAt !== undefined;
  if (runAt === undefined) {
    if (!o.append) {
      const other = async (t: 'buckets' | 'requests') =>
        (await (to.db as AnyDb).selectFrom(t).select(sql`1`.as('x')).limit(1).execute()).length > 0;
      if ((await other('buckets')) || (await other('requests'))) {
        throw new AppError(
          'target_not_empty',
          `target ${to.location} holds buckets or requests already; pass --append to add the source's rows to them (ids must not collide)`,
        );
      }
    }
    runAt = await to.nowMs();
    await to.db
      .insertInto('meta')
      .values({ key: keys.started, value: runAt } as never)
      .execute();
  }

  const tables = copiedTables();
  const totals = new Map<string, number>();
  for (const { name, plan } of tables) totals.set(name, await sourceCount(from, name, plan));
  const total = [...totals.values()].reduce((a, b) => a + b, 0);
  const inFlight = await inFlightOf(from, runAt);
  const summaries = new Map<string, TableSummary>(
    tables.map(({ name }) => [name, { table: name, source: totals.get(name)!, copied: 0, found: 0, missing: 0, mismatched: 0, merged: 0 }]),
  );

  // 4. The copy.
  let batches = 0;
  let done = 0;
  for (const { name, plan } of tables) {
    const prefix = keys.cursorPrefix(name);
    const saved = [...markers.entries()].find(([k]) => k.startsWith(prefix));
    let cursorKey = saved?.[0];
    let copiedSoFar = saved?.[1] ?? 0;
    done += copiedSoFar;
    const cursor = saved ? (JSON.parse(saved[0].slice(prefix.length)) as unknown[]) : null;
    const s = summaries.get(name)!;
    for await (const page of pages(from, name, plan, cursor, o.batchRows, o.batchBytes)) {
      const rows = page.filter((r) => !plan.skip?.(r)).map((r) => transform(name, r, inFlight, runAt));
      const nextKey = prefix + keyOf(plan, page[page.length - 1]!);
      copiedSoFar += rows.length;
      await (to.db as AnyDb).transaction().execute(async (trx) => {
        let insert = rows;
        if (rows.length > 0) {
          const existing = (await trx
            .selectFrom(name)
            .selectAll()
            .where(
              keyIn(
                plan,
                rows.map((r) => plan.key.map((k) => r[k])),
              ),
            )
            .execute()) as Row[];
          if (existing.length > 0) {
            if (plan.onExisting === 'refuse') {
              const shown = existing.slice(0, 3).map((r) => plan.key.map((k) => String(r[k])).join('/'));
              throw new AppError(
                'id_collision',
                `${name} ${shown.join(', ')}${existing.length > 3 ? ` and ${existing.length - 3} more` : ''} exist${existing.length === 1 ? 's' : ''} in the target already: the source's rows cannot be added under the same ids`,
              );
            }
            // 'sum': rejection counters, the source's added to the target's.
            const byKey = new Map(existing.map((r) => [keyOf(plan, r), r]));
            insert = [];
            for (const r of rows) {
              const t = byKey.get(keyOf(plan, r));
              if (t === undefined) {
                insert.push(r);
                continue;
              }
              await trx
                .updateTable(name)
                .set({ count: Number(t.count) + Number(r.count), last_at: Math.max(Number(t.last_at), Number(r.last_at)) })
                .where(keyIn(plan, [plan.key.map((k) => r[k])]))
                .execute();
              s.merged++;
            }
          }
          await insertRows(trx, name, insert);
        }
        if (cursorKey !== undefined) await trx.deleteFrom('meta').where('key', '=', cursorKey).execute();
        await trx.insertInto('meta').values({ key: nextKey, value: copiedSoFar }).execute();
      });
      cursorKey = nextKey;
      s.copied += rows.length;
      done += rows.length;
      o.onProgress?.({ phase: 'copy', table: name, done, total });
      batches++;
      if (o.stopAfterBatches !== undefined && batches >= o.stopAfterBatches) {
        throw new AppError('internal', `stopped after ${batches} batches (--stop-after-batches); run again to resume`);
      }
    }
  }

  // 5. Derived rows and the bucket cache epoch.
  for await (const page of pages(from, 'buckets', tables.find((t) => t.name === 'buckets')!.plan, null, 500, Infinity)) {
    await (to.db as AnyDb).transaction().execute((trx) =>
      recomputeDue(
        trx,
        page.map((b) => b.name as string),
      ),
    );
  }
  await to.db
    .updateTable('meta')
    .set((eb) => ({ value: eb('value', '+', 1) }))
    .where('key', '=', 'bucket_epoch')
    .execute();

  await o.beforeVerify?.();

  // 6. The verify.
  const bodies = { checked: 0, mismatched: 0, examples: [] as string[] };
  let verified = 0;
  for (const { name, plan } of tables) {
    const s = summaries.get(name)!;
    for await (const page of pages(from, name, plan, null, o.batchRows, o.batchBytes)) {
      const rows = page.filter((r) => !plan.skip?.(r));
      if (rows.length === 0) continue;
      const found = (await (to.db as AnyDb)
        .selectFrom(name)
        .selectAll()
        .where(
          keyIn(
            plan,
            rows.map((r) => plan.key.map((k) => r[k])),
          ),
        )
        .execute()) as Row[];
      const byKey = new Map(found.map((r) => [keyOf(plan, r), r]));
      for (const r of rows) {
        const t = byKey.get(keyOf(plan, r));
        if (t === undefined) {
          s.missing++;
          continue;
        }
        s.found++;
        const expected = transform(name, r, inFlight, runAt);
        for (const c of plan.bytes) {
          if (expected[c] === null || expected[c] === undefined) continue;
          bodies.checked++;
          // A request's body also against the sha256 recorded when it was received.
          const recorded = plan.recordedSha256?.bytes === c ? `sha256:${String(r[plan.recordedSha256.column])}` : undefined;
          const bad = normal(t[c]) !== normal(expected[c]) || (recorded !== undefined && normal(t[c]) !== recorded);
          if (bad) {
            bodies.mismatched++;
            if (bodies.examples.length < 5) bodies.examples.push(`${name} ${keyOf(plan, r)} ${c}`);
          }
        }
        // Counters merged into the target's own (rejections under --append) are checked by presence.
        if (plan.onExisting === 'sum') continue;
        if (differing(expected, t).length > 0) s.mismatched++;
      }
      verified += rows.length;
      o.onProgress?.({ phase: 'verify', table: name, done: verified, total });
    }
  }
  const list = [...summaries.values()];
  const ok = bodies.mismatched === 0 && list.every((s) => s.missing === 0 && s.mismatched === 0 && s.found === s.source);
  if (ok) {
    await (to.db as AnyDb)
      .insertInto('meta')
      .values({ key: keys.done, value: await to.nowMs() })
      // biome-ignore lint/suspicious/noExplicitAny: copies tables of either dialect without their schema types
      .onConflict((oc: any) => oc.column('key').doUpdateSet({ value: (eb: any) => eb.ref('excluded.value') }))
      .execute();
  }
  return { runAt, resumed, tables: list, bodies, leasesRecovered: inFlight.deliveries.size, ok };
}

/** Kysely<Database> for callers that only need the type (tests). */
export type { Database };

import { join } from 'node:path';
import pg from 'pg';
import { startConsumer, type Consumer, type Script } from '../helpers/consumer.js';
import { createTestDatabase, pgTestServer, type TestDatabase } from '../helpers/pg-database.js';
import { tempDir } from '../helpers/temp-dir.js';
import {
  hookbucket,
  startServe,
  startWorkerProcess,
  type CliRun,
  type HookbucketProcess,
  type ServeHandle,
} from '../reliability/lib/serve-process.js';

/**
 * The scale-out harness: receivers (`serve --no-worker`) and drain workers (`worker`) as real
 * processes of the compiled binary on one throwaway PostgreSQL database, a real consumer on
 * loopback port 0 that records when each forwarded request arrived, and readers for the rows the
 * assertions compare with (attempts, deliveries). Every wait is bounded in time; close() ends every
 * process it started and drops the database.
 */

export const pgServer = pgTestServer();

export interface Arrival {
  requestId: string;
  /** The x-hookbucket-attempt header: the attempt number that reached the consumer. */
  attempt: number;
  at: number;
}

export interface AttemptRow {
  id: string;
  request_id: string;
  delivery_id: string;
  number: number;
  started_at: number;
  outcome: string | null;
  /** Set once the multi-worker schema records which worker made the attempt. */
  worker_id: string | null;
}

export interface Ack {
  seq: number;
  receiver: number;
  status: number;
  /** The request id the receiver answered with (2xx only). */
  id: string | undefined;
}

function header(raw: readonly string[], name: string): string | undefined {
  for (let i = 0; i + 1 < raw.length; i += 2) if (raw[i]!.toLowerCase() === name) return raw[i + 1];
  return undefined;
}

/** The forwarded requests the consumer saw, in arrival order. */
export function arrivals(consumer: Consumer): Arrival[] {
  return consumer.received.map((r) => ({
    requestId: header(r.rawHeaders, 'x-hookbucket-request-id') ?? '',
    attempt: Number(header(r.rawHeaders, 'x-hookbucket-attempt') ?? 0),
    at: r.at,
  }));
}

/** Arrivals beyond the first, per request id. */
export function duplicates(list: readonly Arrival[]): number {
  const seen = new Map<string, number>();
  for (const a of list) seen.set(a.requestId, (seen.get(a.requestId) ?? 0) + 1);
  let n = 0;
  for (const c of seen.values()) n += c - 1;
  return n;
}

/** The most `times` (ms) that fall in any half-open window [t, t + windowMs). */
export function maxInWindow(times: readonly number[], windowMs: number): { count: number; at: number } {
  const s = [...times].sort((a, b) => a - b);
  let best = { count: 0, at: NaN };
  let lo = 0;
  for (let hi = 0; hi < s.length; hi++) {
    while (s[hi]! - s[lo]! >= windowMs) lo++;
    if (hi - lo + 1 > best.count) best = { count: hi - lo + 1, at: s[lo]! };
  }
  return best;
}

/** Polls `probe` every `everyMs` until it gives a value other than undefined, or `ms` passes (then undefined). */
export async function waitFor<T>(probe: () => T | undefined | Promise<T | undefined>, ms: number, everyMs = 50): Promise<T | undefined> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await probe();
    if (v !== undefined) return v;
    if (Date.now() >= end) return undefined;
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** A worker's own id (workers.id, attempts.worker_id): the `worker` field of its "drain worker" log lines. */
export function workerIdOf(p: HookbucketProcess): string | undefined {
  for (const l of p.logs) if (typeof l.worker === 'string' && /^drain worker/.test(String(l.msg ?? ''))) return l.worker;
  return undefined;
}

/** Whether the worker said it is active (not standing by) at some point. */
export function wasActive(p: HookbucketProcess): boolean {
  return p.logs.some((l) => /^drain worker (active|took over)/.test(String(l.msg ?? '')));
}

export interface Cluster {
  readonly db: TestDatabase;
  readonly consumer: Consumer;
  readonly receivers: ServeHandle[];
  readonly workers: HookbucketProcess[];
  /** `hookbucket --db <url> …args`, throwing unless it exits 0. */
  cli(...args: string[]): Promise<CliRun>;
  startReceivers(n: number): Promise<void>;
  /** Starts `n` workers side by side (`--standby`, so that where only one may be active the others wait). */
  startWorkers(n: number, flags: string[]): Promise<void>;
  /** Sends `n` requests to the bucket (`seq` in the body), alternating receivers, `parallel` at a time. */
  send(bucket: string, n: number, parallel?: number): Promise<Ack[]>;
  scalar(sql: string, values?: unknown[]): Promise<number>;
  attempts(bucket: string): Promise<AttemptRow[]>;
  /** Deliveries of the bucket not yet settled (pending, retrying, delivering). */
  unsettled(bucket: string): Promise<number>;
  /** SIGTERM to every process still running (SIGKILL past 10 s), the consumer closed, the database dropped. */
  close(): Promise<void>;
}

export async function startCluster(consumerScript: Script = { status: 200, body: 'ok' }): Promise<Cluster> {
  const db = await createTestDatabase(pgServer!);
  const t = tempDir('hookbucket-scale-');
  const spoolFlags = ['--spool-dir', join(t.dir, 'spool')];
  const consumer = await startConsumer(consumerScript);
  const client = new pg.Client({ connectionString: db.url });
  await client.connect();
  const receivers: ServeHandle[] = [];
  const workers: HookbucketProcess[] = [];
  const cluster: Cluster = {
    db,
    consumer,
    receivers,
    workers,
    cli: (...args) => hookbucket(['--db', db.url, ...args], { timeoutMs: 30_000 }),
    async startReceivers(n) {
      const started = await Promise.all(Array.from({ length: n }, () => startServe({ db: db.url, flags: [...spoolFlags, '--no-worker'] })));
      receivers.push(...started);
    },
    async startWorkers(n, flags) {
      const started = await Promise.allSettled(
        Array.from({ length: n }, () => startWorkerProcess({ db: db.url, flags: [...flags, '--standby'] })),
      );
      for (const s of started) if (s.status === 'fulfilled') workers.push(s.value);
      const failed = started.find((s): s is PromiseRejectedResult => s.status === 'rejected');
      if (failed) throw failed.reason;
    },
    async send(bucket, n, parallel = 10) {
      const acks: Ack[] = [];
      let next = 0;
      const one = async (seq: number): Promise<Ack> => {
        const receiver = seq % receivers.length;
        try {
          const res = await fetch(`${receivers[receiver]!.url}/b/${bucket}`, {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ seq }),
            signal: AbortSignal.timeout(10_000),
          });
          await res.arrayBuffer();
          return { seq, receiver, status: res.status, id: res.ok ? (res.headers.get('x-hookbucket-request-id') ?? undefined) : undefined };
        } catch {
          return { seq, receiver, status: 0, id: undefined };
        }
      };
      await Promise.all(
        Array.from({ length: parallel }, async () => {
          while (next < n) acks.push(await one(next++));
        }),
      );
      return acks.sort((a, b) => a.seq - b.seq);
    },
    async scalar(text, values = []) {
      return Number((await client.query({ text, values, rowMode: 'array' })).rows[0]?.[0] ?? 0);
    },
    async attempts(bucket) {
      const { rows } = await client.query<AttemptRow>(
        `select id, request_id, delivery_id, number, started_at::float8 as started_at, outcome, worker_id
           from attempts where bucket = $1 order by started_at, id`,
        [bucket],
      );
      return rows.map((r) => ({ ...r, number: Number(r.number), started_at: Number(r.started_at) }));
    },
    unsettled: (bucket) =>
      cluster.scalar(`select count(*) from deliveries where bucket = $1 and state in ('pending', 'retrying', 'delivering')`, [bucket]),
    async close() {
      await Promise.all([...workers, ...receivers.map((r) => r.proc)].map((p) => p.term(10_000)));
      await client.end().catch(() => undefined);
      await consumer.close();
      await db.drop();
      t.remove();
    },
  };
  try {
    // The first command creates and migrates the database, before processes start side by side.
    await cluster.cli('bucket', 'list');
  } catch (e) {
    await cluster.close();
    throw e;
  }
  return cluster;
}

/**
 * The Store contract over a remote server's admin API (`hookbucket --api <url>`): the CLI's
 * commands run unchanged on it, their rendering code reading the Store's types, which this class
 * rebuilds from the API's JSON (src/remote/from-json.ts). What needs the database itself (ingest,
 * the drain, prune, import, migrations) is refused with `remote_unsupported`.
 */
import { AppError } from '../shared/errors.js';
import { formatRate } from '../policy/token-bucket.js';
import type { StatsReport } from '../stats/stats-report.js';
import type {
  Bucket,
  BucketCounts,
  BucketOverviewPage,
  BucketOverviewQuery,
  BucketPatch,
  DeliveryHistory,
  IterateOptions,
  RequestBatch,
  ListRequestsOptions,
  NewBucket,
  NewReplay,
  VerdictsApplied,
  ProcessRecord,
  PruneResult,
  PurgeResult,
  Replay,
  ReplayProgress,
  RequestFilter,
  RequestImporter,
  RequestPage,
  StatsQuery,
  StatsSample,
  StorageSize,
  Store,
  StoredRequest,
  StoredSetting,
  TailAttemptsPage,
  TailCursor,
  TailEvent,
  WorkerHolder,
} from '../store/store.js';
import type { ApiClient } from './api-client.js';
import { filterJson } from '../options/request-filter.js';
import type { VerifyStep, VerifySummary } from '../verify/recheck.js';
import { settingsFromJson } from '../settings/settings-json.js';
import {
  bucketBody,
  bucketFromJson,
  countsFromJson,
  filterQuery,
  historyFromJson,
  processFromJson,
  progressFromJson,
  replayFromJson,
  requestFromJson,
  requestPageFromJson,
  statsReportFromJson,
} from './from-json.js';

const b = encodeURIComponent;

export function remoteUnsupported(what: string): AppError {
  return new AppError('remote_unsupported', `${what} is not available through --api yet: run it on the server's host with --db`);
}

export class RemoteStore implements Store {
  /** Counts read with the last bucket list or show, so a command's second call asks nothing again. */
  private readonly counts = new Map<string, BucketCounts>();
  private unattributed: Record<string, number> | undefined;
  private readonly histories = new Map<string, DeliveryHistory[]>();
  private readonly progress = new Map<string, ReplayProgress>();
  private readonly seen = new Map<string, Bucket>();

  constructor(readonly api: ApiClient) {}

  private keep(j: unknown): Bucket {
    const bucket = bucketFromJson(j);
    const before = this.seen.get(bucket.name);
    // bucket resume shows how long the pause lasted: the JSON has the pause's start, not the total.
    if (before && before.pausedAt !== null && bucket.pausedAt === null)
      bucket.pausedTotalMs = before.pausedTotalMs + Math.max(0, bucket.updatedAt - before.pausedAt);
    if ((j as { requests?: unknown }).requests !== undefined) this.counts.set(bucket.name, countsFromJson(j));
    this.seen.set(bucket.name, bucket);
    return bucket;
  }

  async getBucket(name: string): Promise<Bucket | undefined> {
    const { status, body } = await this.api.json('GET', `/buckets/${b(name)}`, { accept: [404] });
    if (status === 404) {
      if (body?.code === 'not_found') return undefined;
      throw new AppError(body?.code ?? 'api_error', body?.error ?? 'not found');
    }
    return this.keep(body);
  }

  resolveBucket(name: string): Promise<Bucket | undefined> {
    return this.getBucket(name);
  }

  async listBuckets(): Promise<Bucket[]> {
    const { body } = await this.api.json('GET', '/buckets');
    this.unattributed = body.unattributed_rejections ?? {};
    return (body.buckets as unknown[]).map((j) => this.keep(j));
  }

  async createBucket(bucket: NewBucket): Promise<Bucket> {
    const { name, ...patch } = bucket;
    const { body } = await this.api.json('POST', '/buckets', { body: { name, ...bucketBody(patch) } });
    return this.keep(body);
  }

  async updateBucket(name: string, patch: BucketPatch): Promise<Bucket> {
    const { body } = await this.api.json('PATCH', `/buckets/${b(name)}`, { body: bucketBody(patch) });
    return this.keep(body);
  }

  async pauseBucket(name: string): Promise<Bucket> {
    return this.keep((await this.api.json('POST', `/buckets/${b(name)}/pause`)).body);
  }

  async resumeBucket(name: string): Promise<Bucket> {
    return this.keep((await this.api.json('POST', `/buckets/${b(name)}/resume`)).body);
  }

  async deleteBucket(name: string, options: { force: boolean }): Promise<{ requests: number }> {
    const { body } = await this.api.json('DELETE', `/buckets/${b(name)}`, { query: { force: options.force ? 'true' : undefined } });
    return { requests: body.requests };
  }

  purgeDeleting(): Promise<PurgeResult> {
    throw remoteUnsupported('purging deleted buckets');
  }

  async bucketCounts(name: string): Promise<BucketCounts> {
    if (!this.counts.has(name)) await this.getBucket(name);
    return this.counts.get(name) ?? { requests: 0, bytes: 0, states: {}, rejections: {} };
  }

  async allBucketCounts(): Promise<Map<string, BucketCounts>> {
    if (this.unattributed === undefined) await this.listBuckets();
    return new Map(this.counts);
  }

  async unattributedRejections(): Promise<Record<string, number>> {
    if (this.unattributed === undefined) await this.listBuckets();
    return this.unattributed ?? {};
  }

  async listRequests(bucket: string, filter: RequestFilter, page: ListRequestsOptions): Promise<RequestPage> {
    const { body } = await this.api.json('GET', `/buckets/${b(bucket)}/requests`, {
      query: { ...filterQuery(filter), limit: String(page.limit), cursor: page.before },
    });
    return requestPageFromJson(body, bucket);
  }

  /** The export route's NDJSON, line by line, as stored requests (oldest first; peer not included). */
  async *iterateRequests(bucket: string, filter: RequestFilter, options: IterateOptions = {}): AsyncIterable<StoredRequest> {
    const res = await this.api.send('GET', `/buckets/${b(bucket)}/export`, {
      query: { ...filterQuery(filter), format: 'ndjson', ...(options.limit !== undefined ? { limit: String(options.limit) } : {}) },
      headers: { accept: 'application/x-ndjson' },
    });
    let rest: Buffer = Buffer.alloc(0);
    let finished = false;
    try {
      for await (const chunk of res.body) {
        rest = rest.length === 0 ? (chunk as Buffer) : Buffer.concat([rest, chunk as Buffer]);
        let nl: number;
        while ((nl = rest.indexOf(10)) >= 0) {
          const line = rest.subarray(0, nl).toString('utf8');
          rest = rest.subarray(nl + 1);
          if (line.trim() !== '') yield requestFromJson(JSON.parse(line));
        }
      }
      finished = true;
    } finally {
      if (!finished) res.body.destroy();
    }
    // The server ends a failed export early, the last line cut short: never taken as complete.
    if (rest.length > 0) throw new AppError('api_error', `the export of ${bucket} ended mid-line: the server stopped it (see its log)`);
  }

  requestBatch(): Promise<RequestBatch> {
    // The CLI walks a remote bucket through the export route (iterateRequests); the batches are the server's own.
    throw remoteUnsupported('reading requests in batches');
  }

  /** Pages of the list route (ids and sizes only), for a progress bar's total. */
  async countRequests(bucket: string, filter: RequestFilter): Promise<number> {
    let n = 0;
    let before: string | undefined;
    for (;;) {
      const page = await this.listRequests(bucket, filter, { limit: 10_000, ...(before !== undefined ? { before } : {}) });
      n += page.requests.length;
      if (page.nextCursor === null) return n;
      before = page.nextCursor;
    }
  }

  async getRequest(id: string): Promise<StoredRequest | undefined> {
    const { status, body } = await this.api.json('GET', `/requests/${b(id)}`, { accept: [404] });
    if (status === 404) {
      if (body?.code === 'not_found') return undefined;
      throw new AppError(body?.code ?? 'api_error', body?.error ?? 'not found');
    }
    // The exact bytes from the body route (the JSON's text or base64 says the same; this is the download).
    const res = await this.api.send('GET', `/requests/${b(body.id)}/body`, { headers: { accept: 'application/octet-stream' } });
    const raw = Buffer.from(await res.body.arrayBuffer());
    this.histories.set(body.id, historyFromJson(body.deliveries ?? []));
    return requestFromJson(body, raw);
  }

  async requestHistory(id: string): Promise<DeliveryHistory[]> {
    if (!this.histories.has(id)) await this.getRequest(id);
    return this.histories.get(id) ?? [];
  }

  storageSize(): Promise<StorageSize> {
    throw remoteUnsupported('the database size');
  }

  bucketOverview(_query: BucketOverviewQuery): Promise<BucketOverviewPage> {
    throw remoteUnsupported('the bucket overview');
  }

  statsSamples(_query: StatsQuery): Promise<{ buckets: StatsSample[]; unattributedRejections: Record<string, number> }> {
    throw remoteUnsupported('raw stats samples');
  }

  /** GET /api/stats as the report `stats` and `health` render: the server's clock and figures. */
  async statsReport(bucket: string | undefined, windowMs: number): Promise<StatsReport> {
    const { body } = await this.api.json('GET', '/stats', { query: { bucket, window: `${windowMs}ms` } });
    return statsReportFromJson(body);
  }

  prune(): Promise<PruneResult> {
    throw remoteUnsupported('prune');
  }

  /**
   * POST /api/buckets/{name}/replays with the selectors as recorded (the filter with absolute
   * times, or all): the server selects again and records the same selection a local replay would.
   * The server makes the replay's id. Requests that arrived since the CLI counted and match an
   * open-ended filter are included, as a local replay started a moment later would include them.
   */
  async createReplay(input: NewReplay): Promise<Replay> {
    const { body } = await this.api.json('POST', `/buckets/${b(input.bucket)}/replays`, {
      body: {
        ...input.selection,
        ...(input.destination !== null ? { to: input.destination } : {}),
        ...(input.rate !== null ? { rate: formatRate(input.rate) } : {}),
        confirm: true,
      },
    });
    if (body.replay === null) throw new AppError('not_found', `nothing to replay: no request of ${input.bucket} matches any more`);
    return replayFromJson(body);
  }

  applyVerdicts(): Promise<VerdictsApplied> {
    // The CLI's requests verify goes through verifyStep: the secrets stay on the server, which checks.
    throw remoteUnsupported('storing verdicts checked here');
  }

  /**
   * POST /api/buckets/{name}/verify: the server re-checks one batch of the target (the same
   * src/verify/recheck.ts walk as a local run) and hands back the cursor of the next; the filter
   * goes with absolute times, so every call selects the same requests.
   */
  async verifyStep(bucket: string, filter: RequestFilter, cursor: string | null, release: boolean): Promise<VerifyStep> {
    const { body } = await this.api.json('POST', `/buckets/${b(bucket)}/verify`, {
      body: { ...filterJson(filter), release, ...(cursor !== null ? { cursor } : {}) },
    });
    const j = body as VerifySummary & { next_cursor: string | null };
    const summary = {
      checked: j.checked,
      verified: j.verified,
      invalid: j.invalid,
      missing: j.missing,
      expired: j.expired,
      released: j.released,
      duplicates: j.duplicates,
    };
    return { summary, next: j.next_cursor };
  }

  async getReplay(id: string): Promise<Replay | undefined> {
    const { status, body } = await this.api.json('GET', `/replays/${b(id)}`, { accept: [404] });
    if (status === 404) {
      if (body?.code === 'not_found') return undefined;
      throw new AppError(body?.code ?? 'api_error', body?.error ?? 'not found');
    }
    if (body.progress) this.progress.set(body.id, progressFromJson(body.progress));
    return replayFromJson(body);
  }

  async listReplays(options: { bucket?: string; limit: number }): Promise<Replay[]> {
    const { body } = await this.api.json('GET', '/replays', { query: { bucket: options.bucket, limit: String(options.limit) } });
    return (body.replays as Array<{ id: string; progress?: unknown }>).map((j) => {
      if (j.progress) this.progress.set(j.id, progressFromJson(j.progress));
      return replayFromJson(j);
    });
  }

  async replayProgress(id: string): Promise<ReplayProgress> {
    // Cached once (list and show read it with the replay); a second ask (replays wait) reads it afresh.
    const cached = this.progress.get(id);
    if (cached) {
      this.progress.delete(id);
      return cached;
    }
    await this.getReplay(id);
    const p = this.progress.get(id);
    if (!p) throw new AppError('not_found', `replay ${id} not found`);
    this.progress.delete(id);
    return p;
  }

  async activeWorker(): Promise<WorkerHolder | undefined> {
    // The API shows workers as processes (stats); a lease holder alone is not listed there.
    return undefined;
  }

  async processes(): Promise<ProcessRecord[]> {
    const { body } = await this.api.json('GET', '/stats', { query: { window: '1ms' } });
    return ((body.processes ?? []) as unknown[]).map(processFromJson);
  }

  tail(_bucket: string | readonly string[], _cursor: TailCursor): Promise<{ events: TailEvent[]; cursor: TailCursor }> {
    throw remoteUnsupported('requests tail');
  }

  tailRequestsPage(_bucket: string, _afterId: string, _limit: number): Promise<TailEvent[]> {
    throw remoteUnsupported('requests tail');
  }

  tailAttemptsPage(_bucket: string, _page: TailAttemptsPage, _limit: number): Promise<TailEvent[]> {
    throw remoteUnsupported('requests tail');
  }

  openImporter(): Promise<RequestImporter> {
    throw remoteUnsupported('requests import');
  }

  /** GET /settings: `{ "<key>": { value, default, updated_at } }`; the keys that are set come back as rows. */
  async getSettings(): Promise<StoredSetting[]> {
    const { body } = await this.api.json('GET', '/settings');
    return settingsFromJson(body);
  }

  async putSetting(key: string, value: string): Promise<StoredSetting> {
    const { body } = await this.api.json('PUT', `/settings/${b(key)}`, { body: { value } });
    return settingsFromJson({ [key]: body }).find((s) => s.key === key) ?? { key, value, updatedAt: Date.now() };
  }

  heartbeat(): Promise<void> {
    throw remoteUnsupported('registering a process');
  }

  markStopped(): Promise<void> {
    throw remoteUnsupported('registering a process');
  }

  async close(): Promise<void> {
    await this.api.close();
  }
}

export function isRemoteStore(s: unknown): s is RemoteStore {
  return s instanceof RemoteStore;
}

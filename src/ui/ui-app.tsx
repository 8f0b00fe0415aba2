/**
 * The web inspector (issue 14 point 3): server-rendered pages over the admin reads. Every stored
 * byte reaches the page as escaped text (JSX escapes; src/ui/text.ts escapes control bytes);
 * credentials are redacted (src/policy/redact.ts) unless `?reveal=1`. The few live parts (pause,
 * replay, new requests) are one same-origin script calling the JSON API at /api.
 */
import { Hono, type Context } from 'hono';
import { InvalidArgumentError } from 'commander';
import type { Config } from '../config/config.js';
import {
  filterFromOptions,
  parseHeaderMatch,
  parseMethods,
  parsePathGlob,
  parseSearch,
  parseStates,
  parseStatus,
  parseTimeBound,
  REQUEST_ID,
  type FilterOptions,
} from '../options/request-filter.js';
import type { Clock } from '../shared/clock.js';
import { AppError, bucketNotFound } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import type { BucketCounts, Store, StatsSample } from '../store/store.js';
import type { StoreReads } from '../api/store-reads.js';
import { APP_JS, STYLE_CSS } from './assets.js';
import { BucketPage, FILTER_FIELDS, type FilterValues } from './bucket-page.js';
import { ErrorPage } from './layout.js';
import { OverviewPage, type OverviewRow } from './overview.js';
import { RequestPage } from './request-page.js';
import type { SparkSeries } from './sparkline.js';

export interface UiConfig {
  /** Whether the admin token is on (the pages then offer Log out). */
  auth?: boolean;
  /** Buckets per overview page (default 50). */
  overviewPageSize?: number;
  /** Requests per bucket page (default 50). */
  requestsPageSize?: number;
}

export interface UiDeps {
  /** Not read by the pages today (reads go through `reads`); kept so writes can move here without a new seam. */
  store?: Store;
  reads: StoreReads;
  clock: Clock;
  logger: Logger;
  config?: UiConfig & Partial<Pick<Config, 'adminToken'>>;
}

const EMPTY_COUNTS: BucketCounts = { requests: 0, bytes: 0, states: {}, rejections: {} };
/** The sparkline: 12 bins of 5 minutes, the last hour. */
export const SPARK_BINS = 12;
export const SPARK_BIN_MS = 5 * 60_000; // 5 min

/** A finished window's figures are kept once it ended this long ago (a request committed just after its window still counts). */
const BIN_SETTLE_MS = 60_000; // 1 min

type BinFigures = Map<string, { arrivals: number; delivered: number }>;

/**
 * The last hour's arrivals and deliveries per bucket: SPARK_BINS 5-minute windows of statsSamples,
 * each over every bucket, so the number of reads does not grow with the number of buckets. A
 * window that ended (more than BIN_SETTLE_MS ago) does not change, so it is read once and kept;
 * an overview then costs one statsSamples (the current window, which also gives the oldest
 * waiting request) besides the bucket list and counts.
 */
class SparkCache {
  readonly #bins = new Map<number, BinFigures>();
  constructor(private readonly reads: StoreReads) {}

  async read(nowMs: number): Promise<{ series: Map<string, SparkSeries>; current: Map<string, StatsSample> }> {
    const end = Math.floor(nowMs / SPARK_BIN_MS) * SPARK_BIN_MS + SPARK_BIN_MS;
    const starts = Array.from({ length: SPARK_BINS }, (_, i) => end - (SPARK_BINS - i) * SPARK_BIN_MS);
    for (const k of this.#bins.keys()) if (k < starts[0]!) this.#bins.delete(k);
    const series = new Map<string, SparkSeries>();
    const current = new Map<string, StatsSample>();
    const zero = () => ({
      arrivals: new Array<number>(SPARK_BINS).fill(0),
      deliveries: new Array<number>(SPARK_BINS).fill(0),
      binMs: SPARK_BIN_MS,
    });
    for (let i = 0; i < starts.length; i++) {
      const since = starts[i]!;
      const until = since + SPARK_BIN_MS;
      let bin = this.#bins.get(since);
      if (!bin || i === starts.length - 1) {
        const { buckets } = await this.reads.statsSamples({ sinceMs: since, untilMs: until });
        bin = new Map(buckets.map((b) => [b.bucket, { arrivals: b.receivedInWindow, delivered: b.settled.delivered }]));
        if (until <= nowMs - BIN_SETTLE_MS) this.#bins.set(since, bin);
        if (i === starts.length - 1) for (const b of buckets) current.set(b.bucket, b);
      }
      for (const [name, f] of bin) {
        let one = series.get(name);
        if (!one) series.set(name, (one = zero()));
        one.arrivals[i] = f.arrivals;
        one.deliveries[i] = f.delivered;
      }
    }
    return { series, current };
  }
}

/** The form's GET parameters as the CLI's filter options; a bad value throws with the CLI's message. */
export function filterFromQuery(values: FilterValues, nowMs: number) {
  const o: FilterOptions = {};
  const field = <T,>(name: keyof FilterValues, parse: (v: string) => T, set: (v: T) => void) => {
    const raw = values[name]?.trim();
    if (!raw) return;
    try {
      set(parse(raw));
    } catch (e) {
      throw new AppError('usage', `${name}: ${(e as Error).message}`);
    }
  };
  field('state', parseStates, (v) => (o.state = v));
  field('since', parseTimeBound, (v) => (o.since = v));
  field('until', parseTimeBound, (v) => (o.until = v));
  field('method', parseMethods, (v) => (o.method = v));
  field('path', parsePathGlob, (v) => (o.path = v));
  field('header', parseHeaderMatch, (v) => (o.header = v));
  field('search', parseSearch, (v) => (o.search = v));
  field('status', parseStatus, (v) => (o.status = v));
  return filterFromOptions(o, nowMs);
}

export function createUiApp(deps: UiDeps): Hono {
  const { reads, clock, logger } = deps;
  const auth = deps.config?.auth === true;
  const overviewPageSize = deps.config?.overviewPageSize ?? 50;
  const requestsPageSize = deps.config?.requestsPageSize ?? 50;
  const app = new Hono();
  const spark = new SparkCache(reads);

  const errorPage = (c: Context, status: 400 | 404 | 503, title: string, message: string) =>
    c.html(<ErrorPage title={title} message={message} auth={auth} />, status);

  app.onError((err, c) => {
    if (err instanceof AppError) {
      if (err.code === 'not_found') return errorPage(c, 404, 'Not found', err.message);
      if (err.code === 'usage' || err.code === 'invalid_input') return errorPage(c, 400, 'Bad request', err.message);
      if (['query_timeout', 'admin_busy', 'store_busy', 'storage_error'].includes(err.code)) {
        return errorPage(c, 503, 'Busy', `${err.code}: ${err.message} Try again shortly.`);
      }
    }
    logger.error({ err }, 'inspector page failed');
    return c.html(<ErrorPage title="Internal error" message="The page could not be made; the server log says why." auth={auth} />, 500);
  });

  app.get('/ui/style.css', (c) => c.body(STYLE_CSS, 200, { 'content-type': 'text/css; charset=utf-8' }));
  app.get('/ui/app.js', (c) => c.body(APP_JS, 200, { 'content-type': 'text/javascript; charset=utf-8' }));

  app.get('/', async (c) => {
    const nowMs = clock.now();
    const after = c.req.query('after') ?? '';
    // Aggregates over every bucket: one listing, one counting query and the sparkline's windows
    // (SparkCache), however many buckets exist; the page is cut here.
    const [all, counts, activity] = await Promise.all([reads.listBuckets(), reads.allBucketCounts(), spark.read(nowMs)]);
    const sorted = all.sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
    const from = after === '' ? 0 : sorted.findIndex((b) => b.name > after);
    const pageBuckets = from < 0 ? [] : sorted.slice(from, from + overviewPageSize);
    const rows: OverviewRow[] = pageBuckets.map((b) => ({
      bucket: b,
      counts: counts.get(b.name) ?? EMPTY_COUNTS,
      oldestWaitingAt: activity.current.get(b.name)?.oldestWaitingAt ?? null,
      series: activity.series.get(b.name) ?? {
        arrivals: new Array<number>(SPARK_BINS).fill(0),
        deliveries: new Array<number>(SPARK_BINS).fill(0),
        binMs: SPARK_BIN_MS,
      },
    }));
    const last = pageBuckets[pageBuckets.length - 1];
    const next = last !== undefined && from + overviewPageSize < sorted.length ? last.name : null;
    return c.html(<OverviewPage rows={rows} total={sorted.length} nowMs={nowMs} next={next} first={after === ''} auth={auth} />);
  });

  app.get('/buckets/:name', async (c) => {
    const name = c.req.param('name');
    const bucket = await reads.getBucket(name);
    if (!bucket) throw bucketNotFound(name);
    const values: FilterValues = {};
    for (const f of FILTER_FIELDS) {
      const v = c.req.query(f);
      if (v !== undefined && v.trim() !== '') values[f] = v;
    }
    const before = c.req.query('before');
    const nowMs = clock.now();
    let filterError: string | null = null;
    let filter: FilterOptions | undefined;
    try {
      filter = filterFromQuery(values, nowMs);
    } catch (e) {
      if (!(e instanceof AppError) && !(e instanceof InvalidArgumentError)) throw e;
      filterError = e.message;
    }
    const [counts, page] = await Promise.all([
      reads.bucketCounts(name),
      filter === undefined
        ? Promise.resolve(null)
        : reads.listRequests(name, filter, { limit: requestsPageSize, ...(before && REQUEST_ID.test(before) ? { before } : {}) }),
    ]);
    return c.html(
      <BucketPage
        bucket={bucket}
        counts={counts}
        values={values}
        page={page}
        filterError={filterError}
        before={before ?? null}
        auth={auth}
      />,
      filterError === null ? 200 : 400,
    );
  });

  app.get('/requests/:id', async (c) => {
    const id = c.req.param('id').toLowerCase();
    if (!REQUEST_ID.test(id)) throw new AppError('not_found', 'no such request id');
    const request = await reads.getRequest(id);
    if (!request) throw new AppError('not_found', `request ${id} not found`);
    const [history, bucket] = await Promise.all([reads.requestHistory(id), reads.getBucket(request.bucket)]);
    const reveal = c.req.query('reveal') === '1';
    return c.html(
      <RequestPage
        request={request}
        history={history}
        destination={bucket?.destination ?? null}
        reveal={reveal}
        nowMs={clock.now()}
        auth={auth}
      />,
    );
  });

  return app;
}

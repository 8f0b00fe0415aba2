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
import type { Store } from '../store/store.js';
import type { StoreReads } from '../api/store-reads.js';
import { APP_JS, STYLE_CSS } from './assets.js';
import { BucketPage, FILTER_FIELDS, type FilterValues } from './bucket-page.js';
import { ErrorPage } from './layout.js';
import { OverviewPage, type OverviewRow } from './overview.js';
import { RequestPage } from './request-page.js';

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

/** The sparkline: 12 bins of 5 minutes, the last hour. */
export const SPARK_BINS = 12;
export const SPARK_BIN_MS = 5 * 60_000; // 5 min

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
    // One aggregate statement over this page's buckets (Store.bucketOverview): counts, the oldest
    // waiting request and the sparkline's windows, however many buckets the database holds.
    const end = Math.floor(nowMs / SPARK_BIN_MS) * SPARK_BIN_MS + SPARK_BIN_MS;
    const page = await reads.bucketOverview({
      ...(after === '' ? {} : { after }),
      limit: overviewPageSize,
      sinceMs: end - SPARK_BINS * SPARK_BIN_MS,
      binMs: SPARK_BIN_MS,
      bins: SPARK_BINS,
    });
    const rows: OverviewRow[] = page.buckets.map((r) => ({
      bucket: r.bucket,
      counts: r.counts,
      oldestWaitingAt: r.oldestWaitingAt,
      series: { arrivals: r.arrivals, deliveries: r.delivered, binMs: SPARK_BIN_MS },
    }));
    return c.html(<OverviewPage rows={rows} total={page.total} nowMs={nowMs} next={page.nextAfter} first={after === ''} auth={auth} />);
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

/**
 * The admin JSON API (issue 14 point 2): the CLI's read and operate commands over HTTP, with the
 * CLI's semantics, input formats and `--json` shapes, and an OpenAPI 3.1 document generated from
 * the same schemas (GET /openapi.json). Routes are relative (`/buckets`, …): the admin listener
 * mounts this app at `/api` behind its token check, Host check, caps and security headers.
 *
 * Every read goes through `reads` (in `serve` an off-thread reader with a time budget), every
 * write through `store`, so that no admin read runs on ingest's event loop: an export walks
 * `reads.requestBatch` one bounded batch per call, a replay's selection `reads.listRequests` pages,
 * and PATCH reads the bucket it merges onto (and the workers' leases) there too.
 */
import { createRoute, OpenAPIHono, z } from '@hono/zod-openapi';
import type { Context } from 'hono';
import { bodyLimit } from 'hono/body-limit';
import { streamSSE } from 'hono/streaming';
import { bucketJson } from '../json/bucket-json.js';
import { historyJson, requestJson, requestPageJson } from '../json/request-json.js';
import { bucketPatchFrom } from '../options/bucket-settings.js';
import { baseUrlArg, bucketNameArg, exportLimitArg, limitArg, urlArg } from '../options/parsers.js';
import { rateArg, positiveDurationMsArg } from '../options/drain-settings.js';
import {
  filterFromOptions,
  parseHeaderMatch,
  parseIds,
  parseMethods,
  parsePathGlob,
  parseSearch,
  parseStates,
  parseVerified,
  parseStatus,
  parseTimeBound,
  REQUEST_ID,
  type FilterOptions,
} from '../options/request-filter.js';
import { isSettled } from '../replay/replay.js';
import { replayJson } from '../replay/replay-json.js';
import { checkReplayScope, dryRunJson, selectReplay, startReplay } from '../replay/select-replay.js';
import type { Clock } from '../shared/clock.js';
import { AppError, bucketNotFound } from '../shared/errors.js';
import type { Logger } from '../shared/logger.js';
import { checkHealth, healthJson, parseFailOn } from '../stats/health-report.js';
import { DEFAULT_WINDOW_MS, loadStats, statsJson } from '../stats/stats-report.js';
import { DEFAULT_DRAIN } from '../store/bucket-defaults.js';
import type { BucketCounts, Store } from '../store/store.js';
import {
  curlCommand,
  curlNeedsBaseUrl,
  curlPreamble,
  EXPORT_FORMATS,
  harEntry,
  harHead,
  harTail,
  ndjsonLine,
  redactRequest,
  type ExportFormat,
} from '../transfer/export-format.js';
import { apiErrorHandler, errorBody, toApiError, validationMessage } from './api-errors.js';
import {
  BucketListSchema,
  BucketNameParam,
  BucketSchema,
  cliList,
  cliRepeat,
  cliValue,
  inMs,
  DeletedSchema,
  DryRunSchema,
  ErrorSchema,
  HealthFailureSchema,
  HealthSchema,
  IdParam,
  NothingToReplaySchema,
  ReplayListSchema,
  ReplaySchema,
  RequestPageSchema,
  StatsSchema,
  StoredRequestSchema,
  VerifyStepSchema,
} from './api-schemas.js';
import { BucketCreateBody, BucketPatchBody, settingsOpts } from './bucket-body.js';
import { takeStreamSlot } from '../admin/limits.js';
import { EventHub, type HubEvent } from './event-hub.js';
import { tailEventJson } from '../json/request-json.js';
import { parseSincePositionId, SINCE_BATCH, SinceWalk, sincePositionId, sinceStart, tailEventKey } from '../store/tail-since.js';
import { TAIL_LOOKBACK_MS } from '../store/request-rows.js';
import type { StoreReads } from './store-reads.js';
import { checkTimeoutFitsLease } from '../options/lease-check.js';
import { checkDestinationAllowed } from '../options/destination-check.js';
import { SETTING_KEYS, settingViews, setSetting } from '../settings/settings.js';
import { settingJson, settingsJson } from '../settings/settings-json.js';
import { DEFAULT_LEASE_MS } from '../policy/lease-fit.js';
import { checkIdsInBucket, planBucket, verifyStep } from '../verify/recheck.js';

export interface ApiConfig {
  /** Where the app is mounted, for the OpenAPI document's `servers` (default `/api`). */
  basePath?: string;
  /** Largest JSON body taken (default 1 MiB); larger ones get 413 body_too_large. */
  maxBodyBytes?: number;
  /** GET /events: the poller's tick (default 250 ms) and the heartbeat (default 15 s). */
  eventsPollMs?: number;
  heartbeatMs?: number;
  /** GET /events?since=: rows read per page and bucket (default SINCE_BATCH); tests set it small. */
  sinceBatch?: number;
  /** The ingest URL shown in exports' HAR and curl targets (default http://localhost:8787); read per request, since serve binds ingest after the admin listener. */
  ingestBaseUrl?: () => string;
  /** The configured --lease (HOOKBUCKET_LEASE): bucket timeouts must stay below it when no worker is alive (default 60 s). */
  defaultLeaseMs?: number;
}

export interface ApiDeps {
  /** Writes only (bucket changes, replays): ingest's store, on its event loop. */
  store: Store;
  /** Every read, export and replay selection included. */
  reads: StoreReads;
  /** Resolves relative times (since=30m) and stats windows: the server's clock. */
  clock: Clock;
  logger: Logger;
  config?: ApiConfig;
  /** The GET /events poller; default: one made for this app (one per process is the point). */
  events?: EventHub;
}

export const DEFAULT_API_BODY_BYTES = 1024 * 1024; // 1 MiB: a bucket's settings or a replay's selectors
const DEFAULT_LIST_LIMIT = 50;
const DEFAULT_REPLAYS_LIMIT = 20;
export const HEARTBEAT_MS = 15_000; // 15 s: below the usual 30-60 s idle timeouts of proxies
/** Events queued for one slow client before its stream is closed (it resumes with Last-Event-ID). */
const CLIENT_QUEUE_MAX = 10_000;

/** `"sign_secrets": ["generate"]`: the new secret in the answer, the one time it is given out. */
function withGenerated<T extends object>(j: T, secret: string | undefined): T | (T & { generated_sign_secret: string }) {
  return secret === undefined ? j : { ...j, generated_sign_secret: secret };
}

const EMPTY_COUNTS: BucketCounts = { requests: 0, bytes: 0, states: {}, rejections: {} };

const json = <T extends z.ZodType>(schema: T, description: string) => ({ content: { 'application/json': { schema } }, description });
const err = (description: string) => json(ErrorSchema, description);
const E400 = err('invalid_input (a parameter or field failed its schema), usage or invalid_option');
const E404 = err('not_found');
const E409 = err('bucket_exists, bucket_not_empty, bucket_deleting or confirmation_required');
const E503 = err('storage_error, store_busy, storage_full or query_timeout');

/** The `requests list` filter flags as query parameters (and replay body fields): same words, same parsers. */
const filterFields = {
  state: cliList(
    parseStates,
    'request states (comma list or repeated): pending, retrying, delivering, held, delivered, failed, exhausted, none, quarantined, duplicate, handshake',
    'exhausted,failed',
  ).optional(),
  since: cliValue(
    parseTimeBound,
    'received at or after: a duration before now on the server clock (30m, 6h, 7d) or an ISO time',
    '6h',
  ).optional(),
  until: cliValue(parseTimeBound, 'received before: a duration before now or an ISO time', '2026-12-01T10:00:00Z').optional(),
  method: cliList(parseMethods, 'HTTP methods (comma list or repeated)', 'POST').optional(),
  path: cliValue(parsePathGlob, 'glob over the raw sub-path: * within a segment, ** across, ? one character', '/orders/**').optional(),
  header: cliRepeat(
    parseHeaderMatch,
    'name=value, the name any case, the value exact (repeated: all must match)',
    'X-GitHub-Event=push',
  ).optional(),
  search: cliValue(parseSearch, 'bodies containing this text (UTF-8 bytes, case-sensitive; scans bodies)', 'cus_123').optional(),
  status: cliValue(parseStatus, "the latest generation's last response status: a code or a class", '5xx').optional(),
  id: cliList(parseIds, 'request ids (comma list or repeated)', '019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00').optional(),
  verified: cliList(
    parseVerified,
    'sender verdicts (comma list or repeated): verified, invalid, missing, expired, unverified',
    'invalid',
  ).optional(),
};

type FilterInput = { [K in keyof typeof filterFields]?: z.output<(typeof filterFields)[K]> };

function filterOptions(q: FilterInput): FilterOptions {
  const o: FilterOptions = {};
  if (q.state !== undefined) o.state = q.state;
  if (q.since !== undefined) o.since = q.since;
  if (q.until !== undefined) o.until = q.until;
  if (q.method !== undefined) o.method = q.method;
  if (q.path !== undefined) o.path = q.path;
  if (q.header !== undefined) o.header = q.header;
  if (q.search !== undefined) o.search = q.search;
  if (q.status !== undefined) o.status = q.status;
  if (q.id !== undefined) o.id = q.id;
  if (q.verified !== undefined) o.verified = q.verified;
  return o;
}

const booleanQuery = z
  .enum(['true', 'false', '1', '0'])
  .transform((v) => v === 'true' || v === '1')
  .optional();

/** The stored Content-Type goes into X-Hookbucket-Content-Type only when it is printable ASCII (stored values are latin1 byte strings). */
const PLAIN_HEADER_VALUE = /^[\t\x20-\x7e]*$/;

export function createApiApp(deps: ApiDeps): OpenAPIHono {
  const { store, reads, clock, logger } = deps;
  const config = deps.config ?? {};
  const defaultLeaseMs = config.defaultLeaseMs ?? DEFAULT_LEASE_MS;
  const app = new OpenAPIHono({
    defaultHook: (result, c) => {
      if (!result.success) {
        return c.json(
          errorBody({ status: 400, code: 'invalid_input', message: validationMessage(result.target, result.error.issues) }),
          400,
        );
      }
      return undefined;
    },
  });
  app.onError(apiErrorHandler(logger));
  app.use(
    '*',
    bodyLimit({
      maxSize: config.maxBodyBytes ?? DEFAULT_API_BODY_BYTES,
      onError: (c) =>
        c.json(
          errorBody({
            status: 413,
            code: 'body_too_large',
            message: `request body over ${config.maxBodyBytes ?? DEFAULT_API_BODY_BYTES} bytes`,
          }),
          413,
        ),
    }),
  );
  app.openAPIRegistry.registerComponent('securitySchemes', 'Bearer', {
    type: 'http',
    scheme: 'bearer',
    description: 'HOOKBUCKET_ADMIN_TOKEN',
  });

  const bucketOrThrow = async (name: string) => {
    const b = await reads.getBucket(name);
    if (!b) throw bucketNotFound(name);
    return b;
  };

  /* ---- A. buckets ---- */

  app.openapi(
    createRoute({
      method: 'get',
      path: '/buckets',
      summary: 'List buckets with their counts (bucket list --json); with limit, one page of them',
      tags: ['buckets'],
      request: {
        query: z.object({
          limit: cliValue(limitArg, 'buckets per page, 1 to 10000; omitted: every bucket, in one answer', '50').optional(),
          after: cliValue(bucketNameArg, "the previous page's next_cursor: buckets named after it", 'stripe').optional(),
        }),
      },
      responses: { 200: json(BucketListSchema, 'the buckets'), 400: E400, 503: E503 },
    }),
    async (c) => {
      const { limit, after } = c.req.valid('query');
      if (limit !== undefined) {
        // One aggregate statement over the page's buckets only (Store.bucketOverview), no activity windows.
        const page = await reads.bucketOverview({
          ...(after === undefined ? {} : { after }),
          limit,
          sinceMs: clock.now(),
          binMs: 1,
          bins: 0,
        });
        const other = await reads.unattributedRejections();
        return c.json(
          {
            buckets: page.buckets.map((r) => bucketJson(r.bucket, r.counts)),
            unattributed_rejections: other,
            next_cursor: page.nextAfter,
          },
          200,
        );
      }
      if (after !== undefined) throw new AppError('usage', 'after needs limit');
      const buckets = await reads.listBuckets();
      // One set of aggregate queries for every bucket, not one per bucket.
      const counts = await reads.allBucketCounts();
      const other = await reads.unattributedRejections();
      return c.json(
        { buckets: buckets.map((b) => bucketJson(b, counts.get(b.name) ?? EMPTY_COUNTS)), unattributed_rejections: other },
        200,
      );
    },
  );

  app.openapi(
    createRoute({
      method: 'post',
      path: '/buckets',
      summary: 'Create a bucket (bucket create --json)',
      tags: ['buckets'],
      request: { body: { content: { 'application/json': { schema: BucketCreateBody } }, required: true } },
      responses: { 201: json(BucketSchema, 'the new bucket'), 400: E400, 409: E409, 503: E503 },
    }),
    async (c) => {
      const { name, ...body } = c.req.valid('json');
      const opts = settingsOpts(body);
      if (opts.retainState !== undefined && opts.retain === undefined) throw new AppError('invalid_option', 'retain_states needs retain');
      const patch = bucketPatchFrom(opts, DEFAULT_DRAIN);
      await checkTimeoutFitsLease(reads, patch, { creating: true, defaultLeaseMs, nowMs: clock.now() });
      await checkDestinationAllowed(store, patch.destination);
      const b = await store.createBucket({ name, ...patch });
      return c.json(withGenerated(bucketJson(b), opts.generated), 201);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/buckets/{name}',
      summary: 'One bucket: settings, counts by state, refusals (bucket show --json)',
      tags: ['buckets'],
      request: { params: BucketNameParam },
      responses: { 200: json(BucketSchema, 'the bucket with its counts'), 400: E400, 404: E404, 503: E503 },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const b = await bucketOrThrow(name);
      return c.json(bucketJson(b, await reads.bucketCounts(name)), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'patch',
      path: '/buckets/{name}',
      summary: 'Change a bucket; fields not given stay; null removes a setting (bucket update --json)',
      tags: ['buckets'],
      request: { params: BucketNameParam, body: { content: { 'application/json': { schema: BucketPatchBody } }, required: true } },
      responses: { 200: json(BucketSchema, 'the bucket as changed'), 400: E400, 404: E404, 409: E409, 503: E503 },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const opts = settingsOpts(c.req.valid('json'));
      // Read, merge, write, as the CLI does: the schedule knobs merge onto the bucket's current ones.
      const current = await bucketOrThrow(name);
      const patch = bucketPatchFrom(opts, current.drain, current.provider);
      await checkTimeoutFitsLease(reads, patch, { creating: false, defaultLeaseMs, nowMs: clock.now() });
      await checkDestinationAllowed(store, patch.destination);
      const b = await store.updateBucket(name, patch);
      return c.json(withGenerated(bucketJson(b), opts.generated), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'delete',
      path: '/buckets/{name}',
      summary: 'Delete a bucket and its requests; refused while deliveries are undelivered unless force=true (bucket delete --json)',
      tags: ['buckets'],
      request: {
        params: BucketNameParam,
        query: z.object({ force: booleanQuery.openapi({ description: 'delete even with pending, retrying or in-flight deliveries' }) }),
      },
      responses: { 200: json(DeletedSchema, 'deleted'), 400: E400, 404: E404, 409: E409, 503: E503 },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const { force } = c.req.valid('query');
      const r = await store.deleteBucket(name, { force: force === true });
      return c.json({ name, deleted: true as const, requests: r.requests }, 200);
    },
  );

  for (const action of ['pause', 'resume'] as const) {
    app.openapi(
      createRoute({
        method: 'post',
        path: `/buckets/{name}/${action}`,
        summary:
          action === 'pause'
            ? "Hold the bucket's deliveries; ingest keeps storing; idempotent (bucket pause --json)"
            : 'Let the drain continue a paused bucket; idempotent (bucket resume --json)',
        tags: ['buckets'],
        request: { params: BucketNameParam },
        responses: { 200: json(BucketSchema, 'the bucket'), 400: E400, 404: E404, 503: E503 },
      }),
      async (c) => {
        const { name } = c.req.valid('param');
        const b = action === 'pause' ? await store.pauseBucket(name) : await store.resumeBucket(name);
        return c.json(bucketJson(b), 200);
      },
    );
  }

  /* ---- B. requests ---- */

  app.openapi(
    createRoute({
      method: 'get',
      path: '/buckets/{name}/requests',
      summary: "A page of a bucket's requests, newest first, with the requests list filters (requests list --json)",
      tags: ['requests'],
      request: {
        params: BucketNameParam,
        query: z.object({
          ...filterFields,
          limit: cliValue(limitArg, `rows per page, 1 to 10000 (default ${DEFAULT_LIST_LIMIT})`, '50').optional(),
          cursor: cliValue((v) => parseIds(v)[0]!, "the previous page's next_cursor", '019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00').optional(),
        }),
      },
      responses: { 200: json(RequestPageSchema, 'one page'), 400: E400, 404: E404, 503: E503 },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const { limit, cursor, ...q } = c.req.valid('query');
      const filter = filterFromOptions(filterOptions(q), clock.now());
      await bucketOrThrow(name);
      const page = await reads.listRequests(name, filter, {
        limit: limit ?? DEFAULT_LIST_LIMIT,
        ...(cursor !== undefined ? { before: cursor } : {}),
      });
      return c.json(requestPageJson(page), 200);
    },
  );

  const requestOrThrow = async (id: string) => {
    // An id that is not one cannot be stored: not found, without asking the database.
    const r = REQUEST_ID.test(id.toLowerCase()) ? await reads.getRequest(id.toLowerCase()) : undefined;
    if (!r) throw new AppError('not_found', `request ${id} not found`);
    return r;
  };

  app.openapi(
    createRoute({
      method: 'get',
      path: '/requests/{id}',
      summary: 'One stored request with every delivery generation and its attempts (requests show --json)',
      tags: ['requests'],
      request: { params: IdParam },
      responses: { 200: json(StoredRequestSchema, 'the request; body as UTF-8 text, or base64 when not UTF-8'), 404: E404, 503: E503 },
    }),
    async (c) => {
      const r = await requestOrThrow(c.req.valid('param').id);
      const history = await reads.requestHistory(r.id);
      return c.json({ ...requestJson(r), deliveries: historyJson(history) }, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/requests/{id}/body',
      summary: 'The exact stored body bytes, as a download (requests show --raw)',
      description:
        'Always application/octet-stream with Content-Disposition: attachment and Content-Security-Policy: sandbox: a stored text/html body served with its own type on the admin origin would be stored XSS. The Content-Type the sender gave is in X-Hookbucket-Content-Type.',
      tags: ['requests'],
      request: { params: IdParam },
      responses: {
        200: {
          description: 'the body bytes',
          headers: {
            'X-Hookbucket-Content-Type': {
              schema: { type: 'string' },
              description: 'the stored Content-Type header, when printable ASCII',
            },
            'X-Hookbucket-Sha256': { schema: { type: 'string' }, description: 'sha256 of the body, hex' },
          },
          content: { 'application/octet-stream': { schema: z.string().openapi({ format: 'binary' }) } },
        },
        404: E404,
        503: E503,
      },
    }),
    async (c) => {
      const r = await requestOrThrow(c.req.valid('param').id);
      const headers: Record<string, string> = {
        'Content-Type': 'application/octet-stream',
        'Content-Disposition': `attachment; filename="${r.id}.bin"`,
        'Content-Security-Policy': 'sandbox',
        'X-Content-Type-Options': 'nosniff',
        'Cache-Control': 'no-store',
        'X-Hookbucket-Sha256': r.sha256,
      };
      for (let i = 0; i < r.rawHeaders.length; i += 2) {
        if (r.rawHeaders[i]!.toLowerCase() === 'content-type') {
          const v = r.rawHeaders[i + 1]!;
          if (PLAIN_HEADER_VALUE.test(v)) headers['X-Hookbucket-Content-Type'] = v;
          break;
        }
      }
      // A copy into a fresh Uint8Array: the stored Buffer may be a view into a larger pool.
      return c.body(new Uint8Array(r.body), 200, headers);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/buckets/{name}/export',
      summary: "A bucket's requests, oldest first, streamed as ndjson, har or curl (requests export)",
      tags: ['requests'],
      request: {
        params: BucketNameParam,
        query: z.object({
          ...filterFields,
          format: z
            .enum(EXPORT_FORMATS as unknown as [ExportFormat, ...ExportFormat[]])
            .optional()
            .openapi({ description: 'ndjson (default), har or curl' }),
          base_url: cliValue(
            baseUrlArg,
            "where curl commands send the requests and har URLs point (the raw sub-path and query are appended); required with format=curl (har default: this server's ingest URL + /b/{name})",
            'http://localhost:3000/webhooks',
          ).optional(),
          redact: booleanQuery
            .optional()
            .openapi({ description: 'replace credential headers and secret query values with [redacted] (bodies stay as stored)' }),
          limit: cliValue(exportLimitArg, 'only the first n matching requests (oldest first)', '100').optional(),
        }),
      },
      responses: {
        200: {
          description: 'the export, streamed; a storage failure midway ends the stream early (the last line is then incomplete)',
          content: {
            'application/x-ndjson': { schema: z.string() },
            'application/har+json': { schema: z.string() },
            'text/x-shellscript': { schema: z.string() },
          },
        },
        400: E400,
        404: E404,
        503: E503,
      },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const { format: f, base_url, redact, limit, ...q } = c.req.valid('query');
      const format = f ?? 'ndjson';
      const filter = filterFromOptions(filterOptions(q), clock.now());
      const bucketUrl = `${config.ingestBaseUrl?.() ?? 'http://localhost:8787'}/b/${name}`;
      if (format === 'curl' && base_url === undefined) throw curlNeedsBaseUrl('base_url', bucketUrl);
      await bucketOrThrow(name);
      const baseUrl = base_url ?? bucketUrl;
      const encoder = new TextEncoder();
      // One bounded batch per reader call (each within the admin read budget). The first is read
      // before answering, so a read past its budget is a 503 query_timeout, not a cut stream.
      let batch = await reads.requestBatch(name, filter, null, limit !== undefined ? { limit } : {});
      let i = 0;
      let n = 0;
      let done = false;
      const stream = new ReadableStream<Uint8Array>({
        start(controller) {
          if (format === 'har') controller.enqueue(encoder.encode(harHead()));
          if (format === 'curl') controller.enqueue(encoder.encode(curlPreamble({ baseUrl, redacted: redact === true })));
        },
        async pull(controller) {
          if (done) return;
          try {
            while (i >= batch.requests.length && batch.next !== null) {
              batch = await reads.requestBatch(name, filter, batch.next);
              i = 0;
            }
            const next = batch.requests[i++];
            if (next === undefined) {
              done = true;
              if (format === 'har') controller.enqueue(encoder.encode(`${n > 0 ? '\n' : ''}${harTail()}`));
              controller.close();
              return;
            }
            const r = redact === true ? redactRequest(next) : next;
            const text =
              format === 'ndjson'
                ? ndjsonLine(r)
                : format === 'har'
                  ? `${n > 0 ? ',\n' : ''}${harEntry(r, baseUrl)}`
                  : curlCommand(r, baseUrl);
            n++;
            controller.enqueue(encoder.encode(text));
          } catch (e) {
            done = true;
            logger.warn({ err: e, bucket: name }, 'admin api export stopped');
            controller.error(e);
          }
        },
        cancel() {
          done = true;
        },
      });
      const type =
        format === 'ndjson' ? 'application/x-ndjson' : format === 'har' ? 'application/har+json' : 'text/x-shellscript; charset=utf-8';
      const ext = format === 'ndjson' ? 'ndjson' : format === 'har' ? 'har' : 'sh';
      return c.body(stream, 200, {
        'Content-Type': type,
        'Content-Disposition': `attachment; filename="${name}.${ext}"`,
        'X-Content-Type-Options': 'nosniff',
        'Cache-Control': 'no-store',
      });
    },
  );

  const VerifyBody = z
    .strictObject({
      ...filterFields,
      release: z
        .boolean()
        .optional()
        .openapi({ description: 'quarantined requests that now verify become accepted and go on to delivery (--release)' }),
      cursor: z
        .string()
        .max(200)
        .optional()
        .openapi({ description: "the previous call's next_cursor; omitted: start from the oldest matching request" }),
    })
    .openapi('VerifyRequest');

  app.openapi(
    createRoute({
      method: 'post',
      path: '/buckets/{name}/verify',
      summary:
        "Re-check one batch of the bucket's matching requests against its current verify secrets and store the verdicts (requests verify --json); loop on next_cursor",
      description:
        'No filter: every request of the bucket. An id given must be a request of this bucket (404 otherwise). Each call checks at most 500 requests (or 8 MiB of bodies), oldest first, among those stored when the first call ran.',
      tags: ['requests'],
      request: { params: BucketNameParam, body: { content: { 'application/json': { schema: VerifyBody } }, required: true } },
      responses: {
        200: json(VerifyStepSchema, 'the counts of this batch, and the cursor of the next'),
        400: E400,
        404: E404,
        503: E503,
      },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const { release, cursor, ...q } = c.req.valid('json');
      const filter = filterFromOptions(filterOptions(q), clock.now());
      // Checked again on every call: a bucket deleted or no longer verifying since the last one stops the walk.
      const target = await planBucket(reads, name, filter);
      if (cursor === undefined && filter.ids !== undefined) await checkIdsInBucket(reads, name, filter.ids);
      const step = await verifyStep(reads, store, target, cursor ?? null, { release: release === true, nowMs: clock.now() });
      return c.json({ ...step.summary, next_cursor: step.next }, 200);
    },
  );

  /* ---- C. replays ---- */

  const ReplayBody = z
    .strictObject({
      ...filterFields,
      all: z.boolean().optional().openapi({ description: 'every request of the bucket (the scope must be explicit)' }),
      to: cliValue(urlArg, 'deliver to this URL instead; supersedes nothing', 'https://staging.example.com/hooks').optional(),
      rate: cliValue(rateArg, "pace this replay's deliveries", '10/s').optional(),
      dry_run: z.boolean().optional().openapi({ description: 'count and sample only; change nothing' }),
      confirm: z.boolean().optional().openapi({ description: 'must be true unless dry_run (the --yes of the CLI)' }),
    })
    .openapi('ReplayCreate');

  app.openapi(
    createRoute({
      method: 'post',
      path: '/buckets/{name}/replays',
      summary: 'Replay selected requests as a new delivery generation (replay --json); needs confirm: true unless dry_run',
      tags: ['replays'],
      request: { params: BucketNameParam, body: { content: { 'application/json': { schema: ReplayBody } }, required: true } },
      responses: {
        200: json(z.union([DryRunSchema, NothingToReplaySchema]), 'a dry run, or nothing matched (nothing changed)'),
        201: json(ReplaySchema, 'the replay created'),
        400: E400,
        404: E404,
        409: E409,
        503: E503,
      },
    }),
    async (c) => {
      const { name } = c.req.valid('param');
      const { all, to, rate, dry_run, confirm, ...q } = c.req.valid('json');
      const filter = filterFromOptions(filterOptions(q), clock.now());
      checkReplayScope({ filter, all: all === true });
      if (dry_run !== true && confirm !== true) {
        throw new AppError('confirmation_required', 'a replay sends requests again: add "confirm": true, or "dry_run": true to look first');
      }
      await checkDestinationAllowed(store, to);
      const selection = await selectReplay(reads, { bucket: name, filter, all: all === true, to: to ?? null });
      if (dry_run === true) return c.json(dryRunJson(selection), 200);
      if (selection.ids.length === 0) return c.json({ replay: null, count: 0 as const }, 200);
      const replay = await startReplay(store, selection, { rate: rate ?? null, nowMs: clock.now() });
      return c.json(replayJson(replay), 201);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/replays',
      summary: 'Replays, newest first, with their progress (replays list --json)',
      tags: ['replays'],
      request: {
        query: z.object({
          bucket: cliValue(bucketNameArg, 'only this bucket', 'stripe').optional(),
          limit: cliValue(limitArg, `how many, 1 to 10000 (default ${DEFAULT_REPLAYS_LIMIT})`, '20').optional(),
        }),
      },
      responses: { 200: json(ReplayListSchema, 'the replays'), 400: E400, 404: E404, 503: E503 },
    }),
    async (c) => {
      const { bucket, limit } = c.req.valid('query');
      const list = await reads.listReplays({ limit: limit ?? DEFAULT_REPLAYS_LIMIT, ...(bucket !== undefined ? { bucket } : {}) });
      const out = [];
      for (const r of list) out.push(replayJson(r, await reads.replayProgress(r.id)));
      return c.json({ replays: out }, 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/replays/{id}',
      summary: 'One replay with its progress (replays wait --json, without waiting)',
      tags: ['replays'],
      request: { params: IdParam },
      responses: { 200: json(ReplaySchema, 'the replay'), 404: E404, 503: E503 },
    }),
    async (c) => {
      const { id } = c.req.valid('param');
      const r = await reads.getReplay(id);
      if (!r) throw new AppError('not_found', `replay ${id} not found`);
      const p = await reads.replayProgress(r.id);
      return c.json({ ...replayJson(r, p), settled: isSettled(p) }, 200);
    },
  );

  /* ---- D. stats and health ---- */

  const statsQuery = {
    bucket: cliValue(bucketNameArg, 'one bucket (default: every bucket together, and each one)', 'stripe').optional(),
    window: cliValue(inMs(positiveDurationMsArg), 'the window for rates and latency (default 1h)', '15m').optional(),
  };

  app.openapi(
    createRoute({
      method: 'get',
      path: '/stats',
      summary: 'Delivery figures now and over a window (stats --json; field names: README "stats")',
      tags: ['stats'],
      request: { query: z.object(statsQuery) },
      responses: { 200: json(StatsSchema, 'the figures'), 400: E400, 404: E404, 503: E503 },
    }),
    async (c) => {
      const { bucket, window } = c.req.valid('query');
      if (bucket !== undefined) await bucketOrThrow(bucket);
      const report = await loadStats(reads, bucket, window ?? DEFAULT_WINDOW_MS, clock, defaultLeaseMs);
      return c.json(statsJson(report), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/health',
      summary: 'Healthy (200) unless fail_on holds or storage fails (503) (health --json)',
      tags: ['stats'],
      request: {
        query: z.object({
          ...statsQuery,
          fail_on: z.string().max(2000).optional().openapi({
            description:
              'unhealthy when this holds or a bucket is stuck (stuck_buckets > 0), e.g. "success_rate < 0.99 || exhausted > 0"; omitted: healthy while storage answers (stuck buckets are listed in stuck)',
            example: 'exhausted > 0',
          }),
        }),
      },
      responses: {
        200: json(HealthSchema, 'healthy'),
        400: E400,
        404: E404,
        503: json(
          z.union([HealthSchema, HealthFailureSchema]),
          'the expression holds (tripped says which comparisons), or storage failed (error and code say why)',
        ),
      },
    }),
    async (c) => {
      const { bucket, window, fail_on } = c.req.valid('query');
      const expr = fail_on === undefined ? undefined : parseFailOn(fail_on, 'fail_on');
      try {
        if (bucket !== undefined) await bucketOrThrow(bucket);
        const report = await loadStats(reads, bucket, window ?? DEFAULT_WINDOW_MS, clock, defaultLeaseMs);
        if (expr === undefined || fail_on === undefined) {
          // No expression: healthy while storage answers (the stats read above succeeded), a
          // liveness check: a stuck bucket is listed (restarting would not unstick it), not a 503.
          const { bucket: b, window_ms, since, until, stuck } = statsJson(report);
          return c.json({ healthy: true, expression: null, bucket: b, window_ms, since, until, tripped: [], stuck, values: {} }, 200);
        }
        const result = checkHealth(report, expr);
        const body = healthJson(report, expr, fail_on, result);
        return result.holds ? c.json(body, 503) : c.json(body, 200);
      } catch (e) {
        const apiErr = toApiError(e);
        if (apiErr.status !== 503) throw e;
        return c.json({ healthy: false as const, ...errorBody(apiErr) }, 503);
      }
    },
  );

  /* ---- F. live events ---- */

  const hub =
    deps.events ?? new EventHub({ reads, clock, logger, ...(config.eventsPollMs !== undefined ? { pollMs: config.eventsPollMs } : {}) });
  const heartbeatMs = config.heartbeatMs ?? HEARTBEAT_MS;

  /** The buckets a stream follows (null: every bucket not being deleted), for a walk since a time. */
  async function followedNames(buckets: ReadonlySet<string> | null): Promise<string[]> {
    return buckets ? [...buckets] : (await reads.listBuckets()).filter((b) => b.deletingAt === null).map((b) => b.name);
  }

  app.openapi(
    createRoute({
      method: 'get',
      path: '/events',
      summary: 'Server-Sent Events: new requests and finished attempts, as requests tail --json (with bucket added)',
      description:
        'event: request | attempt | reset; id: resumable with Last-Event-ID (or ?last_event_id). A live event\'s id resumes while the server still buffers it, else a reset event says why and the stream goes on from now; a since backlog event\'s id (s.…) resumes the backlog exactly after it, read from the database. A ": heartbeat" comment every 15 s.',
      tags: ['requests'],
      request: {
        query: z.object({
          bucket: cliList(
            (v) => v.split(',').map((b) => bucketNameArg(b.trim())),
            'buckets to follow (comma list or repeated); omitted: every bucket',
            'stripe,github',
          ).optional(),
          last_event_id: z
            .string()
            .max(100)
            .optional()
            .openapi({ description: 'as the Last-Event-ID header, for clients that cannot send headers' }),
          since: cliValue(
            parseTimeBound,
            'first send what happened since then (requests received, attempts finished), oldest first, read and sent a page at a time, each with an id that resumes after it; then follow. Ignored when resuming with Last-Event-ID',
            '10m',
          ).optional(),
        }),
      },
      responses: {
        200: { description: 'the event stream', content: { 'text/event-stream': { schema: z.string() } } },
        400: E400,
        404: E404,
        503: E503,
      },
    }),
    async (c) => {
      const { bucket, last_event_id, since } = c.req.valid('query');
      const sinceMs = since === undefined ? undefined : since.kind === 'ago' ? clock.now() - since.ms : since.ms;
      const buckets = bucket === undefined ? null : new Set(bucket);
      if (buckets) for (const b of buckets) await bucketOrThrow(b);
      const lastEventId = c.req.header('last-event-id') ?? last_event_id;
      // Long-lived: it holds a stream slot of the admin listener's own cap, not a request slot.
      const slot = takeStreamSlot(c);
      if (!slot) throw new AppError('admin_busy', 'too many event streams are open; try again later');
      return streamSSE(c, async (stream) => {
        const queue: HubEvent[] = [];
        let closed = false;
        let wake: (() => void) | undefined;
        const sub = {
          buckets,
          send: (e: HubEvent) => {
            if (queue.length >= CLIENT_QUEUE_MAX) closed = true;
            else queue.push(e);
            wake?.();
          },
          end: () => {
            closed = true;
            wake?.();
          },
        };
        const stop = () => {
          closed = true;
          wake?.();
        };
        stream.onAbort(stop);
        // The server is stopping: end the stream.
        if (slot.signal.aborted) stop();
        else slot.signal.addEventListener('abort', stop, { once: true });
        let unsubscribe: (() => void) | undefined;
        let heartbeat: NodeJS.Timeout | undefined;
        try {
          // A backlog event's id resumes the backlog (from the database); any other goes to the hub.
          const resumeAt = lastEventId === undefined ? undefined : parseSincePositionId(lastEventId);
          const from = resumeAt ?? (sinceMs !== undefined && !lastEventId ? sinceStart(sinceMs) : undefined);
          const subscribedAt = clock.now();
          const subscribed = await hub.subscribe(sub, resumeAt ? undefined : lastEventId);
          unsubscribe = subscribed.unsubscribe;
          heartbeat = setInterval(() => void stream.write(': heartbeat\n\n').catch(() => undefined), heartbeatMs);
          if (subscribed.resumed === 'reset') {
            await stream.writeSSE({ event: 'reset', data: JSON.stringify({ reason: subscribed.reason }) });
          }
          await stream.write(': connected\n\n');
          // Subscribed first, read after: every event is either in the store when the backlog is
          // read or sent by the hub afterwards. Those in both are sent once: the hub sends what
          // it reads after the subscription, which happened (or committed late) at most the tail
          // look-back before it, so the backlog keeps the keys of those events only.
          let given: Set<string> | undefined;
          if (from !== undefined) {
            given = new Set();
            try {
              const walk = new SinceWalk(reads, await followedNames(buckets), from, { batch: config.sinceBatch ?? SINCE_BATCH });
              for (let x = await walk.next(); x !== undefined && !closed; x = await walk.next()) {
                const data = { ...tailEventJson(x.event), bucket: x.bucket };
                if (x.event.at >= subscribedAt - TAIL_LOOKBACK_MS) given.add(tailEventKey(data));
                await stream.writeSSE({ id: sincePositionId(x.position), event: data.event, data: JSON.stringify(data) });
              }
            } catch (e) {
              logger.warn({ err: e }, 'events: reading the events since a time failed');
              const since = new Date(resumeAt ? resumeAt.attempt.finishedAt : sinceMs!).toISOString();
              await stream.writeSSE({
                event: 'reset',
                data: JSON.stringify({
                  reason: `the events since ${since} could not all be read from the database: the stream goes on from now`,
                }),
              });
            }
          }
          while (!closed) {
            while (queue.length > 0 && !closed) {
              const e = queue.shift()!;
              if (given?.has(tailEventKey(e.data as Parameters<typeof tailEventKey>[0]))) continue;
              await stream.writeSSE({ id: e.id, event: e.event, data: JSON.stringify(e.data) });
            }
            if (closed) break;
            await new Promise<void>((resolve) => (wake = resolve));
            wake = undefined;
          }
        } finally {
          clearInterval(heartbeat);
          unsubscribe?.();
          slot.signal.removeEventListener('abort', stop);
          slot.release();
        }
      });
    },
  );

  /* ---- D2. settings (hookbucket settings) ---- */

  const SettingSchema = z
    .object({
      value: z.string().openapi({ example: 'public', description: 'the setting in its normal form' }),
      default: z.boolean().openapi({ description: 'true: not set, the default applies' }),
      updated_at: z.string().nullable().openapi({ description: 'when it was last set (ISO 8601); null when never' }),
    })
    .openapi('Setting');
  const SettingsSchema = z.object({ destinations: SettingSchema }).openapi('Settings');
  const SettingKeyParam = z.object({
    key: z.enum(SETTING_KEYS).openapi({ param: { name: 'key', in: 'path' }, example: 'destinations', description: 'the setting' }),
  });

  app.openapi(
    createRoute({
      method: 'get',
      path: '/settings',
      summary: 'Every operator setting, set or default (settings show --json)',
      tags: ['settings'],
      responses: { 200: json(SettingsSchema, 'the settings'), 503: E503 },
    }),
    async (c) => c.json(settingsJson(await store.getSettings()) as z.output<typeof SettingsSchema>, 200),
  );

  app.openapi(
    createRoute({
      method: 'get',
      path: '/settings/{key}',
      summary: 'One operator setting (settings show <key> --json)',
      tags: ['settings'],
      request: { params: SettingKeyParam },
      responses: { 200: json(SettingSchema, 'the setting'), 400: E400, 503: E503 },
    }),
    async (c) => {
      const { key } = c.req.valid('param');
      const view = settingViews(await store.getSettings()).find((v) => v.key === key)!;
      return c.json(settingJson(view), 200);
    },
  );

  app.openapi(
    createRoute({
      method: 'put',
      path: '/settings/{key}',
      summary: 'Set an operator setting (settings set <key> <value> --json); every serve and worker applies it within 5 s',
      tags: ['settings'],
      request: {
        params: SettingKeyParam,
        body: {
          content: {
            'application/json': {
              schema: z
                .object({
                  value: z.string().openapi({
                    example: 'allow:public,10.0.0.0/8,consumer.internal',
                    description: 'destinations: any, public, or allow:<CIDR|address|host name|*.domain|public>,…',
                  }),
                })
                .openapi('SettingPut'),
            },
          },
          required: true,
        },
      },
      responses: { 200: json(SettingSchema, 'the setting as stored'), 400: E400, 503: E503 },
    }),
    async (c) => {
      const { key } = c.req.valid('param');
      const row = await setSetting(store, key, c.req.valid('json').value);
      return c.json(settingJson({ key, value: row.value, isDefault: false, updatedAt: row.updatedAt }), 200);
    },
  );

  /* ---- E. the OpenAPI document ---- */

  // Mounted with app.route('/api', …), a sub-app's notFound is not consulted: this route answers
  // the unknown paths under the mount point in the API's error shape (registered last, so it only
  // catches what no route above matched; it is not in the OpenAPI document).
  const unknownRoute = (c: Context) =>
    c.json(errorBody({ status: 404, code: 'not_found', message: `no route ${c.req.method} ${c.req.path}` }), 404);
  app.notFound(unknownRoute);

  app.doc31('/openapi.json', () => ({
    openapi: '3.1.0',
    info: { title: 'hookbucket admin API', version: '1', description: "The CLI's read and operate commands over HTTP (docs/api.md)." },
    servers: [{ url: config.basePath ?? '/api' }],
    security: [{ Bearer: [] }],
  }));

  app.all('*', unknownRoute);
  return app;
}

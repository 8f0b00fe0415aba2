import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createApiApp } from '../../src/api/api-app.js';
import type { StoreReads } from '../../src/api/store-reads.js';
import { ManualClock } from '../../src/shared/clock.js';
import { silentLogger } from '../../src/shared/logger.js';
import type { Store } from '../../src/store/store.js';

/**
 * The OpenAPI document is generated from the routes' own schemas: every route the app registers
 * is in it (and nothing else), with its parameters. Building the document reads no store, so
 * the store here is never called.
 */
const unused = new Proxy({}, { get: () => assert.fail('the OpenAPI document must not read the store') });

function appWith(basePath?: string) {
  return createApiApp({
    store: unused as Store,
    reads: unused as StoreReads,
    clock: new ManualClock(),
    logger: silentLogger,
    ...(basePath ? { config: { basePath } } : {}),
  });
}

type Doc = {
  openapi: string;
  servers: Array<{ url: string }>;
  paths: Record<
    string,
    Record<string, { parameters?: Array<{ name: string; in: string }>; requestBody?: unknown; responses: Record<string, unknown> }>
  >;
  components: { schemas: Record<string, unknown> };
};

describe('admin api: OpenAPI document', () => {
  it('is OpenAPI 3.1 at /openapi.json and lists every registered route, and only those', async () => {
    const app = appWith();
    const res = await app.request('/openapi.json');
    assert.equal(res.status, 200);
    const doc = (await res.json()) as Doc;
    assert.equal(doc.openapi, '3.1.0');
    assert.deepEqual(doc.servers, [{ url: '/api' }]);

    // Hono's route table: middleware (ALL) and the document's own route left out; `:name` is `{name}` in OpenAPI.
    const registered = new Set(
      app.routes
        .filter((r) => r.method !== 'ALL' && r.path !== '/openapi.json')
        .map((r) => `${r.method.toLowerCase()} ${r.path.replace(/:([A-Za-z_]+)/g, '{$1}')}`),
    );
    const documented = new Set(Object.entries(doc.paths).flatMap(([path, ops]) => Object.keys(ops).map((m) => `${m} ${path}`)));
    assert.deepEqual([...registered].sort(), [...documented].sort());
    // The routes of issue 14 point 2, so that one dropped from both would still fail here.
    for (const route of [
      'get /buckets',
      'post /buckets',
      'get /buckets/{name}',
      'patch /buckets/{name}',
      'delete /buckets/{name}',
      'post /buckets/{name}/pause',
      'post /buckets/{name}/resume',
      'get /buckets/{name}/requests',
      'get /requests/{id}',
      'get /requests/{id}/body',
      'get /buckets/{name}/export',
      'post /buckets/{name}/replays',
      'post /buckets/{name}/verify',
      'get /replays',
      'get /replays/{id}',
      'get /stats',
      'get /health',
    ]) {
      assert.ok(documented.has(route), route);
    }
  });

  it('documents the requests list filters as query parameters and the error shape on every route', async () => {
    const doc = (await (await appWith('/admin/api').request('/openapi.json')).json()) as Doc;
    assert.deepEqual(doc.servers, [{ url: '/admin/api' }]);
    const list = doc.paths['/buckets/{name}/requests']!.get!;
    assert.deepEqual(
      list.parameters!.filter((p) => p.in === 'query').map((p) => p.name),
      ['state', 'since', 'until', 'method', 'path', 'header', 'search', 'status', 'id', 'verified', 'limit', 'cursor'],
    );
    for (const [path, ops] of Object.entries(doc.paths)) {
      for (const [method, op] of Object.entries(ops)) {
        const errors = Object.keys(op.responses).filter((s) => Number(s) >= 400);
        assert.ok(errors.length > 0, `${method} ${path} documents its errors`);
      }
    }
    for (const name of [
      'Bucket',
      'BucketSettings',
      'BucketCreate',
      'RequestPage',
      'StoredRequest',
      'Replay',
      'ReplayCreate',
      'Stats',
      'Health',
      'Error',
    ]) {
      assert.ok(doc.components.schemas[name], name);
    }
  });
});

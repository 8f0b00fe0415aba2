import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { Hono } from 'hono';
import { createApiApp } from '../../src/api/api-app.js';
import type { StoreReads } from '../../src/api/store-reads.js';
import { AppError } from '../../src/shared/errors.js';
import { silentLogger } from '../../src/shared/logger.js';
import { DIALECTS, SKIPPED_DIALECTS } from '../store/contract/dialects.js';
import { captured, claim, DEST, result, submitAll, T0, useStoreSet, type Ctx } from '../store/contract/harness.js';

/**
 * The admin JSON API through app.request() on a real store (SQLite always, PostgreSQL when
 * HOOKBUCKET_TEST_PG is set): every route, its status codes and error codes, PATCH's null, cursor
 * pagination, byte-exact bodies, the replay confirmation and health's 200/503.
 */

type Json = Record<string, any>;

function apiOf(ctx: Ctx, reads?: StoreReads) {
  const app = createApiApp({ store: ctx.set.store, reads: reads ?? ctx.set.store, clock: ctx.clock, logger: silentLogger });
  const call = async (method: string, path: string, body?: unknown, headers: Record<string, string> = {}) => {
    const init: RequestInit = { method, headers: { ...(body === undefined ? {} : { 'Content-Type': 'application/json' }), ...headers } };
    if (body !== undefined) init.body = typeof body === 'string' ? body : JSON.stringify(body);
    const res = await app.request(path, init);
    const type = res.headers.get('content-type') ?? '';
    const json = type.startsWith('application/json') ? ((await res.json()) as Json) : undefined;
    return { res, status: res.status, json: json ?? {} };
  };
  return { app, call };
}

/** An error answer: the status, the documented shape, the code. */
function assertError(r: { status: number; json: Json }, status: number, code: string, message?: RegExp): void {
  assert.equal(r.status, status, JSON.stringify(r.json));
  assert.deepEqual(Object.keys(r.json).sort(), ['code', 'error']);
  assert.equal(r.json.code, code);
  if (message) assert.match(r.json.error, message);
}

for (const dialect of DIALECTS) {
  describe(`admin api: ${dialect.name}`, () => {
    before(async () => dialect.setUp?.());
    after(async () => dialect.tearDown?.());
    const ctx = useStoreSet(dialect);

    describe('buckets', () => {
      it('creates, lists, shows, and refuses duplicates and bad input with the CLI codes', async () => {
        const { call } = apiOf(ctx);
        const created = await call('POST', '/buckets', {
          name: 'stripe',
          destination: DEST,
          timeout: '30s',
          max_body: '1MiB',
          rate: '200/s',
          burst: 5,
          retain: '30d',
        });
        assert.equal(created.status, 201, JSON.stringify(created.json));
        assert.equal(created.json.name, 'stripe');
        assert.equal(created.json.timeout_ms, 30_000);
        assert.equal(created.json.max_body, 1024 * 1024);
        assert.equal(created.json.rate, '200/s');
        assert.equal(created.json.burst, 5);
        assert.equal(created.json.retain_ms, 30 * 86_400_000);
        assert.equal(created.json.requests, undefined, 'create answers without counts, as bucket create --json');

        assertError(await call('POST', '/buckets', { name: 'stripe' }), 409, 'bucket_exists');
        assertError(await call('POST', '/buckets', { name: 'Bad Name' }), 400, 'invalid_input', /body\.name: invalid bucket name/);
        // The CLI's own parser and limit: a timeout is at most 10m.
        assertError(await call('POST', '/buckets', { name: 'x', timeout: '11m' }), 400, 'invalid_input', /body\.timeout: .*at most 10m/);
        assertError(await call('POST', '/buckets', { name: 'x', max_body: '101MiB' }), 400, 'invalid_input', /100MiB/);
        assertError(await call('POST', '/buckets', { name: 'x', timeout_ms: 5 }), 400, 'invalid_input', /timeout_ms/);
        assertError(await call('POST', '/buckets', { name: 'x', burst: 3 }), 400, 'invalid_option', /--burst needs --rate/);
        assertError(
          await call('POST', '/buckets', { name: 'x', retain_states: 'failed' }),
          400,
          'invalid_option',
          /retain_states needs retain/,
        );
        assertError(await call('POST', '/buckets', '{"name": "x"', {}), 400, 'invalid_input');
        // A body that is not JSON by its Content-Type is refused (a text/plain form post skips CORS preflight).
        const plain = await call('POST', '/buckets', JSON.stringify({ name: 'y' }), { 'Content-Type': 'text/plain' });
        assertError(plain, 415, 'unsupported_media_type');
        assert.equal(await ctx.set.store.getBucket('x'), undefined);
        assert.equal(await ctx.set.store.getBucket('y'), undefined);

        await submitAll(ctx.set, [captured('stripe', T0 - 1000), captured('stripe', T0 - 500)]);
        const list = await call('GET', '/buckets');
        assert.equal(list.status, 200);
        assert.deepEqual(
          list.json.buckets.map((b: Json) => b.name),
          ['stripe'],
        );
        assert.equal(list.json.buckets[0].requests, 2);
        assert.deepEqual(list.json.buckets[0].states, { pending: 2 });
        assert.deepEqual(list.json.unattributed_rejections, {});

        const shown = await call('GET', '/buckets/stripe');
        assert.equal(shown.status, 200);
        assert.equal(shown.json.requests, 2);
        assert.equal(shown.json.destination, DEST);
        assertError(await call('GET', '/buckets/nope'), 404, 'not_found', /bucket nope not found/);
        assertError(await call('GET', '/buckets/NOPE'), 400, 'invalid_input', /param\.name/);
      });

      it('PATCH changes only what is given, and null removes a setting as the --no-* flags do', async () => {
        const { call } = apiOf(ctx);
        await call('POST', '/buckets', {
          name: 'gh',
          destination: DEST,
          ack_body: 'ok',
          ack_content_type: 'text/plain',
          forward_headers: ['X-Env: prod', 'Authorization: Bearer abc'],
        });
        let r = await call('PATCH', '/buckets/gh', { rate: '50/s', burst: 10, cap: '6h', retry_on: '5xx,429' });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.equal(r.json.rate, '50/s');
        assert.equal(r.json.burst, 10);
        assert.equal(r.json.schedule.cap_ms, 6 * 3_600_000);
        assert.equal(r.json.schedule.base_ms, 30_000, 'schedule knobs not given stay');
        assert.equal(r.json.destination, DEST);
        assert.deepEqual(
          r.json.forward_headers,
          [
            ['X-Env', 'prod'],
            ['Authorization', 'Bearer abc'],
          ],
          'stored values, unredacted',
        );

        r = await call('PATCH', '/buckets/gh', {
          rate: null,
          destination: null,
          ack_body: null,
          ack_content_type: null,
          retry_on: null,
          forward_headers: null,
        });
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.equal(r.json.rate, null);
        assert.equal(r.json.burst, 1, 'no rate: burst back to 1, as --no-rate');
        assert.equal(r.json.destination, null);
        assert.equal(r.json.ack_body, null);
        assert.equal(r.json.ack_content_type, null);
        assert.deepEqual(r.json.forward_headers, []);
        const fresh = await call('GET', '/buckets/fresh-none');
        assert.equal(fresh.status, 404);

        r = await call('PATCH', '/buckets/gh', { retain: '7d', retain_states: ['delivered', 'none'] });
        assert.deepEqual([r.json.retain_ms, r.json.retain_states], [7 * 86_400_000, ['delivered', 'none']]);
        r = await call('PATCH', '/buckets/gh', { retain: null });
        assert.deepEqual([r.json.retain_ms, r.json.retain_states], [null, ['delivered']]);

        r = await call('PATCH', '/buckets/gh', { forward_headers: ['X-A: 1'] });
        assert.deepEqual(r.json.forward_headers, [['X-A', '1']], 'the list given is the whole list');

        assertError(await call('PATCH', '/buckets/gh', { burst: 2 }), 400, 'invalid_option', /--burst needs --rate/);
        assertError(await call('PATCH', '/buckets/gh', { max_attempts: 3, give_up: '1h' }), 400, 'usage');
        assertError(await call('PATCH', '/buckets/gh', { base: null }), 400, 'invalid_input', /body\.base/);
        assertError(await call('PATCH', '/buckets/gh', { forward_headers: ['Host: x'] }), 400, 'invalid_input', /forwarder/);
        assertError(await call('PATCH', '/buckets/nope', { rate: '1/s' }), 404, 'not_found');
        // Nothing of the refused patches landed.
        assert.deepEqual((await call('GET', '/buckets/gh')).json.forward_headers, [['X-A', '1']]);
      });

      it('pauses and resumes (idempotent), and deletes only with force while work is undelivered', async () => {
        const { call } = apiOf(ctx);
        await call('POST', '/buckets', { name: 'p', destination: DEST });
        let r = await call('POST', '/buckets/p/pause');
        assert.equal(r.status, 200);
        assert.equal(r.json.paused, true);
        assert.equal(typeof r.json.paused_at, 'string');
        r = await call('POST', '/buckets/p/pause');
        assert.equal(r.json.paused, true);
        r = await call('POST', '/buckets/p/resume');
        assert.equal(r.json.paused, false);
        assertError(await call('POST', '/buckets/nope/pause'), 404, 'not_found');
        assertError(await call('POST', '/buckets/nope/resume'), 404, 'not_found');

        await submitAll(ctx.set, [captured('p', T0 - 100), captured('p', T0 - 50)]);
        assertError(await call('DELETE', '/buckets/p'), 409, 'bucket_not_empty');
        assertError(await call('DELETE', '/buckets/p?force=maybe'), 400, 'invalid_input', /query\.force/);
        r = await call('DELETE', '/buckets/p?force=true');
        assert.equal(r.status, 200, JSON.stringify(r.json));
        assert.deepEqual(r.json, { name: 'p', deleted: true, requests: 2 });
        assertError(await call('GET', '/buckets/p'), 404, 'not_found');
        assertError(await call('DELETE', '/buckets/p'), 404, 'not_found');
      });
    });

    describe('requests', () => {
      it('lists with the requests list filters, relative times on the server clock, and cursor pagination', async () => {
        const { call } = apiOf(ctx);
        await call('POST', '/buckets', { name: 'r', destination: DEST });
        const old = [captured('r', T0 - 3_600_000, { method: 'PUT', path: '/a' })];
        const recent = Array.from({ length: 5 }, (_, i) =>
          captured('r', T0 - 600_000 + i * 1000, {
            path: i % 2 ? '/orders/1' : '/b',
            rawHeaders: ['Content-Type', 'application/json', 'X-Event', i === 2 ? 'push' : 'ping'],
            body: `{"n":${i},"c":"cus_${i}"}`,
          }),
        );
        const oldId = (await submitAll(ctx.set, old))[0]!;
        const recentIds = await submitAll(ctx.set, recent);

        const all = await call('GET', '/buckets/r/requests');
        assert.equal(all.status, 200);
        assert.deepEqual(
          all.json.requests.map((x: Json) => x.id),
          [...recentIds].reverse().concat(oldId),
          'newest first',
        );
        assert.equal(all.json.next_cursor, null);
        assert.deepEqual(
          Object.keys(all.json.requests[0]).sort(),
          [
            'attempts',
            'disposition',
            'generation',
            'id',
            'last_status',
            'method',
            'path',
            'query',
            'received_at',
            'size',
            'state',
            'verification',
          ].sort(),
        );

        // 30m before the server's (manual) clock: the hour-old request is out.
        const since = await call('GET', '/buckets/r/requests?since=30m');
        assert.deepEqual(
          since.json.requests.map((x: Json) => x.id),
          [...recentIds].reverse(),
        );
        const until = await call('GET', `/buckets/r/requests?until=${encodeURIComponent(new Date(T0 - 1_800_000).toISOString())}`);
        assert.deepEqual(
          until.json.requests.map((x: Json) => x.id),
          [oldId],
        );
        assert.deepEqual(
          (await call('GET', '/buckets/r/requests?method=put')).json.requests.map((x: Json) => x.id),
          [oldId],
        );
        assert.deepEqual(
          (await call('GET', '/buckets/r/requests?path=/orders/*')).json.requests.map((x: Json) => x.id),
          [recentIds[3], recentIds[1]],
        );
        assert.deepEqual(
          (await call('GET', '/buckets/r/requests?header=x-event=push&header=Content-Type=application/json')).json.requests.map(
            (x: Json) => x.id,
          ),
          [recentIds[2]],
        );
        assert.deepEqual((await call('GET', '/buckets/r/requests?header=x-event=push&header=Content-Type=text/plain')).json.requests, []);
        assert.deepEqual(
          (await call('GET', '/buckets/r/requests?search=cus_4')).json.requests.map((x: Json) => x.id),
          [recentIds[4]],
        );
        assert.deepEqual(
          (await call('GET', `/buckets/r/requests?id=${recentIds[0]},${oldId}`)).json.requests.map((x: Json) => x.id),
          [recentIds[0], oldId],
        );
        assert.deepEqual(
          (await call('GET', `/buckets/r/requests?id=${recentIds[0]}&id=${oldId}`)).json.requests.map((x: Json) => x.id),
          [recentIds[0], oldId],
        );
        assert.equal((await call('GET', '/buckets/r/requests?state=pending&state=delivered')).json.requests.length, 6);

        // A 503 answer to the oldest: retrying, last status 503; the status filter finds it.
        const c = await claim(ctx.set, 'r', T0, { limit: 1 });
        assert.equal(c.claimed[0]!.requestId, oldId);
        await ctx.set.drain.complete([result(c.claimed[0]!, T0 + 10, 'retry', { status: 503, nextAttemptAt: T0 + 60_000 })]);
        const failing = await call('GET', '/buckets/r/requests?status=5xx');
        assert.deepEqual(
          failing.json.requests.map((x: Json) => [x.id, x.state, x.last_status, x.attempts]),
          [[oldId, 'retrying', 503, 1]],
        );
        assert.deepEqual(
          (await call('GET', '/buckets/r/requests?state=retrying')).json.requests.map((x: Json) => x.id),
          [oldId],
        );

        // Pages of 2 until next_cursor is null: every request once, in order.
        const seen: string[] = [];
        let cursor: string | null = null;
        let pages = 0;
        do {
          const page: { json: Json } = await call('GET', `/buckets/r/requests?limit=2${cursor ? `&cursor=${cursor}` : ''}`);
          assert.ok(page.json.requests.length <= 2);
          seen.push(...page.json.requests.map((x: Json) => x.id));
          cursor = page.json.next_cursor;
          pages++;
        } while (cursor !== null && pages < 10);
        assert.deepEqual(seen, [...recentIds].reverse().concat(oldId));
        assert.equal(pages, 3);

        assertError(await call('GET', '/buckets/r/requests?state=bogus'), 400, 'invalid_input', /query\.state: unknown state "bogus"/);
        assertError(await call('GET', '/buckets/r/requests?since=30'), 400, 'invalid_input', /query\.since/);
        assertError(await call('GET', '/buckets/r/requests?since=10m&until=20m'), 400, 'usage', /--since .* must be before --until/);
        assertError(await call('GET', '/buckets/r/requests?limit=0'), 400, 'invalid_input', /query\.limit/);
        assertError(await call('GET', '/buckets/r/requests?cursor=xyz'), 400, 'invalid_input', /query\.cursor/);
        assertError(await call('GET', '/buckets/r/requests?header=novalue'), 400, 'invalid_input', /query\.header/);
        assertError(await call('GET', '/buckets/nope/requests'), 404, 'not_found');
      });

      it('shows a request as requests show --json, and serves its exact bytes as a sandboxed download', async () => {
        const { call } = apiOf(ctx);
        await call('POST', '/buckets', { name: 'bin', destination: DEST });
        // NULs, invalid UTF-8 (0xff, a lone continuation byte, a truncated sequence), and text.
        const body = Buffer.from([0x00, 0xff, 0x80, 0x41, 0x00, 0xe2, 0x82, 0x0a, 0x3c, 0x62, 0x3e, 0xc3]);
        const [binId] = await submitAll(ctx.set, [
          captured('bin', T0 - 1000, {
            body,
            rawHeaders: ['content-type', 'application/octet-stream', 'X-Dup', '1', 'x-dup', '2'],
            query: 'a=1&token=s3cret',
            rawTrailers: ['X-Checksum', 'abc'],
          }),
        ]);
        const [htmlId] = await submitAll(ctx.set, [
          captured('bin', T0 - 500, { body: '<script>alert(1)</script>', rawHeaders: ['Content-Type', 'text/html; charset=utf-8'] }),
        ]);
        const [jsonId] = await submitAll(ctx.set, [
          captured('bin', T0 - 400, {
            body: '{"password":"hunter2"}',
            rawHeaders: ['Content-Type', 'application/json', 'Authorization', 'Bearer secret-token'],
          }),
        ]);

        const shown = await call('GET', `/requests/${binId}`);
        assert.equal(shown.status, 200);
        assert.equal(shown.json.body_encoding, 'base64');
        assert.deepEqual(Buffer.from(shown.json.body, 'base64'), body);
        assert.deepEqual(shown.json.headers, [
          ['content-type', 'application/octet-stream'],
          ['X-Dup', '1'],
          ['x-dup', '2'],
        ]);
        assert.deepEqual(shown.json.trailers, [['X-Checksum', 'abc']]);
        assert.equal(shown.json.query, 'a=1&token=s3cret', 'stored bytes: no redaction');
        assert.equal(shown.json.sha256, createHash('sha256').update(body).digest('hex'));
        assert.equal(shown.json.deliveries.length, 1);
        assert.equal(shown.json.deliveries[0].state, 'pending');
        const secret = await call('GET', `/requests/${jsonId}`);
        assert.equal(secret.json.body, '{"password":"hunter2"}');
        assert.deepEqual(secret.json.headers[1], ['Authorization', 'Bearer secret-token']);

        const raw = await call('GET', `/requests/${binId}/body`);
        assert.equal(raw.status, 200);
        assert.deepEqual(Buffer.from(await raw.res.arrayBuffer()), body, 'byte-exact');
        assert.equal(raw.res.headers.get('content-type'), 'application/octet-stream');
        assert.equal(raw.res.headers.get('content-disposition'), `attachment; filename="${binId}.bin"`);
        assert.equal(raw.res.headers.get('content-security-policy'), 'sandbox');
        assert.equal(raw.res.headers.get('x-content-type-options'), 'nosniff');
        assert.equal(raw.res.headers.get('x-hookbucket-content-type'), 'application/octet-stream');
        assert.equal(raw.res.headers.get('x-hookbucket-sha256'), shown.json.sha256);

        // A stored HTML page is never served as HTML on the admin origin.
        const html = await call('GET', `/requests/${htmlId}/body`);
        assert.equal(html.res.headers.get('content-type'), 'application/octet-stream');
        assert.equal(html.res.headers.get('x-hookbucket-content-type'), 'text/html; charset=utf-8');
        assert.equal(await html.res.text(), '<script>alert(1)</script>');

        assertError(await call('GET', '/requests/019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00'), 404, 'not_found');
        assertError(await call('GET', '/requests/not-an-id'), 404, 'not_found');
        assertError(await call('GET', '/requests/019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00/body'), 404, 'not_found');
      });

      it('exports a bucket streamed as ndjson, har and curl, with the filters', async () => {
        const { call } = apiOf(ctx);
        await call('POST', '/buckets', { name: 'ex', destination: DEST });
        const body = Buffer.from([0x00, 0xff, 0x01]);
        const ids = await submitAll(ctx.set, [
          captured('ex', T0 - 3000, { body }),
          captured('ex', T0 - 2000, { method: 'PUT' }),
          captured('ex', T0 - 1000),
        ]);
        const nd = await call('GET', '/buckets/ex/export');
        assert.equal(nd.status, 200);
        assert.equal(nd.res.headers.get('content-type'), 'application/x-ndjson');
        const lines = (await nd.res.text())
          .trimEnd()
          .split('\n')
          .map((l) => JSON.parse(l) as Json);
        assert.equal(lines.length, 3);
        assert.deepEqual(Buffer.from(lines[0]!.body, 'base64'), body);
        const puts = await call('GET', '/buckets/ex/export?method=PUT&format=har');
        const har = JSON.parse(await puts.res.text()) as Json;
        assert.equal(har.log.entries.length, 1);
        assert.equal(har.log.entries[0].request.method, 'PUT');
        assertError(await call('GET', `/buckets/ex/export?format=curl&id=${ids[2]}`), 400, 'usage', /needs base_url/);
        const curl = await call('GET', `/buckets/ex/export?format=curl&id=${ids[2]}&base_url=http%3A%2F%2F127.0.0.1%3A9%2Fin`);
        const script = await curl.res.text();
        assert.match(script, /^#!\/usr\/bin\/env bash/);
        assert.deepEqual(script.match(/^# [0-9a-f-]{36}/gm), [`# ${ids[2]}`], 'one command, for the id asked');
        assert.match(script, / \| curl /);
        assertError(await call('GET', '/buckets/ex/export?format=xml'), 400, 'invalid_input', /query\.format/);
        assertError(await call('GET', '/buckets/nope/export'), 404, 'not_found');
      });
    });

    describe('replays', () => {
      it('needs confirm unless dry_run, answers the replay object, and lists and shows replays', async () => {
        const { call } = apiOf(ctx);
        await call('POST', '/buckets', { name: 'rp', destination: DEST });
        const ids = await submitAll(ctx.set, [captured('rp', T0 - 3000), captured('rp', T0 - 2000), captured('rp', T0 - 1000)]);

        assertError(await call('POST', '/buckets/rp/replays', {}), 400, 'usage', /say which requests to replay/);
        assertError(await call('POST', '/buckets/rp/replays', { all: true, state: 'pending' }), 400, 'usage', /--all/);
        assertError(await call('POST', '/buckets/rp/replays', { state: 'pending' }), 409, 'confirmation_required', /"confirm": true/);
        assertError(await call('POST', '/buckets/rp/replays', { state: 'pending', confirm: false }), 409, 'confirmation_required');
        assertError(await call('POST', '/buckets/rp/replays', { state: 'pending', yes: true }), 400, 'invalid_input', /yes/);
        assert.deepEqual((await call('GET', '/replays')).json.replays, [], 'nothing replayed by a refused call');

        const dry = await call('POST', '/buckets/rp/replays', { state: 'pending', dry_run: true });
        assert.equal(dry.status, 200);
        assert.deepEqual([dry.json.dry_run, dry.json.count, dry.json.destination, dry.json.sample.length], [true, 3, DEST, 3]);
        assert.deepEqual(
          dry.json.sample.map((s: Json) => s.id),
          ids,
          'oldest first',
        );

        const none = await call('POST', '/buckets/rp/replays', { state: 'failed', confirm: true });
        assert.deepEqual([none.status, none.json], [200, { replay: null, count: 0 }]);

        const made = await call('POST', '/buckets/rp/replays', { id: [ids[0], ids[2]], rate: '5/s', confirm: true });
        assert.equal(made.status, 201, JSON.stringify(made.json));
        assert.equal(made.json.bucket, 'rp');
        assert.equal(made.json.total, 2);
        assert.equal(made.json.rate, '5/s');
        assert.deepEqual(made.json.selection, { id: [ids[0], ids[2]] });
        assert.equal(made.json.superseded_at_start, 2);

        const list = await call('GET', '/replays?bucket=rp');
        assert.deepEqual(
          list.json.replays.map((x: Json) => x.id),
          [made.json.id],
        );
        assert.equal(list.json.replays[0].progress.total, 2);
        assert.deepEqual((await call('GET', '/replays?bucket=other')).json, { replays: [] }, 'a bucket without replays lists none');
        const one = await call('GET', `/replays/${made.json.id}`);
        assert.equal(one.status, 200);
        assert.equal(one.json.progress.pending, 2);
        assert.equal(one.json.settled, false);
        assertError(await call('GET', '/replays/019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00'), 404, 'not_found');

        assertError(
          await call('POST', '/buckets/rp/replays', { id: '019ae0c4-5b7e-7c3a-9f1e-2b8d4c6a1e00', confirm: true }),
          404,
          'not_found',
          /not in bucket rp/,
        );
        assertError(await call('POST', '/buckets/nope/replays', { all: true, confirm: true }), 404, 'not_found');
        assertError(
          await call('POST', '/buckets/rp/replays', { all: true, to: 'ftp://x', confirm: true }),
          400,
          'invalid_input',
          /body\.to/,
        );
        await call('PATCH', '/buckets/rp', { destination: null });
        assertError(await call('POST', '/buckets/rp/replays', { all: true, confirm: true }), 400, 'invalid_option', /no destination/);
        const to = await call('POST', '/buckets/rp/replays', { all: true, to: 'http://127.0.0.1:9/staging', confirm: true });
        assert.equal(to.status, 201);
        assert.equal(to.json.destination, 'http://127.0.0.1:9/staging');
      });
    });

    describe('stats and health', () => {
      it('answers stats --json, and health 200 or 503 with what tripped', async () => {
        const { call } = apiOf(ctx);
        await call('POST', '/buckets', { name: 's', destination: DEST });
        await submitAll(ctx.set, [captured('s', T0 - 1000), captured('s', T0 - 500)]);

        const all = await call('GET', '/stats');
        assert.equal(all.status, 200);
        assert.equal(all.json.bucket, null);
        assert.equal(all.json.received, 2);
        assert.equal(all.json.window_ms, 3_600_000);
        assert.equal(all.json.until, new Date(T0).toISOString(), 'the window ends at the server clock');
        assert.deepEqual(
          all.json.buckets.map((b: Json) => b.bucket),
          ['s'],
        );
        const one = await call('GET', '/stats?bucket=s&window=15m');
        assert.deepEqual([one.json.bucket, one.json.window_ms, one.json.pending, one.json.buckets], ['s', 900_000, 2, undefined]);
        assertError(await call('GET', '/stats?bucket=nope'), 404, 'not_found');
        assertError(await call('GET', '/stats?window=0s'), 400, 'invalid_input', /query\.window/);

        const healthy = await call('GET', `/health?bucket=s&fail_on=${encodeURIComponent('exhausted > 0 || received > 10')}`);
        assert.equal(healthy.status, 200);
        assert.equal(healthy.json.healthy, true);
        assert.deepEqual(healthy.json.tripped, []);
        assert.deepEqual(healthy.json.values, { exhausted: 0, received: 2 });

        const sick = await call('GET', `/health?fail_on=${encodeURIComponent('pending >= 2 && workers_alive < 1')}`);
        assert.equal(sick.status, 503);
        assert.equal(sick.json.healthy, false);
        assert.equal(sick.json.expression, 'pending >= 2 && workers_alive < 1');
        assert.deepEqual(
          sick.json.tripped.map((t: Json) => t.condition),
          ['pending >= 2', 'workers_alive < 1'],
        );

        const plain = await call('GET', '/health');
        assert.deepEqual([plain.status, plain.json.healthy, plain.json.expression], [200, true, null]);
        assertError(await call('GET', `/health?fail_on=${encodeURIComponent('bogus > 1')}`), 400, 'invalid_option', /^fail_on: /);
        assertError(await call('GET', '/health?bucket=nope&fail_on=received%3E0'), 404, 'not_found');
      });

      it('health answers 503 with the storage code when a read fails', async () => {
        for (const code of ['storage_error', 'query_timeout'] as const) {
          const failing: StoreReads = new Proxy(ctx.set.store, {
            get(target, prop, receiver) {
              if (prop === 'statsSamples')
                return async () => Promise.reject(new AppError(code as 'storage_error', `reads failed (${code})`));
              const v = Reflect.get(target, prop, receiver) as unknown;
              return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
            },
          });
          const { call } = apiOf(ctx, failing);
          const r = await call('GET', '/health?fail_on=received%3E0');
          assert.equal(r.status, 503);
          assert.deepEqual(r.json, { healthy: false, error: `reads failed (${code})`, code });
          assertError(await call('GET', '/stats'), 503, code);
        }
      });
    });
  });
}

describe('admin api: mounted, errors', () => {
  const ctx = useStoreSet(DIALECTS[0]!);

  it('answers in the error shape when mounted at /api: unknown routes, wrong methods, oversized bodies', async () => {
    const parent = new Hono();
    parent.route(
      '/api',
      createApiApp({ store: ctx.set.store, reads: ctx.set.store, clock: ctx.clock, logger: silentLogger, config: { maxBodyBytes: 1024 } }),
    );
    const req = async (method: string, path: string, body?: string) => {
      const res = await parent.request(path, {
        method,
        ...(body === undefined ? {} : { body, headers: { 'Content-Type': 'application/json' } }),
      });
      return { status: res.status, json: (await res.json()) as Json };
    };
    const created = await req('POST', '/api/buckets', JSON.stringify({ name: 'm' }));
    assert.equal(created.status, 201);
    assert.equal((await req('GET', '/api/buckets/m')).json.name, 'm');
    assertError(await req('GET', '/api/buckets/nope'), 404, 'not_found', /bucket nope not found/);
    assertError(await req('GET', '/api/no-such-route'), 404, 'not_found', /no route GET \/api\/no-such-route/);
    assertError(await req('PUT', '/api/buckets'), 404, 'not_found');
    assertError(await req('POST', '/api/buckets', JSON.stringify({ name: 'big', ack_body: 'x'.repeat(2000) })), 413, 'body_too_large');
    assert.equal(await ctx.set.store.getBucket('big'), undefined);
    assertError(await req('GET', '/api/buckets/m/requests?limit=nope'), 400, 'invalid_input');
    const doc = await parent.request('/api/openapi.json');
    assert.equal(doc.status, 200);
  });
});

for (const s of SKIPPED_DIALECTS) {
  describe(`admin api: ${s.name}`, () => {
    it('is skipped', { skip: s.reason }, () => undefined);
  });
}

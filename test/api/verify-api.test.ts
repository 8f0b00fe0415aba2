import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { createApiApp } from '../../src/api/api-app.js';
import { silentLogger } from '../../src/shared/logger.js';
import type { StoredVerdict } from '../../src/store/store.js';
import { standardSignatureHeaders } from '../../src/verify/sign.js';
import { DIALECTS } from '../store/contract/dialects.js';
import { captured, claim, DEST, idAt, submitAll, T0, useStoreSet, type Ctx } from '../store/contract/harness.js';

/**
 * POST /buckets/{name}/verify (the `requests verify` of --api) through app.request() on a real
 * store, SQLite always and PostgreSQL when HOOKBUCKET_TEST_PG is set: quarantined requests
 * re-checked under a wrong secret stay quarantined; after the secret is fixed they are released
 * with a first delivery. The walk goes one batch per call (next_cursor), and every refusal has the
 * CLI's code.
 */

type Json = Record<string, any>;

const RIGHT = 'whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw';
const WRONG = 'whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD';
const INVALID: StoredVerdict = { scheme: 'standard', result: 'invalid', reason: 'no_matching_signature' };
/** More than one store batch (at most 500 requests each), so the walk takes several calls. */
const SIGNED = 505;

function apiOf(ctx: Ctx) {
  const app = createApiApp({ store: ctx.set.store, reads: ctx.set.store, clock: ctx.clock, logger: silentLogger });
  return async (method: string, path: string, body?: unknown) => {
    const res = await app.request(path, {
      method,
      headers: body === undefined ? {} : { 'Content-Type': 'application/json' },
      ...(body === undefined ? {} : { body: JSON.stringify(body) }),
    });
    return { status: res.status, json: (await res.json()) as Json };
  };
}

/** Calls the route until next_cursor is null; the counts added up, and how many calls it took. */
async function verifyAll(call: ReturnType<typeof apiOf>, bucket: string, body: Json): Promise<{ sum: Json; calls: number }> {
  const sum: Json = { checked: 0, verified: 0, invalid: 0, missing: 0, expired: 0, released: 0, duplicates: 0 };
  let cursor: string | null = null;
  let calls = 0;
  do {
    const r = await call('POST', `/buckets/${bucket}/verify`, { ...body, ...(cursor !== null ? { cursor } : {}) });
    assert.equal(r.status, 200, JSON.stringify(r.json));
    assert.deepEqual(Object.keys(r.json).sort(), [
      'checked',
      'duplicates',
      'expired',
      'invalid',
      'missing',
      'next_cursor',
      'released',
      'verified',
    ]);
    for (const k of Object.keys(sum)) sum[k] += r.json[k];
    cursor = r.json.next_cursor;
    calls++;
    assert.ok(calls < 50, 'the walk ends');
  } while (cursor !== null);
  return { sum, calls };
}

function assertError(r: { status: number; json: Json }, status: number, code: string, message?: RegExp): void {
  assert.equal(r.status, status, JSON.stringify(r.json));
  assert.deepEqual(Object.keys(r.json).sort(), ['code', 'error']);
  assert.equal(r.json.code, code);
  if (message) assert.match(r.json.error, message);
}

/** Standard Webhooks requests signed with RIGHT at their arrival time, stored quarantined (as under WRONG). */
function signedQuarantined(bucket: string, n: number, from: number) {
  return Array.from({ length: n }, (_, i) => {
    const at = from + i;
    const body = Buffer.from(JSON.stringify({ n: i }));
    const rawHeaders = ['Content-Type', 'application/json', ...standardSignatureHeaders(`msg_${i}`, at, body, [RIGHT])];
    return captured(bucket, at, { id: idAt(at), body, rawHeaders, disposition: 'quarantined', verdict: INVALID });
  });
}

for (const dialect of DIALECTS) {
  describe(`admin api: POST /buckets/{name}/verify, ${dialect.name}`, () => {
    before(async () => dialect.setUp?.());
    after(async () => dialect.tearDown?.());
    const ctx = useStoreSet(dialect);

    it('re-checks in batches with next_cursor; releases quarantined requests once the secret is right', async () => {
      const call = apiOf(ctx);
      const created = await call('POST', '/buckets', { name: 'std', destination: DEST, verify: 'standard', verify_secrets: [WRONG] });
      assert.equal(created.status, 201, JSON.stringify(created.json));
      const signed = signedQuarantined('std', SIGNED, T0);
      // One with no signature at all: missing, whatever the secret.
      const unsigned = captured('std', T0 + SIGNED, { disposition: 'quarantined', verdict: INVALID });
      await submitAll(ctx.set, [...signed, unsigned]);
      ctx.clock.set(T0 + 86_400_000); // a day later: the tolerance is measured from each arrival

      // The wrong secret: every verdict re-stored, nothing released.
      const wrong = await verifyAll(call, 'std', { release: true });
      assert.deepEqual(wrong.sum, {
        checked: SIGNED + 1,
        verified: 0,
        invalid: SIGNED,
        missing: 1,
        expired: 0,
        released: 0,
        duplicates: 0,
      });
      assert.ok(wrong.calls >= 2, `one batch per call: ${wrong.calls} calls`);
      assert.equal(await ctx.set.store.countRequests('std', { states: ['quarantined'] }), SIGNED + 1);

      const patched = await call('PATCH', '/buckets/std', { verify_secrets: [WRONG, RIGHT] });
      assert.equal(patched.status, 200, JSON.stringify(patched.json));
      // Without release: verdicts only.
      const first = signed[0]!.id;
      const one = await verifyAll(call, 'std', { id: [first] });
      assert.deepEqual(one.sum, { checked: 1, verified: 1, invalid: 0, missing: 0, expired: 0, released: 0, duplicates: 0 });
      assert.equal((await ctx.set.store.getRequest(first))!.state, 'quarantined');
      assert.equal((await ctx.set.store.getRequest(first))!.verdict!.result, 'verified');

      // The filters are those of requests list: only the verified ones, released.
      const fixed = await verifyAll(call, 'std', { state: 'quarantined', release: true });
      assert.deepEqual(fixed.sum, {
        checked: SIGNED + 1,
        verified: SIGNED,
        invalid: 0,
        missing: 1,
        expired: 0,
        released: SIGNED,
        duplicates: 0,
      });
      const r = await ctx.set.store.getRequest(first);
      assert.equal(r!.disposition, 'accepted');
      assert.equal(r!.state, 'pending');
      assert.equal((await ctx.set.store.getRequest(unsigned.id))!.state, 'quarantined');
      // Released with a first delivery, due now: the drain claims them.
      const claimed = await claim(ctx.set, 'std', T0 + 86_400_000 + 1);
      assert.ok(claimed.claimed.length > 0);
      assert.ok(claimed.claimed.every((a) => a.requestId !== unsigned.id));

      // Again: accepted already, nothing more released.
      const again = await verifyAll(call, 'std', { id: [first], release: true });
      assert.deepEqual(again.sum, { checked: 1, verified: 1, invalid: 0, missing: 0, expired: 0, released: 0, duplicates: 0 });
    });

    it('refuses with the CLI codes, before changing anything', async () => {
      const call = apiOf(ctx);
      assert.equal((await call('POST', '/buckets', { name: 'std', verify: 'standard', verify_secrets: [RIGHT] })).status, 201);
      assert.equal((await call('POST', '/buckets', { name: 'plain', destination: DEST })).status, 201);
      const [mine] = await submitAll(ctx.set, signedQuarantined('std', 1, T0));
      const [theirs] = await submitAll(ctx.set, [captured('plain', T0 + 5)]);

      assertError(await call('POST', '/buckets/plain/verify', {}), 400, 'verify_not_configured', /bucket plain does not verify/);
      assertError(await call('POST', '/buckets/nope/verify', {}), 404, 'not_found', /^bucket nope not found$/);
      assertError(await call('POST', '/buckets/std/verify', { id: [theirs], release: true }), 404, 'not_found', /is not in bucket std/);
      assertError(
        await call('POST', '/buckets/std/verify', { id: ['00000000-0000-7000-8000-000000000000'] }),
        404,
        'not_found',
        /request 00000000-0000-7000-8000-000000000000 not found/,
      );
      assertError(await call('POST', '/buckets/std/verify', { cursor: 'nonsense' }), 400, 'invalid_input', /cursor/);
      assertError(await call('POST', '/buckets/std/verify', { release: 'yes' }), 400, 'invalid_input', /body\.release/);
      assertError(await call('POST', '/buckets/std/verify', { all: true }), 400, 'invalid_input');
      assertError(await call('POST', '/buckets/std/verify', { since: 'soon' }), 400, 'invalid_input', /body\.since/);
      // Nothing changed by the refusals: still quarantined, with the verdict it was stored with.
      const r = await ctx.set.store.getRequest(mine!);
      assert.equal(r!.state, 'quarantined');
      assert.deepEqual(r!.verdict, INVALID);
      // An empty selection is one call with nothing checked.
      const none = await call('POST', '/buckets/std/verify', { state: 'delivered' });
      assert.deepEqual(none.json, {
        checked: 0,
        verified: 0,
        invalid: 0,
        missing: 0,
        expired: 0,
        released: 0,
        duplicates: 0,
        next_cursor: null,
      });
    });
  });
}

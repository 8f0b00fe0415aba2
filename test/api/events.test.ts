import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { createApiApp } from '../../src/api/api-app.js';
import { EventHub, type HubEvent } from '../../src/api/event-hub.js';
import type { StoreReads } from '../../src/api/store-reads.js';
import { silentLogger } from '../../src/shared/logger.js';
import { DIALECTS } from '../store/contract/dialects.js';
import { captured, claim, DEST, result, submitAll, T0, useStoreSet, type Ctx } from '../store/contract/harness.js';

/**
 * GET /events: one poller for every client (EventHub, driven here by pollOnce(): no timers), ids
 * resumable with Last-Event-ID, and the SSE route itself over app.request() with short ticks.
 */

/** The store's reads, recording the buckets of each tail call. */
function countingReads(ctx: Ctx): { reads: StoreReads; tails: string[][] } {
  const tails: string[][] = [];
  const store = ctx.set.store;
  const reads = new Proxy(store, {
    get(target, prop, receiver) {
      if (prop === 'tail') {
        return (bucket: string | readonly string[], cursor: Parameters<StoreReads['tail']>[1]) => {
          tails.push(typeof bucket === 'string' ? [bucket] : [...bucket].sort());
          return target.tail(bucket, cursor);
        };
      }
      const v = Reflect.get(target, prop, receiver) as unknown;
      return typeof v === 'function' ? (v as (...a: unknown[]) => unknown).bind(target) : v;
    },
  });
  return { reads, tails };
}

function collector(buckets: string[] | null) {
  const got: HubEvent[] = [];
  return { sub: { buckets: buckets === null ? null : new Set(buckets), send: (e: HubEvent) => got.push(e) }, got };
}

for (const dialect of DIALECTS)
  describe(`admin api: events hub (${dialect.name})`, () => {
    const ctx = useStoreSet(dialect);

    it('reads every watched bucket in one tail per tick whatever the number of clients and buckets, and fans out', async () => {
      for (const name of ['a', 'b', 'quiet']) await ctx.set.store.createBucket({ name, destination: DEST });
      const { reads, tails } = countingReads(ctx);
      const hub = new EventHub({ reads, clock: ctx.clock, logger: silentLogger, pollMs: 0 });
      const onA = [collector(['a']), collector(['a']), collector(['a'])];
      const onB = collector(['b']);
      const all = collector(null);
      for (const c of [...onA, onB, all]) await hub.subscribe(c.sub);
      assert.equal(hub.subscriberCount, 5);

      const [ra] = await submitAll(ctx.set, [captured('a', T0 + 1)]);
      const [rb] = await submitAll(ctx.set, [captured('b', T0 + 2)]);
      await hub.pollOnce();
      assert.deepEqual(tails, [['a', 'b', 'quiet']], 'one tail per tick for every bucket, not one per bucket or per client');
      for (const c of onA)
        assert.deepEqual(
          c.got.map((e) => [e.event, e.data.id, e.bucket]),
          [['request', ra, 'a']],
        );
      assert.deepEqual(
        onB.got.map((e) => [e.event, e.data.id, e.bucket]),
        [['request', rb, 'b']],
      );
      assert.deepEqual(all.got.map((e) => e.data.id).sort(), [ra, rb].sort());
      assert.deepEqual(Object.keys(onA[0]!.got[0]!.data).sort(), [
        'at',
        'bucket',
        'disposition',
        'event',
        'id',
        'method',
        'path',
        'query',
        'size',
        'state',
        'verification',
      ]);

      // A finished attempt is an attempt event, as requests tail --json.
      const c = await claim(ctx.set, 'a', T0 + 5);
      await ctx.set.drain.complete([result(c.claimed[0]!, T0 + 20, 'delivered')]);
      await hub.pollOnce();
      const attempt = onA[1]!.got[1]!;
      assert.equal(attempt.event, 'attempt');
      assert.deepEqual([attempt.data.request_id, attempt.data.status, attempt.data.outcome, attempt.bucket], [ra, 200, 'delivered', 'a']);
      assert.equal(onB.got.length, 1);

      // Ids count up; nothing is sent twice.
      const ids = all.got.map((e) => e.seq);
      assert.deepEqual(
        ids,
        [...ids].sort((x, y) => x - y),
      );
      await hub.pollOnce();
      assert.equal(all.got.length, 3);
      assert.equal(tails.length, 3, 'one tail per tick');
    });

    it('one tail per tick reads 40 buckets at once: every request, a paused bucket held', async () => {
      const names = Array.from({ length: 40 }, (_, i) => `q${i}`);
      for (const name of names) await ctx.set.store.createBucket({ name, destination: DEST });
      await ctx.set.store.pauseBucket('q7');
      const { reads, tails } = countingReads(ctx);
      const hub = new EventHub({ reads, clock: ctx.clock, logger: silentLogger, pollMs: 0 });
      const all = collector(null);
      await hub.subscribe(all.sub);
      const ids = await submitAll(
        ctx.set,
        names.map((b, i) => captured(b, T0 + 10 + i)),
      );
      await hub.pollOnce();
      assert.equal(tails.length, 1, 'one tail for 40 buckets');
      assert.equal(tails[0]!.length, 40);
      assert.deepEqual(all.got.map((e) => e.data.id).sort(), [...ids].sort());
      assert.deepEqual(
        all.got.filter((e) => e.data.state === 'held').map((e) => e.bucket),
        ['q7'],
      );
      hub.close();
    });

    it('a new client without Last-Event-ID gets only what happens after it subscribed, even within the linger', async () => {
      await ctx.set.store.createBucket({ name: 'a', destination: DEST });
      const hub = new EventHub({ reads: ctx.set.store, clock: ctx.clock, logger: silentLogger, pollMs: 0 });
      const first = collector(['a']);
      const { unsubscribe } = await hub.subscribe(first.sub);
      await submitAll(ctx.set, [captured('a', T0 + 1)]);
      await hub.pollOnce();
      assert.equal(first.got.length, 1);
      const resumeFrom = first.got[0]!.id;
      unsubscribe();
      // Nobody watches and the poller has stopped; the bucket lingers. Two requests meanwhile.
      const missed = await submitAll(ctx.set, [captured('a', T0 + 2), captured('a', T0 + 3)]);
      const fresh = collector(['a']);
      await hub.subscribe(fresh.sub);
      await hub.pollOnce();
      assert.equal(fresh.got.length, 0, 'what came before it connected is not replayed to a new client');
      const [after] = await submitAll(ctx.set, [captured('a', T0 + 4)]);
      await hub.pollOnce();
      assert.deepEqual(
        fresh.got.map((e) => e.data.id),
        [after],
      );
      // A client that left and comes back with its id still gets what it missed, and no more.
      const back = collector(['a']);
      assert.equal((await hub.subscribe(back.sub, resumeFrom)).resumed, 'resumed');
      assert.deepEqual(
        back.got.map((e) => e.data.id),
        [...missed, after],
      );
      hub.close();
    });

    it('resumes from Last-Event-ID while buffered, and says reset when it cannot be whole', async () => {
      for (const name of ['a', 'c']) await ctx.set.store.createBucket({ name, destination: DEST });
      const hub = new EventHub({ reads: ctx.set.store, clock: ctx.clock, logger: silentLogger, pollMs: 0, bufferEvents: 2 });
      const first = collector(['a']);
      const { unsubscribe } = await hub.subscribe(first.sub);
      await submitAll(ctx.set, [captured('a', T0 + 1)]);
      await hub.pollOnce();
      const seen = first.got[0]!;
      unsubscribe();
      // While nobody watches: the bucket's cursor lingers, so the next poll still reads it.
      const [missed] = await submitAll(ctx.set, [captured('a', T0 + 2)]);
      await hub.pollOnce();

      const back = collector(['a']);
      const r = await hub.subscribe(back.sub, seen.id);
      assert.equal(r.resumed, 'resumed');
      assert.deepEqual(
        back.got.map((e) => e.data.id),
        [missed],
      );
      r.unsubscribe();

      const other = await hub.subscribe(collector(['a']).sub, 'ffffffff.1');
      assert.equal(other.resumed, 'reset', 'an id of another server start');
      assert.match(other.reason ?? '', /not from this server start/);
      const onC = await hub.subscribe(collector(['c']).sub, seen.id);
      assert.equal(onC.resumed, 'reset', 'c was followed only after that id: what came before was never read');
      assert.match(onC.reason ?? '', /bucket c was not followed when event/);
      const current = collector(['a']);
      await hub.subscribe(current.sub);
      await submitAll(ctx.set, [captured('a', T0 + 3), captured('a', T0 + 4)]);
      await hub.pollOnce();
      const gone = await hub.subscribe(collector(['a']).sub, seen.id);
      assert.equal(gone.resumed, 'reset', 'the events after it left the buffer (2 kept)');
      assert.match(gone.reason ?? '', /no longer buffered \(the server keeps the last 2\)/);
      assert.equal((await hub.subscribe(collector(['a']).sub, current.got[0]!.id)).resumed, 'resumed');
      hub.close();
    });
  });

/** Reads an SSE body until `done(text)` holds; fails after 5 s (a missing event, not a slow one). */
async function readUntil(
  reader: ReadableStreamDefaultReader<Uint8Array>,
  state: { text: string },
  done: (text: string) => boolean,
): Promise<void> {
  const decoder = new TextDecoder();
  const deadline = Date.now() + 5000;
  while (!done(state.text)) {
    const timeout = new Promise<'timeout'>((resolve) => setTimeout(() => resolve('timeout'), Math.max(1, deadline - Date.now())).unref());
    const next = await Promise.race([reader.read(), timeout]);
    if (next === 'timeout') assert.fail(`no such event within 5 s; got:\n${state.text}`);
    if (next.done) assert.fail(`stream ended; got:\n${state.text}`);
    state.text += decoder.decode(next.value, { stream: true });
  }
}

function sseEvents(text: string): Array<{ id?: string; event?: string; data?: string }> {
  return text
    .split('\n\n')
    .filter((block) => /^(id|event|data):/m.test(block))
    .map((block) => {
      const e: { id?: string; event?: string; data?: string } = {};
      for (const line of block.split('\n')) {
        const m = /^(id|event|data): ?(.*)$/.exec(line);
        if (m) e[m[1] as 'id' | 'event' | 'data'] = m[2]!;
      }
      return e;
    });
}

describe('admin api: GET /events', () => {
  const ctx = useStoreSet(DIALECTS[0]!);

  it('streams request events with resumable ids and heartbeats, and lets go of a closed client', async () => {
    await ctx.set.store.createBucket({ name: 'ev', destination: DEST });
    const hub = new EventHub({ reads: ctx.set.store, clock: ctx.clock, logger: silentLogger, pollMs: 20 });
    const app = createApiApp({
      store: ctx.set.store,
      reads: ctx.set.store,
      clock: ctx.clock,
      logger: silentLogger,
      events: hub,
      config: { heartbeatMs: 50 },
    });

    const res = await app.request('/events?bucket=ev');
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type') ?? '', /^text\/event-stream/);
    const reader = res.body!.getReader();
    const s = { text: '' };
    await readUntil(reader, s, (t) => t.includes(': connected'));
    const [id1] = await submitAll(ctx.set, [captured('ev', T0 + 1, { path: '/x' })]);
    await readUntil(reader, s, (t) => t.includes('event: request'));
    const [e1] = sseEvents(s.text);
    assert.equal(e1!.event, 'request');
    assert.match(e1!.id!, /^[0-9a-f]+\.\d+$/);
    assert.deepEqual(JSON.parse(e1!.data!), {
      event: 'request',
      at: new Date(T0 + 1).toISOString(),
      id: id1,
      method: 'POST',
      path: '/x',
      query: null,
      size: 7,
      state: 'pending',
      disposition: 'accepted',
      verification: null,
      bucket: 'ev',
    });
    await readUntil(reader, s, (t) => t.includes(': heartbeat'));
    await reader.cancel();
    const deadline = Date.now() + 5000;
    while (hub.subscriberCount > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
    assert.equal(hub.subscriberCount, 0, 'a closed client unsubscribes');

    // Missed while away, sent on reconnect with Last-Event-ID.
    const [id2] = await submitAll(ctx.set, [captured('ev', T0 + 2)]);
    const again = await app.request('/events?bucket=ev', { headers: { 'Last-Event-ID': e1!.id! } });
    const r2 = again.body!.getReader();
    const s2 = { text: '' };
    await readUntil(r2, s2, (t) => t.includes('event: request'));
    assert.deepEqual(
      sseEvents(s2.text).map((e) => [e.event, JSON.parse(e.data!).id]),
      [['request', id2]],
    );
    await r2.cancel();

    const stale = await app.request('/events?bucket=ev&last_event_id=0000.5');
    const r3 = stale.body!.getReader();
    const s3 = { text: '' };
    await readUntil(r3, s3, (t) => t.includes('event: reset'));
    await r3.cancel();

    // Shutting the hub down ends the open streams (a listener's close would wait for them otherwise).
    const open = await app.request('/events?bucket=ev');
    const r4 = open.body!.getReader();
    await readUntil(r4, { text: '' }, (t) => t.includes(': connected'));
    hub.close();
    const drained = (async () => {
      while (!(await r4.read()).done);
      return 'ended';
    })();
    const end = await Promise.race([drained, new Promise((resolve) => setTimeout(() => resolve('still open after 5 s'), 5000).unref())]);
    assert.equal(end, 'ended');

    const missing = await app.request('/events?bucket=ev,nope');
    assert.equal(missing.status, 404);
    assert.equal(((await missing.json()) as { code: string }).code, 'not_found');
    const bad = await app.request('/events?bucket=EV');
    assert.equal(bad.status, 400);
    hub.close();
  });
});

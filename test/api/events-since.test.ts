import assert from 'node:assert/strict';
import { createServer as createHttpServer, type Server } from 'node:http';
import { connect, createServer as createTcpServer, type Server as TcpServer, type Socket } from 'node:net';
import type { AddressInfo } from 'node:net';
import { describe, it } from 'node:test';
import { getRequestListener } from '@hono/node-server';
import { Hono } from 'hono';
import { createApiApp } from '../../src/api/api-app.js';
import { EventHub } from '../../src/api/event-hub.js';
import { tailEventJson } from '../../src/json/request-json.js';
import { ApiClient } from '../../src/remote/api-client.js';
import { followEvents } from '../../src/remote/event-stream.js';
import { idFloorAt } from '../../src/shared/ids.js';
import { silentLogger } from '../../src/shared/logger.js';
import type { Store, TailEvent } from '../../src/store/store.js';
import { parseSincePositionId, SinceWalk, sincePositionId, sinceStart, tailEventKey, type SinceReads } from '../../src/store/tail-since.js';
import { DIALECTS } from '../store/contract/dialects.js';
import { claim, DEST, ingestN, result, T0, useStoreSet, type Ctx } from '../store/contract/harness.js';

/**
 * `requests tail --since` and GET /events?since=: the backlog walked a page at a time (SinceWalk),
 * attempts selected by when they finished, and resumed exactly after the last event a client got.
 */

/** Two buckets: requests at T0+0.., attempts whose finish order differs from their start order. */
async function fill(ctx: Ctx): Promise<void> {
  for (const name of ['w', 'v']) await ctx.set.store.createBucket({ name, destination: DEST });
  await ingestN(ctx.set, 'w', 6, T0);
  await ingestN(ctx.set, 'v', 4, T0 + 3);
  // w: three started at T0+100 finish in reverse order (400, 300, 200); three at T0+150 finish at 160, 170, 900.
  const w1 = await claim(ctx.set, 'w', T0 + 100, { limit: 3 });
  assert.equal(w1.claimed.length, 3);
  await ctx.set.drain.complete(w1.claimed.map((c, i) => result(c, T0 + 400 - i * 100, 'delivered')));
  const w2 = await claim(ctx.set, 'w', T0 + 150, { limit: 3 });
  assert.equal(w2.claimed.length, 3);
  await ctx.set.drain.complete(w2.claimed.map((c, i) => result(c, T0 + [160, 170, 900][i]!, 'delivered')));
  // v: all four at T0+120, finishing at 130, 250, 250, 600.
  const v1 = await claim(ctx.set, 'v', T0 + 120, { limit: 4 });
  assert.equal(v1.claimed.length, 4);
  await ctx.set.drain.complete(v1.claimed.map((c, i) => result(c, T0 + [130, 250, 250, 600][i]!, 'delivered')));
}

/** Every event since `sinceMs` as the walk must give it: by time, a request before an attempt of the same ms, then by id. */
function reference(events: TailEvent[], sinceMs: number): string[] {
  const id = (e: TailEvent) => (e.kind === 'request' ? e.request.id : e.attempt.id);
  return events
    .filter((e) => e.at >= sinceMs)
    .sort((a, b) => a.at - b.at || (a.kind === b.kind ? (id(a) < id(b) ? -1 : 1) : a.kind === 'request' ? -1 : 1))
    .map(key);
}

const key = (e: TailEvent) => tailEventKey(tailEventJson(e));

/** Everything stored, read in one go (the live tail from the beginning, far from now). */
async function everything(store: Store, buckets: string[]): Promise<TailEvent[]> {
  const all: TailEvent[] = [];
  for (const b of buckets) all.push(...(await store.tail(b, { requestId: '', sinceMs: 0, seen: [] })).events);
  return all;
}

/** The store's page reads, recording each page's size and limit. */
function pageCounting(store: Store): { reads: SinceReads; pages: Array<{ kind: string; limit: number; got: number }> } {
  const pages: Array<{ kind: string; limit: number; got: number }> = [];
  return {
    pages,
    reads: {
      tailRequestsPage: async (b, after, limit) => {
        const got = await store.tailRequestsPage(b, after, limit);
        pages.push({ kind: 'requests', limit, got: got.length });
        return got;
      },
      tailAttemptsPage: async (b, page, limit) => {
        const got = await store.tailAttemptsPage(b, page, limit);
        pages.push({ kind: 'attempts', limit, got: got.length });
        return got;
      },
    },
  };
}

async function walkAll(walk: SinceWalk): Promise<Array<{ key: string; id: string }>> {
  const out: Array<{ key: string; id: string }> = [];
  for (let x = await walk.next(); x !== undefined; x = await walk.next()) out.push({ key: key(x.event), id: sincePositionId(x.position) });
  return out;
}

for (const dialect of DIALECTS) {
  describe(`tail since a time: the paged walk (${dialect.name})`, () => {
    const ctx = useStoreSet(dialect);

    it('pages of 2 give the same events as one read, each once, oldest first, across two buckets', async () => {
      await fill(ctx);
      ctx.clock.set(T0 + 1000);
      const expected = reference(await everything(ctx.set.store, ['w', 'v']), T0 - 1);
      assert.equal(expected.length, 20, '10 requests, 10 attempts');
      const { reads, pages } = pageCounting(ctx.set.store);
      const paged = await walkAll(new SinceWalk(reads, ['w', 'v'], sinceStart(T0 - 1), { batch: 2 }));
      assert.deepEqual(
        paged.map((x) => x.key),
        expected,
      );
      assert.ok(
        pages.every((p) => p.limit === 2 && p.got <= 2),
        'every read is a page of at most 2',
      );
      assert.ok(pages.filter((p) => p.kind === 'attempts').length >= 5, `attempts read in pages: ${JSON.stringify(pages)}`);
      const whole = await walkAll(new SinceWalk(ctx.set.store, ['w', 'v'], sinceStart(T0 - 1), { batch: 1000 }));
      assert.deepEqual(
        whole.map((x) => x.key),
        expected,
      );
    });

    it('resumes after every position exactly: the rest, nothing before it, nothing twice', async () => {
      await fill(ctx);
      const full = await walkAll(new SinceWalk(ctx.set.store, ['w', 'v'], sinceStart(T0 - 1), { batch: 2 }));
      for (let i = 0; i < full.length; i++) {
        const from = parseSincePositionId(full[i]!.id);
        assert.ok(from, full[i]!.id);
        const rest = await walkAll(new SinceWalk(ctx.set.store, ['w', 'v'], from, { batch: 2 }));
        assert.deepEqual(
          rest.map((x) => x.key),
          full.slice(i + 1).map((x) => x.key),
          `after event ${i}`,
        );
      }
    });

    it('selects attempts by when they finished: started before since and finished after is in; finished before is out', async () => {
      await fill(ctx);
      // Since T0+300: w's attempts started at T0+100 finishing at 400 and 300 (in), 200 (out);
      // at T0+150 finishing at 900 (in), 160 and 170 (out); v's at 600 (in), 130 and 250 (out).
      const since = T0 + 300;
      const got = await walkAll(new SinceWalk(ctx.set.store, ['w', 'v'], sinceStart(since), { batch: 2 }));
      const all = await everything(ctx.set.store, ['w', 'v']);
      const finished = (k: string) => all.find((e) => key(e) === k)!.at - T0;
      assert.deepEqual(
        got.map((x) => finished(x.key)),
        [300, 400, 600, 900],
      );
      // The live tail too: its cursor's sinceMs is the finish time it follows from.
      ctx.clock.set(T0 + 1000);
      const live = await ctx.set.store.tail(['w', 'v'], { requestId: idFloorAt(T0 + 10_000), sinceMs: since, seen: [] });
      assert.deepEqual(
        live.events.map((e) => e.at - T0),
        [300, 400, 600, 900],
      );
      const one = await ctx.set.store.tail('w', { requestId: idFloorAt(T0 + 10_000), sinceMs: since, seen: [] });
      assert.deepEqual(
        one.events.map((e) => e.at - T0),
        [300, 400, 900],
      );
    });
  });
}

/** Sends the stream on, and cuts the first connection once `cutAfter` events have gone through it. */
function cuttingProxy(target: number, cutAfter: number): Promise<{ port: number; close(): Promise<void>; cuts: () => number }> {
  let connections = 0;
  let cuts = 0;
  const sockets = new Set<Socket>();
  const server: TcpServer = createTcpServer((client) => {
    const first = ++connections === 1;
    const upstream = connect(target, '127.0.0.1');
    for (const s of [client, upstream]) {
      sockets.add(s);
      s.on('close', () => sockets.delete(s));
      s.on('error', () => undefined);
    }
    client.pipe(upstream);
    if (!first) {
      upstream.pipe(client);
      return;
    }
    // Up to each blank line (an SSE block's end) at a time, so the cut falls right after an event.
    let held = '';
    let events = 0;
    upstream.on('data', (chunk: Buffer) => {
      held += chunk.toString('latin1');
      for (let end = held.indexOf('\n\n'); end >= 0 && !client.destroyed; end = held.indexOf('\n\n')) {
        const block = held.slice(0, end + 2);
        held = held.slice(end + 2);
        client.write(Buffer.from(block, 'latin1'));
        if (/\nevent: (request|attempt)\n/.test(`\n${block}`) && ++events >= cutAfter) {
          cuts++;
          client.destroy();
          upstream.destroy();
        }
      }
    });
    upstream.on('end', () => client.end());
  });
  return new Promise((resolve) =>
    server.listen(0, '127.0.0.1', () =>
      resolve({
        port: (server.address() as AddressInfo).port,
        cuts: () => cuts,
        close: () => {
          for (const s of sockets) s.destroy();
          return new Promise((r) => server.close(() => r()));
        },
      }),
    ),
  );
}

for (const dialect of DIALECTS) {
  describe(`GET /events?since=: a connection cut mid-backlog resumes exactly after the last event (real server on port 0, ${dialect.name})`, () => {
    const ctx = useStoreSet(dialect);

    it('the client gets every backlog event once, in order, across the cut', async () => {
      await fill(ctx);
      ctx.clock.set(T0 + 1000);
      const expected = reference(await everything(ctx.set.store, ['w']), T0 - 1);
      const hub = new EventHub({ reads: ctx.set.store, clock: ctx.clock, logger: silentLogger, pollMs: 0 });
      const app = createApiApp({
        store: ctx.set.store,
        reads: ctx.set.store,
        clock: ctx.clock,
        logger: silentLogger,
        events: hub,
        config: { sinceBatch: 2 },
      });
      // Mounted under /api, as the admin listener mounts it.
      const server: Server = createHttpServer(getRequestListener(new Hono().route('/api', app).fetch));
      await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
      const proxy = await cuttingProxy((server.address() as AddressInfo).port, 4);
      const api = new ApiClient({ url: `http://127.0.0.1:${proxy.port}`, token: '' });
      const stop = new AbortController();
      const got: Array<Record<string, unknown>> = [];
      const notes: string[] = [];
      const timer = setTimeout(() => stop.abort(), 10_000);
      try {
        await followEvents(api, 'w', {
          signal: stop.signal,
          since: new Date(T0 - 1).toISOString(),
          retryMs: 10,
          onNote: (t) => notes.push(t),
          onEvent: (j) => {
            got.push(j);
            if (tailEventKey(j as Parameters<typeof tailEventKey>[0]) === expected.at(-1)) stop.abort();
          },
        });
      } finally {
        clearTimeout(timer);
        hub.close();
        await api.close();
        await proxy.close();
        server.closeAllConnections();
        await new Promise((r) => server.close(r));
      }
      assert.equal(proxy.cuts(), 1, 'the first connection was cut');
      const resumed = notes.find((t) => t.includes('resuming after event s.'));
      assert.ok(resumed, `a reconnect with a backlog position: ${notes.join('; ')}`);
      assert.deepEqual(
        got.map((j) => tailEventKey(j as Parameters<typeof tailEventKey>[0])),
        expected,
      );
      assert.ok(got.length > 4, 'events came after the cut');
    });
  });
}

import assert from 'node:assert/strict';
import { afterEach, beforeEach, describe, it } from 'node:test';
import type { Agent } from 'undici';
import { DestinationGuard, type LookupAll } from '../../src/drain/destination-guard.js';
import { createDeliveryAgent, forward } from '../../src/drain/forward.js';
import { SETTINGS_FRESH_MS } from '../../src/drain/worker.js';
import {
  ANY_DESTINATION,
  PUBLIC_DESTINATIONS,
  parseDestinationPolicy,
  type DestinationPolicy,
} from '../../src/policy/destination-policy.js';
import { headerValues } from '../../src/policy/verify.js';
import { setSetting } from '../../src/settings/settings.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { drainBench, type DrainBench } from '../helpers/drain.js';
import { until } from '../helpers/until.js';

// The connect-time check of the `destinations` setting: a real worker, a real SQLite file and a
// real consumer on 127.0.0.1 port 0, driven pass by pass with a manual clock.

const policy = (text: string): DestinationPolicy => {
  const p = parseDestinationPolicy(text);
  if ('error' in p) throw new Error(p.error);
  return p;
};

describe('destinations setting at connect time (drain worker)', () => {
  let b: DrainBench;
  let consumer: Consumer;
  let guard: DestinationGuard;
  let agent: Agent;
  beforeEach(async () => {
    b = await drainBench();
    consumer = await startConsumer();
    guard = new DestinationGuard();
    agent = createDeliveryAgent({ destinations: guard });
  });
  afterEach(async () => {
    await b.close();
    await agent.close();
    await consumer.close();
  });

  const worker = () => b.worker({ dispatcher: agent, destinations: guard });

  it('public: a localhost consumer sees nothing, the attempt is destination_refused and retried; set back to any, the next attempt delivers without a restart', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/hooks`, drain: {} });
    await setSetting(b.store, 'destinations', 'public');
    const [id] = b.ingest('s', {});
    const w = worker();
    await w.runOnce();
    await w.settle();
    await w.runOnce();

    assert.equal(consumer.received.length, 0, 'nothing reached the consumer');
    const d = b.delivery(id!);
    assert.equal(d.state, 'retrying');
    const [a] = b.attempts(id!);
    assert.equal(a!.error_class, 'destination_refused');
    assert.equal(a!.reason, 'error_destination_refused');
    assert.equal(a!.outcome, 'retry');
    assert.equal(a!.status, null);
    assert.equal(
      a!.error_message,
      'destination_refused: destination refused: 127.0.0.1 is a loopback address (settings: destinations public)',
    );

    // The setting changes in the database; the worker reads it again within SETTINGS_FRESH_MS.
    await setSetting(b.store, 'destinations', 'any');
    b.clock.advance(Math.max(d.next_attempt_at - b.clock.now(), SETTINGS_FRESH_MS));
    await w.runOnce();
    await w.settle();
    await w.runOnce();
    assert.equal(b.delivery(id!).state, 'delivered');
    assert.equal(consumer.received.length, 1);
  });

  it('any (the default, nothing set): the localhost consumer is delivered to', async () => {
    await b.store.createBucket({ name: 's', destination: `${consumer.url}/hooks`, drain: {} });
    const [id] = b.ingest('s', {});
    const w = worker();
    await w.runOnce();
    await w.settle();
    await w.runOnce();
    assert.equal(b.delivery(id!).state, 'delivered');
    assert.equal(consumer.received.length, 1);
  });

  it('public: a host name resolving to loopback (localhost) is refused by its resolved address', async () => {
    const port = new URL(consumer.url).port;
    await b.store.createBucket({ name: 's', destination: `http://localhost:${port}/hooks`, drain: {} });
    await setSetting(b.store, 'destinations', 'public');
    const [id] = b.ingest('s', {});
    const w = worker();
    await w.runOnce();
    await w.settle();
    await w.runOnce();
    assert.equal(consumer.received.length, 0);
    const [a] = b.attempts(id!);
    assert.equal(a!.error_class, 'destination_refused');
    assert.match(a!.error_message, /^destination_refused: destination refused: localhost \((127\.0\.0\.1|::1)\) is a loopback address/);
  });
});

describe('DestinationGuard with forward()', () => {
  let consumer: Consumer;
  let guard: DestinationGuard;
  let agent: Agent;
  let lookups: string[];
  /** consumer.test and rebind.test resolve to 127.0.0.1 here only: the system resolver knows neither. */
  const lookup: LookupAll = (host, _options, callback) => {
    lookups.push(host);
    if (host === 'consumer.test') return callback(null, [{ address: '127.0.0.1', family: 4 }]);
    if (host === 'two.test')
      return callback(null, [
        { address: '93.184.216.34', family: 4 },
        { address: '127.0.0.1', family: 4 },
      ]);
    const e: NodeJS.ErrnoException = new Error(`getaddrinfo ENOTFOUND ${host}`);
    e.code = 'ENOTFOUND';
    callback(e, []);
  };
  beforeEach(async () => {
    consumer = await startConsumer();
    lookups = [];
    guard = new DestinationGuard({ lookup });
    agent = createDeliveryAgent({ destinations: guard });
  });
  afterEach(async () => {
    await agent.close();
    await consumer.close();
  });

  const send = (origin: string) =>
    forward(agent, { target: { origin, path: '/hooks' }, method: 'POST', headers: [], body: Buffer.from('x'), timeoutMs: 5000 });
  const port = () => new URL(consumer.url).port;

  it('a listed name connects to the address it was checked at (one lookup, no second one by the socket)', async () => {
    guard.update(policy('allow:consumer.test'));
    const res = await send(`http://consumer.test:${port()}`);
    assert.equal(res.kind, 'response', JSON.stringify(res));
    assert.equal(consumer.received.length, 1);
    assert.equal(headerValues(consumer.received[0]!.rawHeaders, 'host')[0], `consumer.test:${port()}`);
    assert.deepEqual(lookups, ['consumer.test']);
  });

  it('one refused address among those a name resolves to refuses the connection', async () => {
    guard.update(policy('allow:public'));
    const res = await send(`http://two.test:${port()}`);
    assert.equal(res.kind === 'error' && res.errorClass, 'destination_refused');
    assert.equal(res.kind === 'error' && res.code, 'destination_refused');
    assert.equal(
      res.kind === 'error' && res.message,
      'destination refused: two.test (127.0.0.1) is a loopback address (settings: destinations public)',
    );
    assert.equal(consumer.received.length, 0);
  });

  it('an IPv4-mapped IPv6 literal is judged as the IPv4 address it carries', async () => {
    guard.update(PUBLIC_DESTINATIONS);
    const res = await send(`http://[::ffff:127.0.0.1]:${port()}`);
    assert.equal(res.kind === 'error' && res.errorClass, 'destination_refused');
    assert.match(res.kind === 'error' ? res.message : '', /is a loopback address/);
  });

  it('a stricter setting closes the open keep-alive connection to a peer it refuses: the next attempt is judged, not sent on the pooled socket', async () => {
    assert.equal((await send(consumer.url)).kind, 'response');
    // The connection is back in the pool, idle, before the setting changes (else a new one would be made anyway).
    await until(() => (agent.stats[consumer.url] as { free?: number } | undefined)?.free === 1, 'the keep-alive connection to be idle');
    assert.equal(guard.update(PUBLIC_DESTINATIONS), true);
    assert.equal(guard.update(PUBLIC_DESTINATIONS), false, 'the same setting again changes nothing');
    const res = await send(consumer.url);
    assert.equal(res.kind === 'error' && res.errorClass, 'destination_refused');
    assert.equal(consumer.received.length, 1);
    guard.update(ANY_DESTINATION);
    assert.equal((await send(consumer.url)).kind, 'response');
    assert.equal(consumer.received.length, 2);
  });

  it('a name that does not resolve is a dns error, as without the setting', async () => {
    guard.update(PUBLIC_DESTINATIONS);
    const res = await send('http://nowhere.test:9');
    assert.equal(res.kind === 'error' && res.errorClass, 'dns');
  });
});

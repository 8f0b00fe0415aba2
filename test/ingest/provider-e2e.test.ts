/**
 * Issue 15's sender features end to end through the real binary: buckets made with `bucket create`,
 * one `serve` process (receiver and worker) on a real SQLite file, and again on a PostgreSQL
 * database of its own (when HOOKBUCKET_TEST_PG names a server), a real consumer on loopback, and
 * every check read back through the CLI (`requests list|show --json`, `stats --json`, `bucket show
 * --json`). test/ingest/verify.test.ts, handshake.test.ts and dedup.test.ts cover the same rules
 * in-process, case by case; this file checks that the binary wires them together.
 *
 * GitHub signatures come from @octokit/webhooks-methods. Slack ships no Node library for its request
 * signature, so it is computed here from Slack's documented algorithm: `v0=` + hex HMAC-SHA256 of
 * `v0:<X-Slack-Request-Timestamp>:<raw body>` with the signing secret.
 */
import assert from 'node:assert/strict';
import { createHmac } from 'node:crypto';
import { after, before, describe, it } from 'node:test';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { runCli } from '../helpers/cli.js';
import { startConsumer, type Consumer } from '../helpers/consumer.js';
import { createTestDatabase, PG_SKIP_REASON, pgTestServer } from '../helpers/pg-database.js';
import { tempDir } from '../helpers/temp-dir.js';
import { until } from '../helpers/until.js';
import { startServe, type ServeHandle } from '../reliability/lib/serve-process.js';

const GITHUB_SECRET = 'gh-e2e-webhook-secret';
const SLACK_SECRET = 'slack-e2e-signing-secret';

interface ListedRequest {
  id: string;
  state: string;
  disposition: string;
  verification: { scheme: string; result: string; reason: string } | null;
}

function slackSignature(body: string, ts: number, secret: string): Record<string, string> {
  return {
    'x-slack-request-timestamp': String(ts),
    'x-slack-signature': `v0=${createHmac('sha256', secret).update(`v0:${ts}:${body}`, 'utf8').digest('hex')}`,
  };
}

async function githubHeaders(delivery: string, body: string, secret: string): Promise<Record<string, string>> {
  return {
    'content-type': 'application/json',
    'x-github-event': 'pull_request',
    'x-github-delivery': delivery,
    'x-hub-signature-256': await githubSign(secret, body),
  };
}

const server = pgTestServer();

for (const dialect of ['sqlite', 'postgres'] as const) {
  describe(`provider-ready buckets through the real binary, ${dialect} (issue 15)`, {
    skip: dialect === 'postgres' && server === undefined ? PG_SKIP_REASON : false,
  }, () => {
    /** The --db target: a SQLite file, or a PostgreSQL database made for this suite. */
    let target = '';
    let removeTarget: () => unknown = () => undefined;
    let consumer: Consumer;
    let serve: ServeHandle;

    /** What the consumer received at one destination path (each bucket forwards to its own). */
    const receivedAt = (path: string) => consumer.received.filter((r) => r.url === path);

    async function cli(args: string[]) {
      const r = await runCli(['--db', target, ...args]);
      assert.equal(r.code, 0, `hookbucket ${args.join(' ')}: ${r.stderr}`);
      return r;
    }
    async function list(bucket: string, ...filters: string[]): Promise<ListedRequest[]> {
      return (await cli(['requests', 'list', bucket, ...filters, '--json'])).json<{ requests: ListedRequest[] }>().requests;
    }
    async function show(id: string): Promise<Record<string, any>> {
      return (await cli(['requests', 'show', id, '--json'])).json();
    }

    before(async () => {
      if (dialect === 'sqlite') {
        const t = tempDir('hookbucket-provider-e2e-');
        target = t.db;
        removeTarget = t.remove;
      } else {
        const database = await createTestDatabase(server!);
        target = database.url;
        removeTarget = () => database.drop();
      }
      consumer = await startConsumer({ status: 204 });
      await cli([
        'bucket',
        'create',
        'gh-reject',
        '--destination',
        `${consumer.url}/reject`,
        '--verify',
        'github',
        '--verify-secret',
        GITHUB_SECRET,
        '--on-invalid',
        'reject',
      ]);
      // The default --on-invalid (quarantine): a bad signature is stored but not answered as a handshake.
      await cli([
        'bucket',
        'create',
        'slack',
        '--destination',
        `${consumer.url}/slack`,
        '--verify',
        'slack',
        '--verify-secret',
        SLACK_SECRET,
      ]);
      await cli([
        'bucket',
        'create',
        'gh-dedup',
        '--destination',
        `${consumer.url}/dedup`,
        '--verify',
        'github',
        '--verify-secret',
        GITHUB_SECRET,
        '--dedup',
        'provider',
      ]);
      serve = await startServe({ db: target });
    });
    after(async () => {
      const exit = await serve?.proc.term();
      await consumer?.close();
      await removeTarget();
      assert.equal(exit?.code, 0, `serve exited ${exit?.code ?? exit?.signal}: ${serve?.proc.tail(20)}`);
    });

    it('--on-invalid reject: a bad or missing signature gets 401 with its code, nothing stored, counted by reason; a signed one is delivered', async () => {
      const body = JSON.stringify({ action: 'opened', number: 1, repository: { full_name: 'o/r' } });
      const forged = await fetch(`${serve.url}/b/gh-reject`, {
        method: 'POST',
        headers: await githubHeaders('11111111-aaaa-11e3-81ab-4c9367dc0958', body, 'guessed-secret'),
        body,
      });
      assert.equal(forged.status, 401);
      assert.match(forged.headers.get('content-type') ?? '', /^application\/json/);
      assert.deepEqual(await forged.json(), { error: 'the github signature does not verify', code: 'signature_invalid' });
      const unsigned = await fetch(`${serve.url}/b/gh-reject`, { method: 'POST', headers: { 'content-type': 'application/json' }, body });
      assert.equal(unsigned.status, 401);
      assert.equal(((await unsigned.json()) as { code: string }).code, 'signature_missing');

      assert.deepEqual(await list('gh-reject'), [], 'nothing stored');
      // Refusals are counted in the background: wait for both to reach the database.
      const want = { signature_invalid: 1, signature_missing: 1 };
      let rejected: unknown;
      await until(
        async () => {
          rejected = (await cli(['stats', 'gh-reject', '--json'])).json<{ rejected: unknown }>().rejected;
          return JSON.stringify(rejected) === JSON.stringify(want);
        },
        `stats counts the refusals by reason (last: ${JSON.stringify(rejected)})`,
      );
      const shown = (await cli(['bucket', 'show', 'gh-reject', '--json'])).json<{ rejections: unknown; requests: number }>();
      assert.deepEqual(shown.rejections, want);
      assert.equal(shown.requests, 0);

      const signed = await fetch(`${serve.url}/b/gh-reject`, {
        method: 'POST',
        headers: await githubHeaders('22222222-aaaa-11e3-81ab-4c9367dc0958', body, GITHUB_SECRET),
        body,
      });
      assert.equal(signed.status, 200);
      const { id } = (await signed.json()) as { id: string };
      await until(() => receivedAt('/reject').length === 1, 'the signed request reached the consumer');
      assert.equal(receivedAt('/reject')[0]!.body.toString('utf8'), body);
      await until(async () => (await list('gh-reject')).some((r) => r.id === id && r.state === 'delivered'), 'recorded delivered');
      const [stored] = await list('gh-reject');
      assert.equal(stored!.disposition, 'accepted');
      assert.deepEqual(stored!.verification, { scheme: 'github', result: 'verified', reason: 'signature_matched' });
      assert.equal((await list('gh-reject')).length, 1);
    });

    it('Slack url_verification: signed, the challenge is echoed and stored as a handshake, never delivered; badly signed, not echoed', async () => {
      const challenge = '3eZbrw1aBm2rZgRNFdxV2595E9CY3gmdALWMmHkvFXO7tYXAYM8P';
      const body = JSON.stringify({ token: 'Jhj5dZrVaK7ZwHHjRyZWjbDl', challenge, type: 'url_verification' });
      const now = Math.floor(Date.now() / 1000);

      const res = await fetch(`${serve.url}/b/slack`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...slackSignature(body, now, SLACK_SECRET) },
        body,
      });
      assert.equal(res.status, 200);
      assert.match(res.headers.get('content-type') ?? '', /^text\/plain/);
      assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
      assert.equal(await res.text(), challenge);

      // Stored after the answer: wait for it.
      let handshakes: ListedRequest[] = [];
      await until(async () => (handshakes = await list('slack', '--state', 'handshake')).length === 1, 'the handshake stored');
      const handshake = handshakes[0]!;
      assert.equal(handshake.disposition, 'handshake');
      assert.deepEqual(handshake.verification, { scheme: 'slack', result: 'verified', reason: 'signature_matched' });
      const shown = await show(handshake.id);
      assert.equal(shown.body, body);
      assert.deepEqual(shown.deliveries, [], 'a handshake has no delivery');

      // Signed with another secret, and unsigned: the bucket's normal ack (quarantine), no challenge.
      for (const headers of [slackSignature(body, now, 'not-the-signing-secret'), {}]) {
        const bad = await fetch(`${serve.url}/b/slack`, {
          method: 'POST',
          headers: { 'content-type': 'application/json', ...headers },
          body,
        });
        assert.equal(bad.status, 200);
        const text = await bad.text();
        assert.ok(!text.includes(challenge), `the challenge is not echoed: ${text}`);
        const { id } = JSON.parse(text) as { id: string };
        const q = await show(id);
        assert.equal(q.disposition, 'quarantined');
        assert.deepEqual(q.deliveries, []);
      }
      assert.equal((await list('slack', '--state', 'quarantined')).length, 2);
      assert.equal((await list('slack', '--state', 'handshake')).length, 1);

      // A signed event after it is delivered; by then the handshake (stored first, without a
      // delivery) has still not reached the consumer: only the event did.
      const event = JSON.stringify({ type: 'event_callback', event_id: 'Ev0E2E', event: { type: 'app_mention' } });
      const sent = await fetch(`${serve.url}/b/slack`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...slackSignature(event, now, SLACK_SECRET) },
        body: event,
      });
      assert.equal(sent.status, 200);
      const { id: eventId } = (await sent.json()) as { id: string };
      await until(async () => (await list('slack', '--state', 'delivered')).some((r) => r.id === eventId), 'the event delivered');
      assert.deepEqual(
        receivedAt('/slack').map((r) => r.body.toString('utf8')),
        [event],
      );
    });

    it('--dedup provider: three concurrent copies of one GitHub delivery all get 2xx, one reaches the consumer, two are duplicates of it', async () => {
      const body = JSON.stringify({ action: 'closed', number: 7, repository: { full_name: 'o/r' } });
      const delivery = '72d3162e-cc78-11e3-81ab-4c9367dc0958';
      const headers = await githubHeaders(delivery, body, GITHUB_SECRET);
      const answers = await Promise.all([0, 1, 2].map(() => fetch(`${serve.url}/b/gh-dedup`, { method: 'POST', headers, body })));
      assert.deepEqual(
        answers.map((a) => a.status),
        [200, 200, 200],
      );
      const ids = await Promise.all(answers.map(async (a) => ((await a.json()) as { id: string }).id));
      assert.equal(new Set(ids).size, 3, 'three requests stored');

      await until(() => receivedAt('/dedup').length >= 1, 'one copy reached the consumer');
      // Then until all three are listed and the delivered one is settled: the other two have no
      // delivery row, so nothing is left that could still reach the consumer.
      let rows: ListedRequest[] = [];
      await until(async () => {
        rows = await list('gh-dedup');
        return rows.length === 3 && rows.some((r) => r.state === 'delivered');
      }, 'three requests listed, one delivered');
      const accepted = rows.filter((r) => r.disposition === 'accepted');
      const duplicates = rows.filter((r) => r.disposition === 'duplicate');
      assert.equal(accepted.length, 1);
      assert.equal(duplicates.length, 2);
      assert.equal(accepted[0]!.state, 'delivered');
      for (const d of duplicates) assert.equal(d.state, 'duplicate');

      const original = await show(accepted[0]!.id);
      assert.equal(original.dedup_key, `h:${delivery}`);
      assert.equal(original.deliveries.length, 1);
      assert.equal(original.deliveries[0].state, 'delivered');
      for (const d of duplicates) {
        const dup = await show(d.id);
        assert.equal(dup.duplicate_of, accepted[0]!.id);
        assert.deepEqual(dup.deliveries, []);
        const text = (await cli(['requests', 'show', d.id])).text;
        assert.ok(text.includes(`duplicate of ${accepted[0]!.id}`), text);
      }
      assert.equal(receivedAt('/dedup').length, 1, 'exactly one copy delivered');
      assert.equal(receivedAt('/dedup')[0]!.body.toString('utf8'), body);
    });
  });
}

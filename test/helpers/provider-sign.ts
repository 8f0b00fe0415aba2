/**
 * Signing a request the way each provider signs it, for ingest tests. The providers' own Node
 * libraries sign where they ship one (stripe, @octokit/webhooks-methods, standardwebhooks); for
 * Shopify, Slack, Zoom, Meta, Dropbox, X and the generic scheme no Node library exists, so the
 * signature is computed here from the provider's documented algorithm.
 */
import { createHmac, randomBytes } from 'node:crypto';
import { sign as githubSign } from '@octokit/webhooks-methods';
import { Webhook } from 'standardwebhooks';
import Stripe from 'stripe';

const hmac = (alg: 'sha256' | 'sha1', key: string, data: string) => createHmac(alg, key).update(data, 'utf8');

export interface SchemeCase {
  scheme: string;
  secret: string;
  other: string;
  /** Raw headers [name, value, …] signing `payload` at `ts` (seconds) with `secret`. */
  sign: (payload: string, ts: number, secret: string) => Promise<string[]> | string[];
  /** Whether the scheme applies a timestamp tolerance (so an old signature is `expired`). */
  expires: boolean;
}

export const standardSecret = () => `whsec_${randomBytes(32).toString('base64')}`;

export const schemeCases: SchemeCase[] = [
  {
    scheme: 'stripe',
    secret: 'whsec_test_secret_one',
    other: 'whsec_test_secret_two',
    sign: (p, ts, s) => ['Stripe-Signature', Stripe.webhooks.generateTestHeaderString({ payload: p, secret: s, timestamp: ts })],
    expires: true,
  },
  {
    scheme: 'github',
    secret: 'gh-secret',
    other: 'gh-other',
    sign: async (p, _ts, s) => ['X-GitHub-Delivery', 'd-1', 'X-Hub-Signature-256', await githubSign(s, p)],
    expires: false,
  },
  {
    // Meta documents X-Hub-Signature-256 as sha256=<hex HMAC-SHA256 of the payload with the app secret>.
    scheme: 'meta',
    secret: 'app-secret',
    other: 'app-other',
    sign: (p, _ts, s) => ['X-Hub-Signature-256', `sha256=${hmac('sha256', s, p).digest('hex')}`],
    expires: false,
  },
  {
    // Shopify: base64 HMAC-SHA256 of the raw body with the app's client secret.
    scheme: 'shopify',
    secret: 'shpss_1',
    other: 'shpss_2',
    sign: (p, _ts, s) => ['X-Shopify-Hmac-Sha256', hmac('sha256', s, p).digest('base64')],
    expires: false,
  },
  {
    // Slack: v0=<hex HMAC-SHA256 of "v0:<timestamp>:<body>"> with the signing secret.
    scheme: 'slack',
    secret: 'slack-signing',
    other: 'slack-other',
    sign: (p, ts, s) => [
      'X-Slack-Request-Timestamp',
      String(ts),
      'X-Slack-Signature',
      `v0=${hmac('sha256', s, `v0:${ts}:${p}`).digest('hex')}`,
    ],
    expires: true,
  },
  {
    scheme: 'standard',
    secret: standardSecret(),
    other: standardSecret(),
    sign: (p, ts, s) => [
      'webhook-id',
      'msg_2a',
      'webhook-timestamp',
      String(ts),
      'webhook-signature',
      new Webhook(s).sign('msg_2a', new Date(ts * 1000), p),
    ],
    expires: true,
  },
  {
    // Zoom: x-zm-signature v0=<hex HMAC-SHA256 of "v0:<x-zm-request-timestamp>:<body>"> with the secret token.
    scheme: 'zoom',
    secret: 'zoom-token',
    other: 'zoom-other',
    sign: (p, ts, s) => zoomHeaders(p, ts, s),
    expires: false,
  },
  {
    // Dropbox: X-Dropbox-Signature, hex HMAC-SHA256 of the body with the app secret.
    scheme: 'dropbox',
    secret: 'dbx-secret',
    other: 'dbx-other',
    sign: (p, _ts, s) => ['X-Dropbox-Signature', hmac('sha256', s, p).digest('hex')],
    expires: false,
  },
  {
    // X: x-twitter-webhooks-signature sha256=<base64 HMAC-SHA256 of the body with the consumer secret>.
    scheme: 'twitter',
    secret: 'consumer-secret',
    other: 'consumer-other',
    sign: (p, _ts, s) => ['x-twitter-webhooks-signature', `sha256=${hmac('sha256', s, p).digest('base64')}`],
    expires: false,
  },
  {
    scheme: 'hmac:X-Signature:sha1:hex:sha1=',
    secret: 'generic',
    other: 'generic-2',
    sign: (p, _ts, s) => ['X-Signature', `sha1=${hmac('sha1', s, p).digest('hex')}`],
    expires: false,
  },
];

export function zoomHeaders(payload: string, ts: number, secret: string): string[] {
  return ['x-zm-request-timestamp', String(ts), 'x-zm-signature', `v0=${hmac('sha256', secret, `v0:${ts}:${payload}`).digest('hex')}`];
}

export function slackHeaders(payload: string, ts: number, secret: string): string[] {
  return [
    'X-Slack-Request-Timestamp',
    String(ts),
    'X-Slack-Signature',
    `v0=${hmac('sha256', secret, `v0:${ts}:${payload}`).digest('hex')}`,
  ];
}

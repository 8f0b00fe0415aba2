/**
 * The connect-time half of the `destinations` setting (src/policy/destination-policy.ts): an undici
 * connector that judges every new connection of the delivery agent before a byte is sent.
 *
 * - An IP literal host is judged as it is (net.connect does no lookup for one).
 * - A host name is resolved here, by a `lookup` handed to net/tls.connect: every address getaddrinfo
 *   returns is judged, and one refused address refuses the connection (DNS, not us, would pick which
 *   one is used). The socket then connects to the addresses this lookup returned, so what was
 *   checked is what is connected to: no second lookup a rebinding DNS server could answer
 *   differently. TLS still verifies the certificate against the host name (servername).
 * - A refusal fails the connection with an error whose code is `destination_refused`: forward()
 *   returns it as a transport error of that class, and the attempt row keeps the message.
 *
 * The setting is read by the worker (every SETTINGS_FRESH_MS) and handed to update(); with `any`
 * (the default) the connector is undici's own, and each connection it makes is only noted: a
 * stricter setting closes the open keep-alive connections whose peer it now refuses, so a pooled
 * connection does not outlive it.
 */
import { lookup as dnsLookup, type LookupAddress, type LookupAllOptions } from 'node:dns';
import type { Socket } from 'node:net';
import { buildConnector } from 'undici';
import {
  ANY_DESTINATION,
  formatDestinationPolicy,
  judgeAddress,
  judgeAddresses,
  parseIp,
  type DestinationPolicy,
  type Judgement,
} from '../policy/destination-policy.js';

export const DESTINATION_REFUSED = 'destination_refused';

/** forward() reads its code (the attempt's error class) and message (the attempt's evidence). */
class DestinationRefusedError extends Error {
  readonly code = DESTINATION_REFUSED;
  constructor(j: Extract<Judgement, { allowed: false }>) {
    super(j.message);
    this.name = 'DestinationRefusedError';
  }
}

/** getaddrinfo with `all: true`, as node:dns.lookup; tests pass a resolver of their own. */
export type LookupAll = (
  hostname: string,
  options: LookupAllOptions,
  callback: (err: NodeJS.ErrnoException | null, addresses: LookupAddress[]) => void,
) => void;

/** What net.connect hands a custom `lookup` (its `all` depends on autoSelectFamily). */
type NetLookupCallback = (err: NodeJS.ErrnoException | null, address: string | LookupAddress[], family?: number) => void;

export class DestinationGuard {
  #policy: DestinationPolicy = ANY_DESTINATION;
  #text = 'any';
  readonly #lookupAll: LookupAll;
  /** Open connections with the host name they were made for (undefined: an IP literal). */
  readonly #sockets = new Map<Socket, string | undefined>();

  constructor(options: { lookup?: LookupAll } = {}) {
    this.#lookupAll = options.lookup ?? ((h, o, cb) => dnsLookup(h, o, cb));
  }

  /**
   * Applies a setting from the next connection on; returns true when it differs from the one in
   * force. Open connections to peers the new setting refuses are destroyed (an attempt on one
   * fails as a reset and is retried on its schedule; the new connection is judged).
   */
  update(policy: DestinationPolicy): boolean {
    const text = formatDestinationPolicy(policy);
    if (text === this.#text) return false;
    this.#policy = policy;
    this.#text = text;
    if (policy.kind !== 'any') {
      for (const [socket, host] of this.#sockets) {
        const peer = socket.remoteAddress;
        if (peer !== undefined && !judgeAddress(peer, policy, host).allowed) socket.destroy();
      }
    }
    return true;
  }

  /** A connector for undici's `connect` option: undici's own, behind the checks above. */
  connector(options: buildConnector.BuildOptions): buildConnector.connector {
    const plain = buildConnector(options);
    const pinned = buildConnector({ ...options, lookup: this.#lookup } as buildConnector.BuildOptions);
    return (opts, callback) => {
      const policy = this.#policy;
      const host = opts.hostname;
      const literal = parseIp(host) !== undefined;
      const done: buildConnector.Callback = (err, socket) => {
        if (err === null && socket) this.#track(socket as Socket, literal ? undefined : host);
        (callback as (e: Error | null, s: unknown) => void)(err, socket);
      };
      if (policy.kind === 'any') return plain(opts, done);
      if (literal) {
        const j = judgeAddress(host, policy);
        if (!j.allowed) {
          queueMicrotask(() => callback(new DestinationRefusedError(j), null));
          return;
        }
        return plain(opts, done);
      }
      return pinned(opts, done);
    };
  }

  #track(socket: Socket, host: string | undefined): void {
    this.#sockets.set(socket, host);
    socket.once('close', () => this.#sockets.delete(socket));
  }

  /** net.connect's lookup: resolve every address, judge them all, hand back only what was judged. */
  readonly #lookup = (hostname: string, options: { family?: number; hints?: number; all?: boolean }, callback: NetLookupCallback) => {
    const family = options.family === 4 || options.family === 6 ? options.family : 0;
    this.#lookupAll(hostname, { family, all: true, ...(options.hints !== undefined ? { hints: options.hints } : {}) }, (err, addresses) => {
      if (err) return callback(err, options.all ? [] : '', undefined);
      const j = judgeAddresses(
        addresses.map((a) => a.address),
        this.#policy,
        hostname,
      );
      if (!j.allowed) return callback(new DestinationRefusedError(j), options.all ? [] : '', undefined);
      if (addresses.length === 0) {
        const e: NodeJS.ErrnoException = new Error(`getaddrinfo ENOTFOUND ${hostname}`);
        e.code = 'ENOTFOUND';
        return callback(e, options.all ? [] : '', undefined);
      }
      if (options.all) return callback(null, addresses);
      callback(null, addresses[0]!.address, addresses[0]!.family);
    });
  };
}

/**
 * Which addresses a delivery may connect to: the `destinations` setting (`hookbucket settings set
 * destinations …`), parsed and judged. Pure: addresses come in as text, already resolved; the DNS
 * lookups and the sockets are in src/options/destination-check.ts (create time) and
 * src/drain/destination-guard.ts (connect time).
 *
 * - `any` (the default): no check, so consumers on localhost and private networks keep working.
 * - `public`: only globally reachable unicast addresses. Refused, each with its reason word: this
 *   network and `::` (`unspecified`), loopback, private (RFC 1918), CGNAT (RFC 6598), link-local,
 *   unique-local (fc00::/7), cloud metadata (169.254.169.254, fd00:ec2::254), multicast, broadcast,
 *   and every other special-purpose block of the IANA registries (`reserved`: documentation,
 *   benchmarking, 240/4, IETF protocol assignments, 6to4, anything outside 2000::/3).
 * - `allow:<entry>,…`: only what is listed. An entry is a CIDR (`10.0.0.0/8`, `fd12::/16`), one
 *   address, a host name (`consumer.internal`, matched exactly) or every name under a domain
 *   (`*.svc.internal`), or the word `public` (every public address, as above). So
 *   `allow:public,consumer.internal` is "public, and my internal consumer too".
 *
 * IPv4-mapped IPv6 (::ffff:0:0/96) is judged as the IPv4 address it embeds, everywhere (a listed
 * 10.0.0.0/8 allows ::ffff:10.1.2.3; ::ffff:127.0.0.1 is loopback); so is NAT64 (64:ff9b::/96) for
 * its kind. A metadata address is refused under every setting but `any`, even behind a listed host
 * name, unless a listed CIDR or address contains it.
 */

export type AddressKind =
  | 'public'
  | 'unspecified'
  | 'loopback'
  | 'private'
  | 'cgnat'
  | 'link_local'
  | 'unique_local'
  | 'metadata'
  | 'multicast'
  | 'broadcast'
  | 'reserved';

/** Why an address is refused: its kind, or `not_listed` (a public address under an allow-list without `public`). */
export type RefusalReason = Exclude<AddressKind, 'public'> | 'not_listed';

export interface Ip {
  version: 4 | 6;
  /** The address as an unsigned integer of 32 or 128 bits. */
  value: bigint;
}

export interface Network extends Ip {
  prefix: number;
}

export type DestinationPolicy =
  | { kind: 'any' }
  | {
      kind: 'allow';
      /** Every public address is allowed. */
      public: boolean;
      networks: readonly Network[];
      /** Lower-case names; `*.example.com` matches every name under example.com, not example.com itself. */
      hosts: readonly string[];
    };

export const ANY_DESTINATION: DestinationPolicy = Object.freeze({ kind: 'any' });
export const PUBLIC_DESTINATIONS: DestinationPolicy = Object.freeze({ kind: 'allow', public: true, networks: [], hosts: [] });

export type Judgement = { allowed: true } | { allowed: false; reason: RefusalReason; message: string };

const bitsOf = (v: 4 | 6) => (v === 4 ? 32 : 128);

/** Dotted-quad IPv4, four decimal parts without leading zeros (WHATWG URL and getaddrinfo give this form). */
function parseIpv4(text: string): bigint | undefined {
  const parts = text.split('.');
  if (parts.length !== 4) return undefined;
  let value = 0n;
  for (const p of parts) {
    if (!/^(0|[1-9]\d{0,2})$/.test(p) || Number(p) > 255) return undefined;
    value = (value << 8n) | BigInt(p);
  }
  return value;
}

function parseIpv6(text: string): bigint | undefined {
  let t = text;
  const zone = t.indexOf('%'); // fe80::1%eth0: the zone names an interface, not part of the address
  if (zone !== -1) t = t.slice(0, zone);
  if (t.length === 0 || t.length > 45) return undefined;
  let groups: number[] = [];
  let tail = t;
  let v4: bigint | undefined;
  const lastColon = t.lastIndexOf(':');
  if (t.slice(lastColon + 1).includes('.')) {
    v4 = parseIpv4(t.slice(lastColon + 1));
    if (v4 === undefined) return undefined;
    // '::1.2.3.4' keeps its '::'; 'a:b:…:1.2.3.4' loses its last ':'.
    tail = t.endsWith(`::${t.slice(lastColon + 1)}`) ? t.slice(0, lastColon + 1) : t.slice(0, lastColon);
  }
  const wanted = v4 === undefined ? 8 : 6;
  const parseGroups = (s: string): number[] | undefined => {
    if (s === '') return [];
    const out: number[] = [];
    for (const g of s.split(':')) {
      if (!/^[0-9a-fA-F]{1,4}$/.test(g)) return undefined;
      out.push(Number.parseInt(g, 16));
    }
    return out;
  };
  const gap = tail.indexOf('::');
  if (gap !== -1) {
    if (tail.indexOf('::', gap + 1) !== -1) return undefined;
    const head = parseGroups(tail.slice(0, gap));
    const rest = parseGroups(tail.slice(gap + 2));
    if (head === undefined || rest === undefined || head.length + rest.length > wanted - 1) return undefined;
    groups = [...head, ...new Array<number>(wanted - head.length - rest.length).fill(0), ...rest];
  } else {
    const all = parseGroups(tail);
    if (all === undefined || all.length !== wanted) return undefined;
    groups = all;
  }
  let value = 0n;
  for (const g of groups) value = (value << 16n) | BigInt(g);
  if (v4 !== undefined) value = (value << 32n) | v4;
  return value;
}

/** An IPv4 or IPv6 address (brackets allowed, a zone ignored); undefined when the text is not one. */
export function parseIp(text: string): Ip | undefined {
  const t = text.startsWith('[') && text.endsWith(']') ? text.slice(1, -1) : text;
  const v4 = parseIpv4(t);
  if (v4 !== undefined) return { version: 4, value: v4 };
  if (!t.includes(':')) return undefined;
  const v6 = parseIpv6(t);
  return v6 === undefined ? undefined : { version: 6, value: v6 };
}

/** `10.0.0.0/8`, `fd00::/8`, or one address (a /32 or /128). Host bits set are refused: `10.0.0.1/8` is a typo more often than not. */
export function parseNetwork(text: string): Network | undefined {
  const slash = text.indexOf('/');
  const ip = parseIp(slash === -1 ? text : text.slice(0, slash));
  if (ip === undefined) return undefined;
  const bits = bitsOf(ip.version);
  if (slash === -1) return { ...ip, prefix: bits };
  const p = text.slice(slash + 1);
  if (!/^(0|[1-9]\d{0,2})$/.test(p) || Number(p) > bits) return undefined;
  const prefix = Number(p);
  const hostBits = BigInt(bits - prefix);
  if ((ip.value & ((1n << hostBits) - 1n)) !== 0n) return undefined;
  return { ...ip, prefix };
}

export function inNetwork(ip: Ip, net: Network): boolean {
  if (ip.version !== net.version) return false;
  const shift = BigInt(bitsOf(ip.version) - net.prefix);
  return ip.value >> shift === net.value >> shift;
}

function net(text: string): Network {
  const n = parseNetwork(text);
  if (n === undefined) throw new Error(`bad built-in network ${text}`);
  return n;
}

/** ::ffff:0:0/96 */
const MAPPED = net('::ffff:0:0/96');
/** 64:ff9b::/96, NAT64's well-known prefix (RFC 6052): the embedded IPv4 address decides the kind. */
const NAT64 = net('64:ff9b::/96');

/** Special-purpose blocks, most specific first (the first match names the kind). */
const V4_BLOCKS: ReadonlyArray<[Network, AddressKind]> = [
  [net('169.254.169.254/32'), 'metadata'], // AWS, GCP, Azure, OpenStack instance metadata
  [net('255.255.255.255/32'), 'broadcast'],
  [net('0.0.0.0/8'), 'unspecified'], // "this network" (RFC 791); 0.0.0.0 reaches the local host on Linux
  [net('10.0.0.0/8'), 'private'],
  [net('100.64.0.0/10'), 'cgnat'], // RFC 6598 shared address space
  [net('127.0.0.0/8'), 'loopback'],
  [net('169.254.0.0/16'), 'link_local'],
  [net('172.16.0.0/12'), 'private'],
  [net('192.0.0.0/24'), 'reserved'], // IETF protocol assignments
  [net('192.0.2.0/24'), 'reserved'], // TEST-NET-1
  [net('192.88.99.0/24'), 'reserved'], // 6to4 relay anycast (deprecated)
  [net('192.168.0.0/16'), 'private'],
  [net('198.18.0.0/15'), 'reserved'], // benchmarking
  [net('198.51.100.0/24'), 'reserved'], // TEST-NET-2
  [net('203.0.113.0/24'), 'reserved'], // TEST-NET-3
  [net('224.0.0.0/4'), 'multicast'],
  [net('240.0.0.0/4'), 'reserved'], // future use
];

const V6_BLOCKS: ReadonlyArray<[Network, AddressKind]> = [
  [net('fd00:ec2::254/128'), 'metadata'], // AWS instance metadata over IPv6
  [net('::/128'), 'unspecified'],
  [net('::1/128'), 'loopback'],
  [net('fc00::/7'), 'unique_local'],
  [net('fe80::/10'), 'link_local'],
  [net('ff00::/8'), 'multicast'],
  [net('64:ff9b:1::/48'), 'private'], // local-use NAT64 (RFC 8215)
  [net('100::/64'), 'reserved'], // discard-only
  [net('2001::/23'), 'reserved'], // IETF protocol assignments (Teredo included)
  [net('2001:db8::/32'), 'reserved'], // documentation
  [net('2002::/16'), 'reserved'], // 6to4: the IPv4 relay it implies is not judged, so refused
  [net('3fff::/20'), 'reserved'], // documentation (RFC 9637)
];
const GLOBAL_UNICAST = net('2000::/3');

/** The IPv4 address an IPv4-mapped IPv6 address carries; the address itself otherwise. */
export function unmapped(ip: Ip): Ip {
  return inNetwork(ip, MAPPED) ? { version: 4, value: ip.value & 0xffffffffn } : ip;
}

/** What kind of address this is (the embedded IPv4 address of a mapped or NAT64 one decides). */
export function addressKind(address: Ip): AddressKind {
  let ip = unmapped(address);
  if (ip.version === 6 && inNetwork(ip, NAT64)) ip = { version: 4, value: ip.value & 0xffffffffn };
  if (ip.version === 4) return V4_BLOCKS.find(([n]) => inNetwork(ip, n))?.[1] ?? 'public';
  const block = V6_BLOCKS.find(([n]) => inNetwork(ip, n));
  if (block) return block[1];
  return inNetwork(ip, GLOBAL_UNICAST) ? 'public' : 'reserved';
}

/** A host name as written in a URL: lower case, without a trailing dot. */
export function normalHost(host: string): string {
  return host.toLowerCase().replace(/\.$/, '');
}

export function hostListed(host: string, hosts: readonly string[]): boolean {
  const h = normalHost(host);
  return hosts.some((p) => (p.startsWith('*.') ? h.endsWith(p.slice(1)) && h.length > p.length - 1 : h === p));
}

const KIND_TEXT: Record<RefusalReason, string> = {
  unspecified: 'an unspecified ("this network") address',
  loopback: 'a loopback address',
  private: 'a private-network address',
  cgnat: 'a carrier-grade NAT (100.64.0.0/10) address',
  link_local: 'a link-local address',
  unique_local: 'a unique-local IPv6 address',
  metadata: 'a cloud metadata address',
  multicast: 'a multicast address',
  broadcast: 'the broadcast address',
  reserved: 'a reserved special-purpose address',
  not_listed: 'not on the allow-list',
};

/**
 * May a delivery connect to `address` (text, as DNS or the URL gave it)? `host` is the URL's host
 * name when it has one (not an IP literal): a listed name allows the addresses it resolves to.
 * An address that does not parse is refused as `reserved` (nothing to judge it by).
 */
export function judgeAddress(address: string, policy: DestinationPolicy, host?: string): Judgement {
  if (policy.kind === 'any') return { allowed: true };
  const parsed = parseIp(address);
  if (parsed === undefined) return refuse('reserved', `${address} is not an IP address`, policy);
  const ip = unmapped(parsed);
  if (policy.networks.some((n) => inNetwork(ip, n) || inNetwork(parsed, n))) return { allowed: true };
  const kind = addressKind(ip);
  const shown = host === undefined ? address : `${host} (${address})`;
  if (kind === 'metadata') return refuse(kind, `${shown} is ${KIND_TEXT.metadata}`, policy);
  if (host !== undefined && hostListed(host, policy.hosts)) return { allowed: true };
  if (kind === 'public') return policy.public ? { allowed: true } : refuse('not_listed', `${shown} is ${KIND_TEXT.not_listed}`, policy);
  return refuse(kind, `${shown} is ${KIND_TEXT[kind]}`, policy);
}

/** The setting is formatted for the message only here: an allowed address (every connection's case) costs no formatting. */
function refuse(reason: RefusalReason, what: string, policy: DestinationPolicy): Judgement {
  return { allowed: false, reason, message: `destination refused: ${what} (settings: destinations ${formatDestinationPolicy(policy)})` };
}

/** Every address must be allowed (a name that resolves to one refused address is refused: DNS picks the address, not us). */
export function judgeAddresses(addresses: readonly string[], policy: DestinationPolicy, host?: string): Judgement {
  for (const a of addresses) {
    const j = judgeAddress(a, policy, host);
    if (!j.allowed) return j;
  }
  return { allowed: true };
}

const HOST_NAME = /^(\*\.)?([a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)(\.[a-z0-9_]([a-z0-9_-]{0,61}[a-z0-9_])?)*$/;

/**
 * `any`, `public`, or `allow:<entry>,…` (see the top of this file); whitespace around entries is
 * ignored, names are lower-cased. An error message for anything else.
 */
export function parseDestinationPolicy(text: string): DestinationPolicy | { error: string } {
  const t = text.trim();
  if (t.toLowerCase() === 'any') return ANY_DESTINATION;
  if (t.toLowerCase() === 'public') return PUBLIC_DESTINATIONS;
  if (!t.toLowerCase().startsWith('allow:')) {
    return {
      error: `expected any, public or allow:<CIDR, address or host name>,… (like allow:public,10.0.0.0/8,consumer.internal), got ${JSON.stringify(text)}`,
    };
  }
  const entries = t
    .slice('allow:'.length)
    .split(',')
    .map((e) => e.trim())
    .filter((e) => e !== '');
  if (entries.length === 0) return { error: 'allow: lists nothing; name CIDRs, addresses, host names or public (any turns the check off)' };
  let isPublic = false;
  const networks: Network[] = [];
  const hosts: string[] = [];
  for (const entry of entries) {
    const lower = entry.toLowerCase();
    if (lower === 'public') {
      isPublic = true;
      continue;
    }
    if (/^[\d.]+(\/\d+)?$/.test(lower) || lower.includes(':')) {
      const n = parseNetwork(lower);
      if (n === undefined)
        return {
          error: `${JSON.stringify(entry)} is not a CIDR or address (like 10.0.0.0/8, 192.168.1.10, fd00::/8; host bits must be zero)`,
        };
      networks.push(n);
      continue;
    }
    const name = normalHost(lower);
    if (name.length > 253 || !HOST_NAME.test(name))
      return { error: `${JSON.stringify(entry)} is not a host name, CIDR, address or public` };
    hosts.push(name);
  }
  return { kind: 'allow', public: isPublic, networks, hosts };
}

function formatIp(ip: Ip): string {
  if (ip.version === 4) return [24n, 16n, 8n, 0n].map((s) => String((ip.value >> s) & 0xffn)).join('.');
  const groups: string[] = [];
  for (let i = 7; i >= 0; i--) groups.push(((ip.value >> BigInt(i * 16)) & 0xffffn).toString(16));
  // The longest run of two or more zero groups becomes '::' (RFC 5952).
  let best = { at: -1, len: 0 };
  for (let i = 0; i < 8; ) {
    if (groups[i] !== '0') {
      i++;
      continue;
    }
    let j = i;
    while (j < 8 && groups[j] === '0') j++;
    if (j - i > best.len && j - i >= 2) best = { at: i, len: j - i };
    i = j;
  }
  if (best.at === -1) return groups.join(':');
  return `${groups.slice(0, best.at).join(':')}::${groups.slice(best.at + best.len).join(':')}`;
}

export function formatNetwork(n: Network): string {
  return n.prefix === bitsOf(n.version) ? formatIp(n) : `${formatIp(n)}/${n.prefix}`;
}

/** The inverse of parseDestinationPolicy, in a stable form: `public` first, then networks, then names. */
export function formatDestinationPolicy(p: DestinationPolicy): string {
  if (p.kind === 'any') return 'any';
  if (p.public && p.networks.length === 0 && p.hosts.length === 0) return 'public';
  return `allow:${[...(p.public ? ['public'] : []), ...p.networks.map(formatNetwork), ...p.hosts].join(',')}`;
}

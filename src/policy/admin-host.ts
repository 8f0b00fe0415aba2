/**
 * The admin listener's `Host` allow-list, against DNS rebinding: a page on an attacker's name
 * (`evil.example`) that re-resolves to 127.0.0.1 reaches the admin port from the victim's browser
 * as same-origin, but its requests still say `Host: evil.example`. Only names the operator
 * expects are answered, on loopback too. An IP literal cannot be rebound, a DNS name can: names
 * other than `localhost` come only from `--admin-host-name`.
 */
export interface HostAllowList {
  /** Lower-case names and IP literals (IPv6 in brackets), accepted without a port or with `port`. */
  readonly names: ReadonlySet<string>;
  /** Entries given with their own port (`name:port`), accepted exactly. */
  readonly exact: ReadonlySet<string>;
  /** The port the admin listener bound; `name:port` with any other port is refused. */
  readonly port: number | undefined;
}

/** The names that always reach a local listener. */
const LOCAL_NAMES = ['localhost', '127.0.0.1', '[::1]'];

/** IPv6 literals in Host are bracketed; a bare `::1` from an address list gets its brackets here. */
export function hostLiteral(address: string): string {
  const a = address.toLowerCase();
  return a.includes(':') && !a.startsWith('[') ? `[${a}]` : a;
}

/**
 * The allow-list for a listener bound to `bindHost` on `port`: localhost, 127.0.0.1 and [::1];
 * the bound address unless it is a wildcard (0.0.0.0 or ::), in which case the addresses of this
 * host's interfaces (`interfaceAddresses`, passed in); and the operator's `extraNames`.
 */
export function hostAllowList(o: {
  bindHost: string;
  port: number | undefined;
  extraNames: readonly string[];
  interfaceAddresses?: readonly string[];
}): HostAllowList {
  const names = new Set(LOCAL_NAMES);
  const exact = new Set<string>();
  const wildcard = o.bindHost === '0.0.0.0' || o.bindHost === '::' || o.bindHost === '[::]';
  if (!wildcard) names.add(hostLiteral(o.bindHost));
  else for (const a of o.interfaceAddresses ?? []) names.add(hostLiteral(a.replace(/%.*$/, '')));
  for (const n of o.extraNames) {
    const lower = n.toLowerCase();
    if (splitHost(lower).port !== undefined) exact.add(lower);
    else names.add(lower);
  }
  return { names, exact, port: o.port };
}

/** `name[:port]` or `[v6][:port]` → its parts; undefined for a value that is neither. */
export function splitHost(host: string): { name: string; port: string | undefined } {
  if (host.startsWith('[')) {
    const end = host.indexOf(']');
    if (end < 0) return { name: host, port: undefined };
    const rest = host.slice(end + 1);
    return { name: host.slice(0, end + 1), port: rest.startsWith(':') ? rest.slice(1) : undefined };
  }
  const colon = host.lastIndexOf(':');
  return colon < 0 ? { name: host, port: undefined } : { name: host.slice(0, colon), port: host.slice(colon + 1) };
}

/** Whether a `Host` header value is on the list: a listed name alone or with the bound port, or an exact `name:port` entry. */
export function isAllowedHost(host: string | undefined, list: HostAllowList): boolean {
  if (host === undefined || host === '') return false;
  const h = host.toLowerCase();
  if (list.exact.has(h)) return true;
  const { name, port } = splitHost(h);
  if (!list.names.has(name)) return false;
  return port === undefined || (list.port !== undefined && port === String(list.port));
}

// The address rule for webhook deliveries: the same rule as file_url fetching (no loopback, private,
// link-local, metadata, CGNAT, multicast, reserved or otherwise internal address), decided by the
// document fetcher's own table (src/documents/addresses.ts), unless the operator allow-listed the
// host. `AddressCheck` is all the deliverer knows.
//
// What the customer reads about a refusal is generic ("address not allowed", "DNS lookup failed"):
// the resolved addresses and the resolver's own words name the network the deliverer runs in, so
// they go to the server log only (`AddressRefused.detail`).
import { lookup } from 'node:dns/promises';
import { isIP } from 'node:net';
import { blockedReason, parseAddress } from '../documents/addresses.ts';

/** Why a webhook must not reach this address, or null for a public unicast address. */
export function internalReason(ip: string): string | null {
  const a = parseAddress(ip);
  return a ? blockedReason(a) : 'not an IP address';
}

/** True for any address a webhook must not reach. */
export function isInternalAddress(ip: string): boolean {
  return internalReason(ip) !== null;
}

/** What the customer is told; `detail` (addresses, host names, resolver errors) is for the log. */
export type RefusalKind = 'address not allowed' | 'DNS lookup failed' | 'URL not allowed';

export class AddressRefused extends Error {
  readonly kind: RefusalKind;
  readonly detail: string;
  constructor(kind: RefusalKind, detail: string) {
    super(kind);
    this.name = 'AddressRefused';
    this.kind = kind;
    this.detail = detail;
  }
}

/** Resolves the host of a URL to the one address to connect to, or throws AddressRefused. */
export type AddressCheck = (url: URL) => Promise<{ address: string; family: 4 | 6 }>;

/**
 * The host of a URL as it is compared: lower case, without IPv6 brackets and without the trailing
 * dot(s) of a fully qualified name (`localhost.` and `localhost` are the same host to a resolver).
 * The WHATWG URL parser has already turned decimal, octal, hex and short IPv4 forms into dotted quads.
 */
export function normalHost(url: URL): string {
  return url.hostname
    .replace(/^\[|\]$/g, '')
    .toLowerCase()
    .replace(/\.+$/, '');
}

function portOf(url: URL): string {
  return url.port || (url.protocol === 'https:' ? '443' : '80');
}

function normalAllow(allow: readonly string[]): Set<string> {
  return new Set(
    allow
      .map((a) => a.trim().toLowerCase())
      .filter(Boolean)
      .map((a) => {
        // `host.` and `host.:port` mean the same as without the dot.
        const m = /^(.*?)\.*(:\d+)?$/.exec(a);
        return m ? `${m[1]}${m[2] ?? ''}` : a;
      }),
  );
}

// Names that only mean something inside a network: RFC 6761/6762 special-use names, RFC 8375's
// home.arpa, and the suffixes private networks and clouds use for their own hosts.
const internalSuffixes = [
  'localhost',
  'local',
  'localdomain',
  'internal',
  'home.arpa',
  'lan',
  'intranet',
  'corp',
  'private',
  'cluster.local',
];

/** Why a host name (not an IP) names an internal host by its form alone, or null. */
export function internalNameReason(host: string): string | null {
  if (isIP(host)) return null;
  if (!host.includes('.')) return 'single-label host name';
  const suffix = internalSuffixes.find((s) => host === s || host.endsWith(`.${s}`));
  return suffix ? `internal name (.${suffix})` : null;
}

/**
 * `allow`: entries `host` or `host:port` (as written in the URL) that may be internal — for tests and
 * for operators whose receivers live on a private network.
 */
export function addressCheck(allow: readonly string[]): AddressCheck {
  const allowed = normalAllow(allow);
  return async (url) => {
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new AddressRefused('URL not allowed', `scheme ${url.protocol} is not http or https`);
    if (url.username || url.password) throw new AddressRefused('URL not allowed', 'URL carries credentials');
    const host = normalHost(url);
    const isAllowed = allowed.has(host) || allowed.has(`${host}:${portOf(url)}`);
    if (!isAllowed) {
      const why = internalNameReason(host);
      if (why) throw new AddressRefused('address not allowed', `host ${host}: ${why}`);
    }
    let addrs: { address: string; family: number }[];
    if (isIP(host)) addrs = [{ address: host, family: isIP(host) }];
    else {
      try {
        addrs = await lookup(host, { all: true, verbatim: true });
      } catch (err) {
        throw new AddressRefused(
          'DNS lookup failed',
          `host ${host} does not resolve: ${(err as Error).message}`,
        );
      }
    }
    if (addrs.length === 0) throw new AddressRefused('DNS lookup failed', `host ${host} has no address`);
    // Every address must pass (DNS may hand out any of them); the one we connect to is pinned.
    if (!isAllowed) {
      for (const a of addrs) {
        const why = internalReason(a.address);
        if (why)
          throw new AddressRefused(
            'address not allowed',
            `address ${a.address} of ${host} is internal (${why}); not allowed`,
          );
      }
    }
    const first = addrs[0]!;
    return { address: first.address, family: first.family === 6 ? 6 : 4 };
  };
}

/**
 * Early check at registration, without DNS: a literal internal IP (in any form the URL parser
 * accepts: decimal, hex, IPv4-mapped IPv6, trailing dot) or an internal name form (`localhost`,
 * `localhost.`, `*.internal`, single-label names, …) is refused at once. Other host names are checked
 * at every delivery, after resolving them (DNS can change).
 */
export function literalAddressRefusal(url: URL, allow: readonly string[]): string | null {
  const host = normalHost(url);
  const allowed = normalAllow(allow);
  if (allowed.has(host) || allowed.has(`${host}:${portOf(url)}`)) return null;
  if (host === '') return 'url: must have a host';
  if (internalNameReason(host) !== null) return 'url: must not point to an internal address';
  if (isIP(host) && isInternalAddress(host)) return 'url: must not point to an internal address';
  return null;
}

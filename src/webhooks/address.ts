// The address rule for webhook deliveries: the same rule as file_url fetching (no loopback, private,
// link-local, metadata, CGNAT, multicast, reserved or otherwise internal address), decided by the
// document fetcher's own table (src/documents/addresses.ts), unless the operator allow-listed the
// host. `AddressCheck` is all the deliverer knows.
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

export class AddressRefused extends Error {
  constructor(msg: string) {
    super(msg);
    this.name = 'AddressRefused';
  }
}

/** Resolves the host of a URL to the one address to connect to, or throws AddressRefused. */
export type AddressCheck = (url: URL) => Promise<{ address: string; family: 4 | 6 }>;

/**
 * `allow`: entries `host` or `host:port` (as written in the URL) that may be internal — for tests and
 * for operators whose receivers live on a private network.
 */
export function addressCheck(allow: readonly string[]): AddressCheck {
  const allowed = new Set(allow.map((a) => a.trim().toLowerCase()).filter(Boolean));
  return async (url) => {
    if (url.protocol !== 'http:' && url.protocol !== 'https:')
      throw new AddressRefused('webhook URL must use http or https');
    if (url.username || url.password) throw new AddressRefused('webhook URL must not carry credentials');
    const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
    const port = url.port || (url.protocol === 'https:' ? '443' : '80');
    const isAllowed = allowed.has(host) || allowed.has(`${host}:${port}`);
    let addrs: { address: string; family: number }[];
    if (isIP(host)) addrs = [{ address: host, family: isIP(host) }];
    else {
      try {
        addrs = await lookup(host, { all: true, verbatim: true });
      } catch (err) {
        throw new AddressRefused(`host ${host} does not resolve: ${(err as Error).message}`);
      }
    }
    if (addrs.length === 0) throw new AddressRefused(`host ${host} has no address`);
    // Every address must pass (DNS may hand out any of them); the one we connect to is pinned.
    if (!isAllowed) {
      for (const a of addrs) {
        const why = internalReason(a.address);
        if (why)
          throw new AddressRefused(`address ${a.address} of ${host} is internal (${why}); not allowed`);
      }
    }
    const first = addrs[0]!;
    return { address: first.address, family: first.family === 6 ? 6 : 4 };
  };
}

/** Early check at registration: a literal internal IP is refused at once (host names at delivery). */
export function literalAddressRefusal(url: URL, allow: readonly string[]): string | null {
  const host = url.hostname.replace(/^\[|\]$/g, '').toLowerCase();
  const port = url.port || (url.protocol === 'https:' ? '443' : '80');
  const allowed = allow.map((a) => a.trim().toLowerCase());
  if (allowed.includes(host) || allowed.includes(`${host}:${port}`)) return null;
  if (host === 'localhost' || host.endsWith('.localhost'))
    return 'url: must not point to an internal address';
  if (isIP(host) && isInternalAddress(host)) return 'url: must not point to an internal address';
  return null;
}

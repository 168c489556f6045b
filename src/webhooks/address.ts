// The address rule for webhook deliveries: the same rule as file_url fetching — no loopback, private,
// link-local, multicast or otherwise internal address — unless the operator allow-listed the host.
// One place, swappable: `AddressCheck` is all the deliverer knows. (The SSRF-safe document fetcher in
// src/documents/fetch.ts is being written in parallel; when it lands, its address check can replace
// `isInternalAddress` here.)
import { lookup } from 'node:dns/promises';
import { BlockList, isIP } from 'node:net';

const internal = new BlockList();
for (const [net, bits] of [
  ['0.0.0.0', 8], // "this" network
  ['10.0.0.0', 8],
  ['100.64.0.0', 10], // carrier-grade NAT
  ['127.0.0.0', 8],
  ['169.254.0.0', 16], // link-local, cloud metadata
  ['172.16.0.0', 12],
  ['192.0.0.0', 24],
  ['192.0.2.0', 24],
  ['192.168.0.0', 16],
  ['198.18.0.0', 15],
  ['198.51.100.0', 24],
  ['203.0.113.0', 24],
  ['224.0.0.0', 4], // multicast
  ['240.0.0.0', 4], // reserved, broadcast
] as const)
  internal.addSubnet(net, bits, 'ipv4');
for (const [net, bits] of [
  ['::', 128],
  ['::1', 128],
  ['64:ff9b::', 96], // NAT64: may reach internal IPv4
  ['100::', 64],
  ['2001:db8::', 32],
  ['fc00::', 7], // unique local
  ['fe80::', 10], // link-local
  ['ff00::', 8], // multicast
] as const)
  internal.addSubnet(net, bits, 'ipv6');

/** True for any address a webhook must not reach. IPv4-mapped IPv6 is judged by its IPv4 part. */
export function isInternalAddress(ip: string): boolean {
  const v = isIP(ip);
  if (v === 4) return internal.check(ip, 'ipv4');
  if (v !== 6) return true; // not an address: refuse
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(ip);
  if (mapped?.[1]) return internal.check(mapped[1], 'ipv4');
  return internal.check(ip, 'ipv6');
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
      const bad = addrs.find((a) => isInternalAddress(a.address));
      if (bad) throw new AddressRefused(`address ${bad.address} of ${host} is internal; not allowed`);
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

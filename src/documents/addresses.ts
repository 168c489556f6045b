// Which network addresses file_url may reach: pure functions, no I/O. Only globally routable unicast
// addresses pass; everything a fetch could use to reach inside the network it runs in is named here
// (loopback, private, link-local with the cloud metadata address, CGNAT, unique-local, multicast,
// documentation and reserved ranges, and the IPv6 forms that embed an IPv4 address). An allow-list
// (FETCH_ALLOW_HOSTS) can open chosen hosts or CIDR ranges for tests and private deployments.
import { isIP } from 'node:net';

export interface ParsedAddress {
  family: 4 | 6;
  /** The address as an unsigned integer (32 or 128 bits). */
  value: bigint;
  text: string;
}

/** Parses a plain IPv4 dotted quad or an IPv6 address (brackets allowed); null for anything else. */
export function parseAddress(input: string): ParsedAddress | null {
  let s = input.trim();
  if (s.startsWith('[') && s.endsWith(']')) s = s.slice(1, -1);
  const kind = isIP(s);
  if (kind === 4) {
    let v = 0n;
    for (const part of s.split('.')) v = (v << 8n) | BigInt(Number(part));
    return { family: 4, value: v, text: s };
  }
  if (kind === 6) {
    if (s.includes('%')) return null; // zone ids only exist for link-local addresses
    let head = s;
    let tailV4: bigint | null = null;
    const lastColon = s.lastIndexOf(':');
    const tail = s.slice(lastColon + 1);
    if (tail.includes('.')) {
      const v4 = parseAddress(tail);
      if (!v4 || v4.family !== 4) return null;
      tailV4 = v4.value;
      head = s.slice(0, lastColon + 1) + '0:0';
    }
    const [left, right] = head.includes('::') ? head.split('::') : [head, undefined];
    const l = left ? left.split(':') : [];
    const r = right !== undefined && right !== '' ? right.split(':') : [];
    const groups =
      right === undefined ? l : [...l, ...Array<string>(8 - l.length - r.length).fill('0'), ...r];
    if (groups.length !== 8) return null;
    let v = 0n;
    for (const g of groups) v = (v << 16n) | BigInt(parseInt(g, 16));
    if (tailV4 !== null) v = (v & ~0xffffffffn) | tailV4;
    return { family: 6, value: v, text: s.toLowerCase() };
  }
  return null;
}

export interface Cidr {
  family: 4 | 6;
  base: bigint;
  bits: number;
  text: string;
}

export function parseCidr(text: string): Cidr | null {
  const [addr, len, extra] = text.trim().split('/');
  if (addr === undefined || extra !== undefined) return null;
  const a = parseAddress(addr);
  if (!a) return null;
  const max = a.family === 4 ? 32 : 128;
  const bits = len === undefined ? max : Number(len);
  if (!/^\d+$/.test(len ?? String(max)) || bits < 0 || bits > max) return null;
  const mask = bits === 0 ? 0n : ((1n << BigInt(bits)) - 1n) << BigInt(max - bits);
  return { family: a.family, base: a.value & mask, bits, text: text.trim() };
}

export function inCidr(a: ParsedAddress, c: Cidr): boolean {
  if (a.family !== c.family) return false;
  const max = a.family === 4 ? 32 : 128;
  const shift = BigInt(max - c.bits);
  return c.bits === 0 || a.value >> shift === c.base >> shift;
}

function table(rows: [string, string][]): { cidr: Cidr; name: string }[] {
  return rows.map(([c, name]) => ({ cidr: parseCidr(c)!, name }));
}

// Most specific first: the first match names the refusal.
const blockedV4 = table([
  ['169.254.169.254/32', 'cloud metadata service'],
  ['255.255.255.255/32', 'broadcast'],
  ['0.0.0.0/8', '"this network" (0.0.0.0/8)'],
  ['10.0.0.0/8', 'private network (10.0.0.0/8)'],
  ['100.64.0.0/10', 'carrier-grade NAT (100.64.0.0/10)'],
  ['127.0.0.0/8', 'loopback (127.0.0.0/8)'],
  ['169.254.0.0/16', 'link-local (169.254.0.0/16)'],
  ['172.16.0.0/12', 'private network (172.16.0.0/12)'],
  ['192.0.0.0/24', 'IETF protocol assignments (192.0.0.0/24)'],
  ['192.0.2.0/24', 'documentation (192.0.2.0/24)'],
  ['192.88.99.0/24', '6to4 relay anycast (192.88.99.0/24)'],
  ['192.168.0.0/16', 'private network (192.168.0.0/16)'],
  ['198.18.0.0/15', 'benchmarking (198.18.0.0/15)'],
  ['198.51.100.0/24', 'documentation (198.51.100.0/24)'],
  ['203.0.113.0/24', 'documentation (203.0.113.0/24)'],
  ['224.0.0.0/4', 'multicast (224.0.0.0/4)'],
  ['240.0.0.0/4', 'reserved (240.0.0.0/4)'],
]);

// IPv6: only global unicast (2000::/3) can pass at all; inside it, these are refused.
const globalUnicast = parseCidr('2000::/3')!;
const blockedV6 = table([
  ['2001:db8::/32', 'documentation (2001:db8::/32)'],
  ['3fff::/20', 'documentation (3fff::/20)'],
  ['2001::/23', 'IETF protocol assignments incl. Teredo (2001::/23)'],
  ['2002::/16', '6to4, which embeds an IPv4 address (2002::/16)'],
  ['5f00::/16', 'segment routing (5f00::/16)'],
]);
const namedV6 = table([
  ['::/128', 'unspecified address (::)'],
  ['::1/128', 'loopback (::1)'],
  ['::ffff:0:0/96', 'IPv4-mapped IPv6 (::ffff:0:0/96)'],
  ['64:ff9b::/96', 'NAT64 (64:ff9b::/96)'],
  ['64:ff9b:1::/48', 'local NAT64 (64:ff9b:1::/48)'],
  ['::/96', 'IPv4-compatible IPv6 (::/96)'],
  ['100::/64', 'discard prefix (100::/64)'],
  ['fc00::/7', 'unique-local (fc00::/7)'],
  ['fe80::/10', 'link-local (fe80::/10)'],
  ['fec0::/10', 'site-local (fec0::/10)'],
  ['ff00::/8', 'multicast (ff00::/8)'],
]);

/** Why an address may not be fetched from, or null when it is a public unicast address. */
export function blockedReason(a: ParsedAddress): string | null {
  if (a.family === 4) return blockedV4.find((r) => inCidr(a, r.cidr))?.name ?? null;
  // An IPv4 address written as IPv6 is judged as the IPv4 address it carries, and refused anyway:
  // there is no reason for a document host to be published that way.
  if (a.value >> 32n === 0xffffn) {
    const inner: ParsedAddress = { family: 4, value: a.value & 0xffffffffn, text: '' };
    const why = blockedReason(inner);
    return `IPv4-mapped IPv6 (::ffff:0:0/96)${why ? ` of ${why}` : ''}`;
  }
  const named = namedV6.find((r) => inCidr(a, r.cidr));
  if (named) return named.name;
  if (!inCidr(a, globalUnicast)) return 'not a global unicast IPv6 address (outside 2000::/3)';
  return blockedV6.find((r) => inCidr(a, r.cidr))?.name ?? null;
}

/** FETCH_ALLOW_HOSTS: host names (exact, or `*.example.com` for subdomains), addresses and CIDRs. */
export interface AllowList {
  hosts: string[];
  cidrs: Cidr[];
}

export function parseAllowList(text: string): AllowList {
  const out: AllowList = { hosts: [], cidrs: [] };
  for (const raw of text.split(/[\s,]+/)) {
    const e = raw.trim().toLowerCase();
    if (!e) continue;
    const c = parseCidr(e);
    if (c) out.cidrs.push(c);
    else if (/^(\*\.)?[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)*\.?$/.test(e))
      out.hosts.push(e.replace(/\.$/, ''));
    else throw new Error(`"${raw}" is neither a host name, an IP address nor a CIDR range`);
  }
  return out;
}

export function hostAllowed(list: AllowList, host: string): boolean {
  const h = host.toLowerCase().replace(/\.$/, '');
  return list.hosts.some((e) => (e.startsWith('*.') ? h.endsWith(e.slice(1)) : h === e));
}

export function addressAllowed(list: AllowList, a: ParsedAddress): boolean {
  return list.cidrs.some((c) => inCidr(a, c));
}

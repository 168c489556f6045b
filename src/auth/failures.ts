// Limits failed POST /v1/auth attempts, per client address and per submitted key, in each API
// process. Each key (an address, a key's hash) has an allowance of `limit` failures that refills
// evenly over `windowSeconds`; while it is used up, every attempt under that key is refused before
// the database is asked, so a blocked guesser learns nothing, not even from a right key. Successes
// cost nothing and wait for nothing.
//
// Only failures are charged, which is why this is not the account RateLimiter (./api/rate-limit.ts):
// that one charges every request of an authenticated account.
import type { Clock } from '../clock.ts';

interface Allowance {
  left: number;
  at: number;
}

export class FailureLimiter {
  private readonly entries = new Map<string, Allowance>();
  private readonly limit: number;
  private readonly perMs: number;
  private readonly clock: Clock;
  private readonly maxEntries: number;

  constructor(o: { limit: number; windowSeconds: number; clock: Clock; maxEntries?: number }) {
    this.limit = o.limit;
    this.perMs = o.limit / (o.windowSeconds * 1000);
    this.clock = o.clock;
    this.maxEntries = o.maxEntries ?? 100_000;
  }

  private refreshed(key: string, now: number): Allowance | undefined {
    const a = this.entries.get(key);
    if (!a) return undefined;
    a.left = Math.min(this.limit, a.left + (now - a.at) * this.perMs);
    a.at = now;
    return a;
  }

  /** Seconds until `key` may try again; 0 when it may try now. */
  retryAfter(key: string): number {
    const now = this.clock.now().getTime();
    const a = this.refreshed(key, now);
    if (!a || a.left >= 1) return 0;
    return Math.max(1, Math.ceil((1 - a.left) / this.perMs / 1000));
  }

  /** Records one failure under `key`. */
  fail(key: string): void {
    const now = this.clock.now().getTime();
    let a = this.refreshed(key, now);
    if (!a) {
      if (this.entries.size >= this.maxEntries) this.prune(now);
      a = { left: this.limit, at: now };
      this.entries.set(key, a);
    }
    a.left = Math.max(0, a.left - 1);
  }

  /**
   * Forgets keys whose allowance is full again; if that leaves the table over 90 % full, the oldest
   * (Map order) go too, so a full table is scanned at most once per tenth of its size.
   */
  private prune(now: number): void {
    for (const [k, a] of this.entries)
      if (a.left + (now - a.at) * this.perMs >= this.limit) this.entries.delete(k);
    const keep = Math.floor(this.maxEntries * 0.9);
    for (const k of this.entries.keys()) {
      if (this.entries.size <= keep) break;
      this.entries.delete(k);
    }
  }

  /** Keys currently tracked (for tests and metrics). */
  get size(): number {
    return this.entries.size;
  }
}

/** The address a limit applies to: an IPv4 address as is, an IPv6 address by its /64 network. */
export function addressKey(ip: string): string {
  const v4 = /^(?:::ffff:)?(\d{1,3}(?:\.\d{1,3}){3})$/i.exec(ip);
  if (v4) return v4[1]!;
  if (!ip.includes(':')) return ip;
  // Expand "::" so that the first four groups are the network part.
  const [head = '', tail] = ip.toLowerCase().split('%')[0]!.split('::') as [string, string | undefined];
  const h = head === '' ? [] : head.split(':');
  const t = tail === undefined || tail === '' ? [] : tail.split(':');
  const groups =
    tail === undefined ? h : [...h, ...Array<string>(Math.max(0, 8 - h.length - t.length)).fill('0'), ...t];
  return `${groups
    .slice(0, 4)
    .map((g) => g.replace(/^0+(?=.)/, ''))
    .join(':')}::/64`;
}

// Per-account rate limit of the customer API: a token bucket per account in each API process
// (`rate` requests per second, `burst` at once). Several API processes each apply it, so the
// account-wide ceiling is rate × processes; a shared limiter would cost a database or Redis round
// trip per request, which intake cannot afford.
import type { Clock } from '../clock.ts';
import { ApiError } from '../domain/envelope.ts';

interface Bucket {
  tokens: number;
  at: number;
}

export class RateLimiter {
  private readonly buckets = new Map<string, Bucket>();
  private readonly rate: number;
  private readonly burst: number;
  private readonly clock: Clock;

  constructor(rate: number, burst: number, clock: Clock) {
    this.rate = rate;
    this.burst = burst;
    this.clock = clock;
  }

  /** Takes one request from the account's bucket, or throws 429 with Retry-After. */
  take(accountId: string): void {
    if (this.rate <= 0) return;
    const now = this.clock.now().getTime();
    let b = this.buckets.get(accountId);
    if (!b) {
      b = { tokens: this.burst, at: now };
      this.buckets.set(accountId, b);
      if (this.buckets.size > 100_000) this.prune(now);
    }
    b.tokens = Math.min(this.burst, b.tokens + ((now - b.at) / 1000) * this.rate);
    b.at = now;
    if (b.tokens >= 1) {
      b.tokens -= 1;
      return;
    }
    const retryAfter = Math.max(1, Math.ceil((1 - b.tokens) / this.rate));
    throw new ApiError(
      429,
      `Too many requests: this account may make ${this.rate} requests per second (bursts of ${this.burst}); retry after ${retryAfter} s`,
      { data: { retry_after: retryAfter }, headers: { 'retry-after': String(retryAfter) } },
    );
  }

  /** Forgets accounts whose buckets are full again (they would start full anyway). */
  private prune(now: number): void {
    for (const [k, b] of this.buckets)
      if (b.tokens + ((now - b.at) / 1000) * this.rate >= this.burst) this.buckets.delete(k);
  }
}

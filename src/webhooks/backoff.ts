// Webhook retry policy: pure. Exponential back-off (base · 2^(n-1), capped), given up only once the
// first attempt is older than the give-up window (default 30 h, so retries cover more than a day).
export interface RetryPolicy {
  baseSeconds: number;
  maxSeconds: number;
  giveUpHours: number;
}

export function retryDelaySeconds(attempt: number, p: RetryPolicy): number {
  return Math.min(p.baseSeconds * 2 ** Math.max(0, attempt - 1), p.maxSeconds);
}

/** When to try again after failed attempt number `attempt`, or null to give up. */
export function nextAttemptAt(now: Date, createdAt: Date, attempt: number, p: RetryPolicy): Date | null {
  const next = new Date(now.getTime() + retryDelaySeconds(attempt, p) * 1000);
  if (next.getTime() - createdAt.getTime() > p.giveUpHours * 3_600_000) return null;
  return next;
}

/** Attempts in a row without an HTTP answer after which an endpoint pauses (circuit breaker). */
export const BREAKER_FAILURES = 5;

/**
 * How long an endpoint pauses after its `failuresInRow`-th attempt in a row without an HTTP answer,
 * or null below the threshold: the retry back-off again (base · 2^(n − threshold), capped), so an
 * endpoint that keeps timing out is tried about as often as one delivery would be, not once per
 * pending delivery.
 */
export function endpointPauseSeconds(failuresInRow: number, p: RetryPolicy): number | null {
  if (failuresInRow < BREAKER_FAILURES) return null;
  return retryDelaySeconds(failuresInRow - BREAKER_FAILURES + 1, p);
}

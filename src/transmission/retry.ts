// Retry policy: pure rules, no I/O. Which failures are worth another call, and when, with limits on
// dials, on tries that reached a fax machine, and on total time (HylaFAX's defaults: 12 dials,
// 3 tries, 3 hours; busy 180 s, protocol error 60 s, no answer and others 300 s).
import type { FailureType } from './backend.ts';
import { reachedFaxTypes } from './backend.ts';

export interface RetryPolicy {
  busySeconds: number;
  noAnswerSeconds: number;
  protocolSeconds: number;
  otherSeconds: number;
  maxDials: number;
  maxTries: number;
  killTimeSeconds: number;
}

export const defaultRetryPolicy: RetryPolicy = {
  busySeconds: 180,
  noAnswerSeconds: 300,
  protocolSeconds: 60,
  otherSeconds: 300,
  maxDials: 12,
  maxTries: 3,
  killTimeSeconds: 3 * 3600,
};

/**
 * The installation's policy with a fax's own limits in place (the send options max_dials and
 * give_up_after, in seconds; null keeps the installation's MAX_DIALS / KILL_TIME_SECONDS).
 */
export function policyForFax(
  p: RetryPolicy,
  fax: { max_dials: number | null; give_up_after: number | null },
): RetryPolicy {
  return {
    ...p,
    ...(fax.max_dials !== null ? { maxDials: fax.max_dials } : {}),
    ...(fax.give_up_after !== null ? { killTimeSeconds: fax.give_up_after } : {}),
  };
}

export interface FailedCall {
  type: FailureType;
  retryable: boolean;
}

export type RetryDecision = { retry: true; at: Date } | { retry: false; why: string };

/** Wait before the next call after a failure of this type (seconds). */
export function retryDelaySeconds(p: RetryPolicy, type: FailureType): number {
  switch (type) {
    case 'busy':
      return p.busySeconds;
    case 'no_answer':
      return p.noAnswerSeconds;
    case 'call_dropped':
    case 'protocol_error':
      return p.protocolSeconds;
    case 'aborted':
      return 0; // we hung up ourselves (shutdown): the call is known to be incomplete
    default:
      return p.otherSeconds;
  }
}

export function countsAsTry(type: FailureType): boolean {
  return reachedFaxTypes.has(type);
}

/**
 * Decides after a failed call. `dials` and `tries` include the call that just failed; `since` is
 * when the job was first ready to send (the kill time counts from there).
 */
export function decideRetry(
  p: RetryPolicy,
  f: FailedCall,
  o: { dials: number; tries: number; since: Date; now: Date },
): RetryDecision {
  if (!f.retryable) return { retry: false, why: 'not retryable' };
  if (f.type !== 'aborted') {
    if (o.dials >= p.maxDials) return { retry: false, why: `${o.dials} dials (limit ${p.maxDials})` };
    if (o.tries >= p.maxTries) return { retry: false, why: `${o.tries} tries (limit ${p.maxTries})` };
  }
  const at = new Date(o.now.getTime() + retryDelaySeconds(p, f.type) * 1000);
  if (at.getTime() > o.since.getTime() + p.killTimeSeconds * 1000)
    return { retry: false, why: `kill time of ${p.killTimeSeconds} s reached` };
  return { retry: true, at };
}

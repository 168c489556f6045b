// How a SIP fax call ends, in the failure types every backend shares (issue 18's list; the table is
// in docs/sip.md). Pure functions: the SIP status of a call that was never answered, and the T.30
// result of one that was.
import type { FailureType } from '../backend.ts';
import type { MediaResult } from './media.ts';

/** SpanDSP's T30_ERR_* codes this mapping needs (spandsp/t30.h, 0.0.6). */
export const t30 = {
  OK: 0,
  T0_EXPIRED: 2,
  T1_EXPIRED: 3,
  INCOMPATIBLE: 8,
  NORESSUPPORT: 11,
  NOSIZESUPPORT: 12,
} as const;

export interface Classified {
  type: FailureType;
  retryable: boolean;
}

/** A final response (300-699) to our INVITE, or a local 408 (Timer B) / 503 (transport). */
export function classifyStatus(status: number): Classified {
  if (status === 486 || status === 600 || status === 603) return { type: 'busy', retryable: true };
  if (status === 480 || status === 408 || status === 487) return { type: 'no_answer', retryable: true };
  // The number does not exist or is incomplete: dialling it again cannot help.
  if (status === 404 || status === 484 || status === 604) return { type: 'invalid_number', retryable: false };
  // 403, 503, every other 5xx, failed authentication and the rest: the trunk's side, try later.
  return { type: 'backend_error', retryable: true };
}

/** An answered call whose T.30 exchange did not succeed. */
export function classifyT30(r: Pick<MediaResult, 'code' | 'pages'>): Classified {
  if (r.code === t30.T0_EXPIRED || r.code === t30.T1_EXPIRED) return { type: 'no_fax_tone', retryable: true };
  if (r.code === t30.INCOMPATIBLE || r.code === t30.NORESSUPPORT || r.code === t30.NOSIZESUPPORT)
    return { type: 'protocol_error', retryable: false };
  if (r.pages > 0) return { type: 'call_dropped', retryable: true };
  return { type: 'protocol_error', retryable: true };
}

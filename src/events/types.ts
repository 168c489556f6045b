// Which event a state change is: one pure function over the transition, no I/O. Every transition
// is exactly one event; the routing key lets a consumer bind to one account and to chosen types.
import type { JobState } from '../domain/states.ts';

/** Events of a fax job's state changes (the job event schema). */
export const jobEventTypes = [
  'fax.accepted',
  'fax.awaiting_approval',
  'fax.scheduled',
  'fax.preparing',
  'fax.queued',
  'fax.blocked',
  'fax.dialling',
  'fax.sending',
  'fax.page_sent',
  'fax.retry_scheduled',
  'fax.delivered',
  'fax.failed',
  'fax.cancelled',
  'fax.rejected',
  'fax.outcome_unknown',
] as const;

/** Events of a received fax (the received-fax event schema): answered, stored, failed or partial. */
export const receiveEventTypes = ['fax.receiving', 'fax.received', 'fax.receive_failed'] as const;

export const eventTypes = [...jobEventTypes, ...receiveEventTypes] as const;
export type EventType = (typeof eventTypes)[number];
export type JobEventType = (typeof jobEventTypes)[number];

const byState: Record<JobState, JobEventType> = {
  accepted: 'fax.accepted',
  awaiting_approval: 'fax.awaiting_approval',
  scheduled: 'fax.scheduled',
  preparing: 'fax.preparing',
  queued: 'fax.queued',
  blocked: 'fax.blocked',
  dialling: 'fax.dialling',
  sending: 'fax.sending',
  retry_waiting: 'fax.retry_scheduled',
  delivered: 'fax.delivered',
  failed: 'fax.failed',
  cancelled: 'fax.cancelled',
  rejected: 'fax.rejected',
  unknown: 'fax.outcome_unknown',
};

/**
 * The event type of a transition. Page progress is recorded by the transmission worker as a
 * sending → sending transition with detail {page, of}: that is fax.page_sent. A fax accepted for
 * later is recorded as null → scheduled, so its first event is fax.scheduled (there is no separate
 * fax.accepted for it); when it falls due (scheduled → accepted) it gets fax.accepted.
 */
export function eventTypeOf(from: JobState | null, to: JobState, detail: unknown): JobEventType {
  if (from === 'sending' && to === 'sending') {
    const d = detail as { page?: unknown } | null;
    if (d && typeof d.page === 'number') return 'fax.page_sent';
  }
  return byState[to];
}

/** `<account_id>.<event type>`, e.g. `3f0c…-….fax.delivered`: bind `<account_id>.#` for one account,
 * `*.fax.delivered` for one type across accounts, or `<account_id>.fax.delivered` for both. */
export function routingKeyOf(accountId: string, type: EventType): string {
  return `${accountId}.${type}`;
}

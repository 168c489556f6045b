// The fax job state machine: pure data, no I/O. Every state change in the database goes through
// `transition()` in jobs/repo.ts, which refuses any move `canTransition` forbids (a programming error:
// it throws before writing), and the SQL that performs it is conditional on the current state, so two
// processes can never both win the same transition.

export const jobStates = [
  'accepted', // recorded; its command is on RabbitMQ
  'awaiting_approval', // held until someone of the account approves or rejects it
  'scheduled', // held by pg-boss until scheduled_at
  'preparing', // a worker fetches, checks and renders the documents
  'queued', // ready, waiting for a line
  'blocked', // ready, but another call to the same destination is active
  'dialling', // a call attempt has started
  'sending', // connected, pages going out
  'retry_waiting', // the last attempt failed with a retryable cause; next_attempt_at says when
  'delivered', // terminal: every page confirmed by the receiver
  'failed', // terminal: failure_code / failure_reason say why
  'cancelled', // terminal: cancelled before transmission
  'rejected', // terminal: approval was refused
  'unknown', // terminal until reconciled: a worker died during a call; not resent blindly
] as const;

export type JobState = (typeof jobStates)[number];

export const terminalStates: ReadonlySet<JobState> = new Set([
  'delivered',
  'failed',
  'cancelled',
  'rejected',
  'unknown',
]);

const edges: Record<JobState, readonly JobState[]> = {
  accepted: ['preparing', 'scheduled', 'awaiting_approval', 'cancelled', 'failed'],
  awaiting_approval: ['accepted', 'scheduled', 'rejected', 'cancelled'],
  scheduled: ['accepted', 'preparing', 'cancelled', 'failed'],
  preparing: ['queued', 'dialling', 'failed', 'cancelled'],
  queued: ['blocked', 'dialling', 'cancelled', 'failed'],
  blocked: ['queued', 'dialling', 'cancelled', 'failed'],
  dialling: ['sending', 'retry_waiting', 'failed', 'delivered', 'unknown'],
  sending: ['sending', 'retry_waiting', 'failed', 'delivered', 'unknown'],
  retry_waiting: ['queued', 'dialling', 'cancelled', 'failed'],
  delivered: [],
  failed: [],
  cancelled: [],
  rejected: [],
  unknown: ['delivered', 'failed'],
};

export function canTransition(from: JobState, to: JobState): boolean {
  return edges[from].includes(to);
}

/** States from which `to` can be reached: the WHERE clause of a conditional transition. */
export function statesLeadingTo(to: JobState): JobState[] {
  return jobStates.filter((s) => edges[s].includes(to));
}

export function isJobState(s: string): s is JobState {
  return (jobStates as readonly string[]).includes(s);
}

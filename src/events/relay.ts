// The outbox relay: publishes committed state changes as events, after their commit, without losing
// any. One transaction per batch: lock outbox rows (FOR UPDATE SKIP LOCKED, so several relays share
// the work), publish each event and wait for every publisher confirm, fan the events out to webhook
// endpoints, delete the rows, commit. A relay that dies before the commit leaves its rows to the
// next run: an event may be published twice (same event id), never lost.
import type { Pool } from '../db/pool.ts';
import type { JobState } from '../domain/states.ts';
import type { Logger } from '../log.ts';
import type { AnyEvent, FaxEvent, ReceivedFaxEvent } from './schema.ts';
import { eventTypeOf, routingKeyOf } from './types.ts';
import { PollLoop } from '../poll-loop.ts';
import { inSpan, inStoredContext, linksTo } from '../trace.ts';

/** Publishes one event and resolves when the broker confirmed it. */
export type EventPublisher = (routingKey: string, event: AnyEvent) => Promise<void>;

interface OutboxRow {
  transition_id: string;
  event_id: string;
  job_id: string;
  account_id: string;
  from_state: JobState | null;
  to_state: JobState;
  attempt: number;
  at: Date;
  detail: Record<string, unknown> | null;
  failure_code: string | null;
  failure_reason: string | null;
  page_count: number | null;
  pages_sent: number;
  /** The job's send options (migration 016). */
  client_reference?: string | null;
  broadcast_id?: string | null;
  /** The fax's trace (migration 030): its event is published in it. */
  trace_context?: string | null;
}

const terminal = new Set<JobState>(['delivered', 'failed', 'cancelled', 'rejected', 'unknown']);

/** Pure: an outbox row (transition joined with its job) → the event message. */
export function toEvent(r: OutboxRow): FaxEvent {
  const details: Record<string, unknown> = { ...(r.detail ?? {}) };
  if (terminal.has(r.to_state)) {
    details.page_count = r.page_count;
    details.pages_sent = r.pages_sent;
    if (r.to_state !== 'delivered') {
      details.failure_code = r.failure_code;
      details.failure_reason = r.failure_reason;
    }
  }
  return {
    version: 1,
    id: r.event_id,
    type: eventTypeOf(r.from_state, r.to_state, r.detail),
    job_id: r.job_id,
    account_id: r.account_id,
    occurred_at: r.at.toISOString(),
    sequence: Number(r.transition_id),
    attempt: r.attempt,
    state: r.to_state,
    previous_state: r.from_state,
    client_reference: r.client_reference ?? null,
    broadcast_id: r.broadcast_id ?? null,
    details,
  };
}

interface ReceivedOutboxRow {
  id: string;
  event_id: string;
  received_fax_id: string;
  account_id: string;
  type: ReceivedFaxEvent['type'];
  details: ReceivedFaxEvent['details'];
  created_at: Date;
}

/** Pure: a received-fax outbox row → the event message. */
export function toReceivedEvent(r: ReceivedOutboxRow): ReceivedFaxEvent {
  return {
    version: 1,
    id: r.event_id,
    type: r.type,
    received_fax_id: r.received_fax_id,
    account_id: r.account_id,
    occurred_at: r.created_at.toISOString(),
    sequence: Number(r.id),
    details: r.details,
  };
}

/** The key webhook deliveries of one subject are ordered by: the job, or the received fax. */
const subjectOf = (e: AnyEvent): string => ('job_id' in e ? e.job_id : e.received_fax_id);

export interface RelayDeps {
  db: Pool;
  publish: EventPublisher;
  log: Logger;
  batchSize?: number;
  pollMs?: number;
  onPublished?: (n: number) => void;
}

export class EventRelay {
  private readonly d: RelayDeps;
  private readonly log: Logger;
  private readonly loop: PollLoop;

  constructor(d: RelayDeps) {
    this.d = d;
    this.log = d.log.child({ component: 'event-relay' });
    // A full batch is followed at once by the next; otherwise it polls, backing off after failures.
    this.loop = new PollLoop({
      pass: () => this.runOnce(),
      again: (n) => n >= (d.batchSize ?? 500),
      // Idle: one statement instead of a transaction with two locking reads.
      probe: () => this.anyPending(),
      waitMs: (failures) => (failures > 0 ? Math.min(250 * 2 ** failures, 10_000) : (d.pollMs ?? 200)),
      onError: (err, failures) =>
        this.log.warn({ err: err.message, failures }, 'event relay batch failed; will retry'),
    });
  }

  /** Whether either outbox holds a row (rows another relay has locked count: its pass finds nothing). */
  async anyPending(): Promise<boolean> {
    const r = await this.d.db.query<{ any: boolean }>(
      `SELECT EXISTS (SELECT 1 FROM event_outbox) OR EXISTS (SELECT 1 FROM received_fax_outbox) AS any`,
    );
    return r.rows[0]?.any ?? true;
  }

  /** Publishes one batch; returns how many events went out. Throws (and rolls back) on failure. */
  async runOnce(): Promise<number> {
    const client = await this.d.db.connect();
    try {
      await client.query('BEGIN');
      const { rows } = await client.query<OutboxRow>(
        `SELECT o.transition_id, o.event_id, t.job_id, t.account_id, t.from_state, t.to_state, t.attempt,
                t.at, t.detail, j.failure_code, j.failure_reason, j.page_count, j.pages_sent,
                j.client_reference, j.broadcast_id, j.trace_context
           FROM event_outbox o
           JOIN fax_job_transitions t ON t.id = o.transition_id
           JOIN fax_jobs j ON j.id = t.job_id
          ORDER BY o.transition_id
          LIMIT $1
          FOR UPDATE OF o SKIP LOCKED`,
        [this.d.batchSize ?? 500],
      );
      // Received faxes have their own outbox (their events are no job's transitions): same batch.
      const received = await client.query<ReceivedOutboxRow>(
        `SELECT o.id, o.event_id, o.received_fax_id, f.account_id, o.type, o.details, o.created_at
           FROM received_fax_outbox o
           JOIN received_faxes f ON f.id = o.received_fax_id
          ORDER BY o.id
          LIMIT $1
          FOR UPDATE OF o SKIP LOCKED`,
        [this.d.batchSize ?? 500],
      );
      if (rows.length === 0 && received.rows.length === 0) {
        await client.query('COMMIT');
        return 0;
      }
      const events: AnyEvent[] = [...rows.map(toEvent), ...received.rows.map(toReceivedEvent)];
      const traces = rows.map((r) => r.trace_context ?? null);
      // Pipelined: every publish is in flight at once; the batch commits only if all were confirmed.
      // A fax's event is published in the fax's trace; the batch's span links to those traces.
      await inSpan(
        'events.relay',
        { links: linksTo(traces), attributes: { 'faxline.events': events.length } },
        () =>
          Promise.all(
            events.map((e, i) =>
              inStoredContext(traces[i] ?? null, () => this.d.publish(routingKeyOf(e.account_id, e.type), e)),
            ),
          ),
      );
      await client.query(
        `INSERT INTO webhook_deliveries (endpoint_id, account_id, event_id, event_type, job_id, sequence, payload)
         SELECT w.id, w.account_id, x.event_id, x.type, x.job_id, x.seq, x.payload
           FROM unnest($1::uuid[], $2::uuid[], $3::text[], $4::uuid[], $5::bigint[], $6::jsonb[])
                AS x(account_id, event_id, type, job_id, seq, payload)
           JOIN webhook_endpoints w ON w.account_id = x.account_id
                AND (w.event_types IS NULL OR x.type = ANY(w.event_types))
         ON CONFLICT (endpoint_id, event_id) DO NOTHING`,
        [
          events.map((e) => e.account_id),
          events.map((e) => e.id),
          events.map((e) => e.type),
          events.map(subjectOf),
          events.map((e) => e.sequence),
          events.map((e) => JSON.stringify(e)),
        ],
      );
      await client.query('DELETE FROM event_outbox WHERE transition_id = ANY($1::bigint[])', [
        rows.map((r) => r.transition_id),
      ]);
      if (received.rows.length > 0)
        await client.query('DELETE FROM received_fax_outbox WHERE id = ANY($1::bigint[])', [
          received.rows.map((r) => r.id),
        ]);
      await client.query('COMMIT');
      this.d.onPublished?.(events.length);
      // A full batch of either outbox makes the loop run again at once.
      return Math.max(rows.length, received.rows.length) >= (this.d.batchSize ?? 500)
        ? Math.max(events.length, this.d.batchSize ?? 500)
        : events.length;
    } catch (err) {
      await client.query('ROLLBACK').catch(() => undefined);
      throw err;
    } finally {
      client.release();
    }
  }

  /** Runs until stop(). */
  start(): void {
    this.loop.start();
  }

  async stop(): Promise<void> {
    await this.loop.stop();
  }
}

// Metrics of the events, webhooks and AMQP-intake parts, registered on the process's registry
// (faxline_ prefix, base units, no job/account/number labels).
import client from 'prom-client';
import type { Pool } from '../db/pool.ts';

export type EventMetrics = ReturnType<typeof createEventMetrics>;

export function createEventMetrics(registry: client.Registry, db?: Pool) {
  return {
    eventsPublished: new client.Counter({
      name: 'faxline_events_published_total',
      help: 'Events published to the events exchange by the outbox relay (confirmed).',
      registers: [registry],
    }),
    outboxBacklog: new client.Gauge({
      name: 'faxline_event_outbox_backlog',
      help: 'Committed state changes (of jobs and received faxes) whose event is not published yet (read at scrape time).',
      registers: [registry],
      async collect() {
        if (!db) return;
        const r = await db
          .query<{ n: string }>(
            `SELECT (SELECT count(*) FROM event_outbox) + (SELECT count(*) FROM received_fax_outbox) AS n`,
          )
          .catch(() => ({ rows: [{ n: 'NaN' }] }));
        this.set(Number(r.rows[0]?.n));
      },
    }),
    webhookAttempts: new client.Counter({
      name: 'faxline_webhook_attempts_total',
      help: 'Webhook delivery attempts by outcome (delivered, failed: will be retried or given up).',
      labelNames: ['outcome'] as const,
      registers: [registry],
    }),
    webhookDue: new client.Gauge({
      name: 'faxline_webhook_deliveries_pending',
      help: 'Webhook deliveries not yet delivered nor given up (read at scrape time).',
      registers: [registry],
      async collect() {
        if (!db) return;
        const r = await db
          .query<{ n: string }>(`SELECT count(*) AS n FROM webhook_deliveries WHERE state = 'pending'`)
          .catch(() => ({ rows: [{ n: 'NaN' }] }));
        this.set(Number(r.rows[0]?.n));
      },
    }),
    intakeCommands: new client.Counter({
      name: 'faxline_amqp_intake_commands_total',
      help: 'Commands decided by the AMQP intake, by command type and outcome (accepted, rejected).',
      labelNames: ['type', 'outcome'] as const,
      registers: [registry],
    }),
    intakeBatchSize: new client.Histogram({
      name: 'faxline_amqp_intake_batch_jobs',
      help: 'Jobs committed per AMQP-intake transaction.',
      buckets: [1, 5, 10, 25, 50, 100, 250, 500],
      registers: [registry],
    }),
  };
}

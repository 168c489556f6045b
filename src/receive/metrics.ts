// Metrics of the receiving side, on the process's registry (faxline_ prefix, base units, no number,
// account or call labels).
import client from 'prom-client';
import { refusalStatus, type RefusalCause } from './routing.ts';

export type ReceiveMetrics = ReturnType<typeof createReceiveMetrics>;

export function createReceiveMetrics(registry: client.Registry) {
  const refused = new client.Counter<'cause'>({
    name: 'faxline_inbound_calls_refused_total',
    help: 'Inbound calls refused, by cause: source_not_allowed (403), auth_required (401 challenge: no or expired digest credentials; one per call when SIP_INBOUND_USERNAME is set), auth_failed (403: wrong digest credentials), unknown_number (404), receiving_off (480), over_line_limit (486).',
    labelNames: ['cause'],
    registers: [registry],
  });
  // Every cause is exported from the start (at 0), so a rate() over it exists before the first refusal.
  for (const cause of Object.keys(refusalStatus) as RefusalCause[]) refused.inc({ cause }, 0);
  return {
    answered: new client.Counter({
      name: 'faxline_inbound_calls_answered_total',
      help: 'Inbound fax calls answered (routed to an account whose number receives).',
      registers: [registry],
    }),
    refused,
    pages: new client.Counter({
      name: 'faxline_pages_received_total',
      help: 'Fax pages received and stored (partial receptions included).',
      registers: [registry],
    }),
    duration: new client.Histogram<'status'>({
      name: 'faxline_receive_duration_seconds',
      help: 'Duration of a reception from answer to the end of the fax exchange, by stored status.',
      labelNames: ['status'],
      buckets: [5, 15, 30, 60, 120, 300, 600, 1200, 2400, 3600],
      registers: [registry],
    }),
    stored: new client.Counter<'status'>({
      name: 'faxline_received_faxes_stored_total',
      help: 'Received faxes stored, by status: received, partial (pages kept), failed (no page).',
      labelNames: ['status'],
      registers: [registry],
    }),
  };
}

// Prometheus metrics. One registry per process; names use the faxline_ prefix, base units and
// bounded labels (never a fax number, job id or account id).
import client from 'prom-client';

export type Metrics = ReturnType<typeof createMetrics>;

export function createMetrics(process_: string) {
  const registry = new client.Registry();
  registry.setDefaultLabels({ process: process_ });
  client.collectDefaultMetrics({ register: registry, prefix: 'faxline_' });
  const m = {
    registry,
    httpRequests: new client.Counter({
      name: 'faxline_http_requests_total',
      help: 'HTTP requests by route, method and status code.',
      labelNames: ['route', 'method', 'status'] as const,
      registers: [registry],
    }),
    httpDuration: new client.Histogram({
      name: 'faxline_http_request_duration_seconds',
      help: 'HTTP request latency by route and method.',
      labelNames: ['route', 'method'] as const,
      buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers: [registry],
    }),
    commandsPublished: new client.Counter({
      name: 'faxline_commands_published_total',
      help: 'Messages published to RabbitMQ by exchange kind, routing key and outcome.',
      labelNames: ['exchange', 'type', 'outcome'] as const,
      registers: [registry],
    }),
    commandsConsumed: new client.Counter({
      name: 'faxline_commands_consumed_total',
      help: 'Command deliveries handled, by queue and outcome (ack, retry, dead_letter).',
      labelNames: ['queue', 'outcome'] as const,
      registers: [registry],
    }),
    transitions: new client.Counter({
      name: 'faxline_job_transitions_total',
      help: 'Fax job state transitions, by target state.',
      labelNames: ['to'] as const,
      registers: [registry],
    }),
    outcomes: new client.Counter({
      name: 'faxline_transmission_outcomes_total',
      help: 'Transmission attempts by backend and outcome (delivered or the failure type).',
      labelNames: ['backend', 'outcome'] as const,
      registers: [registry],
    }),
    pagesSent: new client.Counter({
      name: 'faxline_pages_sent_total',
      help: 'Fax pages confirmed by the receiver.',
      labelNames: ['backend'] as const,
      registers: [registry],
    }),
    linesInUse: new client.Gauge({
      name: 'faxline_backend_lines_in_use',
      help: 'Calls in progress on this process, by backend.',
      labelNames: ['backend'] as const,
      registers: [registry],
    }),
    waitingForLine: new client.Gauge({
      name: 'faxline_jobs_waiting_for_line',
      help: 'Fax jobs waiting for a line, by state (queued, blocked, retry_waiting), installation-wide.',
      labelNames: ['state'] as const,
      registers: [registry],
    }),
    acceptToDelivered: new client.Histogram({
      name: 'faxline_accept_to_delivered_seconds',
      help: 'Time from the job being accepted to its delivery.',
      buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 10800],
      registers: [registry],
    }),
    preparation: new client.Histogram({
      name: 'faxline_document_preparation_seconds',
      help: 'Time to fetch, check and prepare the documents of one job.',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers: [registry],
    }),
    preparationFailures: new client.Counter({
      name: 'faxline_document_failures_total',
      help: 'Jobs whose documents failed preparation, by reason code.',
      labelNames: ['reason'] as const,
      registers: [registry],
    }),
  };
  return m;
}

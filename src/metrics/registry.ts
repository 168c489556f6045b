// Prometheus metrics. One registry per process; names use the faxline_ prefix, base units and
// bounded labels (never a fax number, job id or account id). The full list, with the process kinds
// that export each metric, is in docs/observability.md.
import client from 'prom-client';

export type Metrics = ReturnType<typeof createMetrics>;

export interface MetricsOptions {
  /** false: every metric is a no-op and the registry stays empty (for measuring the cost of metrics). */
  enabled?: boolean;
}

/** Line time of one page in the real world is 10-90 s; the sped-up simulated line lands in the first bucket. */
const pageBuckets = [0.5, 1, 2.5, 5, 10, 15, 20, 30, 45, 60, 90, 120, 180];
/** How late a scheduled fax left `scheduled`; the target is p99 under 0.5 s. */
const latenessBuckets = [0.05, 0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60, 300, 900];

/** Stands in for any metric when metrics are disabled: every property is itself, every call returns itself. */
const noop: unknown = new Proxy(() => undefined, {
  get: () => noop,
  apply: () => noop,
});

export function createMetrics(process_: string, o: MetricsOptions = {}) {
  const registry = new client.Registry();
  registry.setDefaultLabels({ process: process_ });
  const enabled = o.enabled ?? true;
  // With metrics disabled the metric objects still exist (callers need no checks) but register nowhere
  // and their methods do nothing.
  const registers = [registry];
  if (enabled) {
    // The event-loop lag is sampled every 100 ms, not prom-client's 10 ms: the 10 ms timer alone
    // cost an idle process about 9 ms of CPU a second (0.5 s a minute; bench:idle); at 100 ms
    // it is about 1.4 ms, and a scrape interval still holds 150 samples.
    client.collectDefaultMetrics({
      register: registry,
      prefix: 'faxline_',
      eventLoopMonitoringPrecision: 100,
    });
    // prom-client names three gauges *_total, which Prometheus reserves for counters (promtool check
    // metrics refuses them). The same numbers remain, by type, in faxline_nodejs_active_{handles,
    // requests,resources}; sum() over `type` gives the totals.
    for (const n of ['handles', 'requests', 'resources'])
      registry.removeSingleMetric(`faxline_nodejs_active_${n}_total`);
  }
  const counter = <L extends string>(c: client.CounterConfiguration<L>) =>
    enabled ? new client.Counter(c) : (noop as client.Counter<L>);
  const histogram = <L extends string>(c: client.HistogramConfiguration<L>) =>
    enabled ? new client.Histogram(c) : (noop as client.Histogram<L>);
  const gauge = <L extends string>(c: client.GaugeConfiguration<L>) =>
    enabled ? new client.Gauge(c) : (noop as client.Gauge<L>);
  const m = {
    registry,
    enabled,
    httpRequests: counter({
      name: 'faxline_http_requests_total',
      help: 'HTTP requests by route, method and status code.',
      labelNames: ['route', 'method', 'status'] as const,
      registers,
    }),
    httpDuration: histogram({
      name: 'faxline_http_request_duration_seconds',
      help: 'HTTP request latency by route and method.',
      labelNames: ['route', 'method'] as const,
      buckets: [0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5],
      registers,
    }),
    commandsPublished: counter({
      name: 'faxline_commands_published_total',
      help: 'Messages published to RabbitMQ by exchange kind, routing key and outcome.',
      labelNames: ['exchange', 'type', 'outcome'] as const,
      registers,
    }),
    commandsConsumed: counter({
      name: 'faxline_commands_consumed_total',
      help: 'Command deliveries handled, by queue and outcome (ack, retry, dead_letter).',
      labelNames: ['queue', 'outcome'] as const,
      registers,
    }),
    amqpReplies: counter({
      name: 'faxline_amqp_replies_total',
      help: 'Answers to AMQP-intake commands by outcome: sent, refused (reply_to not one the sender may use), unroutable (no queue of the account bound), failed.',
      labelNames: ['outcome'] as const,
      registers,
    }),
    transitions: counter({
      name: 'faxline_job_transitions_total',
      help: 'Fax job state transitions made by this process, by target state.',
      labelNames: ['to'] as const,
      registers,
    }),
    outcomes: counter({
      name: 'faxline_transmission_outcomes_total',
      help: 'Transmission attempts by backend and outcome (delivered or the failure type).',
      labelNames: ['backend', 'outcome'] as const,
      registers,
    }),
    attempts: counter({
      name: 'faxline_transmission_attempts_total',
      help: 'Calls started (jobs fenced into dialling), by backend.',
      labelNames: ['backend'] as const,
      registers,
    }),
    retries: counter({
      name: 'faxline_transmission_retries_total',
      help: 'Calls started that were a retry of an earlier attempt of the same job (attempt > 1), by backend.',
      labelNames: ['backend'] as const,
      registers,
    }),
    pagesSent: counter({
      name: 'faxline_pages_sent_total',
      help: 'Fax pages confirmed by the receiver.',
      labelNames: ['backend'] as const,
      registers,
    }),
    pageDuration: histogram({
      name: 'faxline_page_transmission_seconds',
      help: 'Line time of one page, from the end of training or the previous page to its confirmation.',
      labelNames: ['backend'] as const,
      buckets: pageBuckets,
      registers,
    }),
    linesInUse: gauge({
      name: 'faxline_backend_lines_in_use',
      help: 'Calls in progress on this process, by backend.',
      labelNames: ['backend'] as const,
      registers,
    }),
    waitingForLine: gauge({
      name: 'faxline_jobs_waiting_for_line',
      help: 'Fax jobs waiting for a line, by state (queued, blocked, retry_waiting), installation-wide.',
      labelNames: ['state'] as const,
      registers,
    }),
    acceptToDelivered: histogram({
      name: 'faxline_accept_to_delivered_seconds',
      help: 'Time from the job being accepted to its delivery.',
      buckets: [1, 5, 15, 30, 60, 120, 300, 600, 1800, 3600, 10800],
      registers,
    }),
    preparation: histogram({
      name: 'faxline_document_preparation_seconds',
      help: 'Time to fetch, check and prepare the documents of one job.',
      buckets: [0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    }),
    broadcastRenders: counter({
      name: 'faxline_broadcast_renders_total',
      help: "Preparations of a broadcast recipient's fax, by how its documents' pages were had: rendered (once per broadcast and quality), reused (the stored render of another recipient), or own_header (rendered for this recipient alone: its Fax Default's header line puts the recipient's own values on every page).",
      labelNames: ['outcome'] as const,
      registers,
    }),
    repeatRenders: counter({
      name: 'faxline_repeat_renders_total',
      help: "Preparations of a fax (not a broadcast recipient's) whose documents' bytes were at hand, by how its document pages were had: rendered (and kept for the account's next send of the same documents), reused (the kept pages of an earlier send of the same documents by the same account), or own_header (rendered for this fax alone: its Fax Default's header line puts its own values on every page).",
      labelNames: ['outcome'] as const,
      registers,
    }),
    preparationFailures: counter({
      name: 'faxline_document_failures_total',
      help: 'Jobs whose documents failed preparation, by reason code.',
      labelNames: ['reason'] as const,
      registers,
    }),
    scheduleLateness: histogram({
      name: 'faxline_schedule_lateness_seconds',
      help: 'How long after its scheduled time a scheduled fax was released into the pipeline.',
      buckets: latenessBuckets,
      registers,
    }),
    collectorErrors: counter({
      name: 'faxline_collector_errors_total',
      help: 'Failed reads of the values behind gauges computed at scrape time, by collector.',
      labelNames: ['collector'] as const,
      registers,
    }),
    scheduledCancels: counter({
      name: 'faxline_scheduled_cancels_total',
      help: 'Cancel-schedule requests by outcome (cancelled, refused, not_found).',
      labelNames: ['outcome'] as const,
      registers,
    }),
  };
  return m;
}

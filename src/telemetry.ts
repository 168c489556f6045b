// Starts OpenTelemetry tracing when OTEL_EXPORTER_OTLP_ENDPOINT is set; does nothing otherwise (no SDK
// module is even loaded). Entry points call `startTelemetry()` before they import the rest of the
// service, because the pg and amqplib instrumentations patch those modules as they load: for ES
// modules through import-in-the-middle's loader hook, registered here with `module.register`.
// See docs/observability.md#tracing.
import { register } from 'node:module';
import type { Config } from './config.ts';
import type { Instrumentation } from '@opentelemetry/instrumentation';
import type { Span as SdkSpan, SpanProcessor } from '@opentelemetry/sdk-trace';
import { setTracingOn } from './trace.ts';

export interface TelemetryOptions {
  endpoint: string;
  protocol: Config['OTEL_EXPORTER_OTLP_PROTOCOL'];
  serviceName: string;
  /** The components this process runs (faxline.process), e.g. `all` or `send`. */
  processName: string;
  /** Export every span at once instead of in batches (tests). */
  simple?: boolean;
}

export interface Telemetry {
  /** Exports what is still buffered and stops. */
  shutdown(): Promise<void>;
}

let running: Telemetry | null = null;
/** Made once per process (the loader hook can be registered only once); a restart re-enables them. */
let instrumentations: Instrumentation[] | undefined;

/**
 * Registers the loader hook, for the instrumented packages only (the service's own .ts files are not
 * wrapped; CommonJS files those packages require are patched by require-in-the-middle), and makes
 * the instrumentations (disabled until a tracer provider is set).
 */
async function loadInstrumentations(): Promise<Instrumentation[]> {
  register('@opentelemetry/instrumentation/hook.mjs', import.meta.url, {
    data: { include: ['pg', 'pg-pool', 'amqplib'] },
  });
  const { PgInstrumentation } = await import('@opentelemetry/instrumentation-pg');
  const { AmqplibInstrumentation } = await import('@opentelemetry/instrumentation-amqplib');
  const { FastifyOtelInstrumentation } = await import('@fastify/otel');
  return [
    // Statement text only (ours has placeholders, no values); parameters are never recorded
    // (enhancedDatabaseReporting stays off). Queries outside a fax's span (polling loops) make none.
    new PgInstrumentation({
      enabled: false,
      requireParentSpan: true,
      enhancedDatabaseReporting: false,
      // A pool checkout is not worth a span of its own: the statements are.
      ignoreConnectSpans: true,
    }),
    new AmqplibInstrumentation({ enabled: false }),
    new FastifyOtelInstrumentation({
      enabled: false,
      registerOnInitialization: true,
      // One span for the request and one for its handler; a span per lifecycle hook (auth, rate
      // limit, ...) cost more than it told (bench/results/tracing-cost-*).
      instrumentHooks: false,
      // Probes and scrapes are not traced.
      ignorePaths: (r) => r.url === '/healthz' || r.url === '/readyz' || r.url === '/metrics',
      // url.path is the raw URL with its query string: only the path is kept.
      requestHook: (span, request) => span.setAttribute('url.path', request.url.split('?', 1)[0] ?? ''),
    }),
  ];
}

/** Attribute keys whose values are URLs or paths: their query string and fragment are cut off. */
const URL_KEYS = new Set(['url.path', 'url.full', 'url.query', 'http.target', 'http.url', 'messaging.url']);
/** Something shaped like an E.164 number, wherever it is (a second net: nothing should put one there). */
const E164_LIKE = /\+[1-9]\d{6,14}/g;

export async function startTracing(o: TelemetryOptions): Promise<Telemetry> {
  if (running) return running;
  const api = await import('@opentelemetry/api');
  const { AsyncLocalStorageContextManager } = await import('@opentelemetry/context-async-hooks');
  const { W3CTraceContextPropagator } = await import('@opentelemetry/core');
  const { resourceFromAttributes } = await import('@opentelemetry/resources');
  const { TracerProvider, BatchSpanProcessor, SimpleSpanProcessor } =
    await import('@opentelemetry/sdk-trace');
  instrumentations ??= await loadInstrumentations();

  const url = `${o.endpoint.replace(/\/+$/, '')}/v1/traces`;
  const exporter =
    o.protocol === 'http/json'
      ? new (await import('@opentelemetry/exporter-trace-otlp-http')).OTLPTraceExporter({ url })
      : new (await import('@opentelemetry/exporter-trace-otlp-proto')).OTLPTraceExporter({ url });

  // Runs before the exporting processor, while the span can still be changed.
  const scrub: SpanProcessor = {
    onStart: () => undefined,
    onEnding: (span: SdkSpan) => {
      for (const [k, v] of Object.entries(span.attributes)) {
        if (typeof v !== 'string') continue;
        let clean = URL_KEYS.has(k) ? v.replace(/[?#].*$/s, '') : v;
        clean = clean.replace(E164_LIKE, '[number]');
        if (clean !== v) span.setAttribute(k, clean);
      }
    },
    onEnd: () => undefined,
    forceFlush: () => Promise.resolve(),
    shutdown: () => Promise.resolve(),
  };
  const provider = new TracerProvider({
    resource: resourceFromAttributes({ 'service.name': o.serviceName, 'faxline.process': o.processName }),
    spanProcessors: [
      scrub,
      o.simple ? new SimpleSpanProcessor({ exporter }) : new BatchSpanProcessor({ exporter }),
    ],
  });
  api.context.setGlobalContextManager(new AsyncLocalStorageContextManager().enable());
  api.propagation.setGlobalPropagator(new W3CTraceContextPropagator());
  api.trace.setGlobalTracerProvider(provider);
  for (const i of instrumentations) {
    i.setTracerProvider(provider);
    i.enable();
  }
  setTracingOn(true);
  running = {
    shutdown: async () => {
      setTracingOn(false);
      for (const i of instrumentations ?? []) i.disable();
      await provider.shutdown();
      api.trace.disable();
      api.propagation.disable();
      api.context.disable();
      running = null;
    },
  };
  return running;
}

/** Tracing as the configuration says: started when an endpoint is set, else nothing. */
export async function startTelemetry(
  cfg: Pick<Config, 'OTEL_EXPORTER_OTLP_ENDPOINT' | 'OTEL_EXPORTER_OTLP_PROTOCOL' | 'OTEL_SERVICE_NAME'>,
  processName: string,
): Promise<Telemetry | null> {
  if (!cfg.OTEL_EXPORTER_OTLP_ENDPOINT) return null;
  return startTracing({
    endpoint: cfg.OTEL_EXPORTER_OTLP_ENDPOINT,
    protocol: cfg.OTEL_EXPORTER_OTLP_PROTOCOL,
    serviceName: cfg.OTEL_SERVICE_NAME,
    processName,
  });
}

/** Flushes and stops tracing if it runs (on shutdown, before the process exits). */
export async function stopTelemetry(): Promise<void> {
  await running?.shutdown();
}

// Tracing helpers on the OpenTelemetry API alone: spans, and the trace context a fax carries from
// process to process (AMQP headers, pg-boss job data, the fax_jobs.trace_context column). Without
// OTEL_EXPORTER_OTLP_ENDPOINT no SDK is started (src/telemetry.ts), `tracingOn` stays false and every
// helper here returns at once: no span objects, no propagation work.
//
// What a span may carry (docs/observability.md#tracing): ids, counts, states, codes and durations.
// Never a fax number, caller id, name, subject, file name, URL or content: the callers below pass
// attributes of that kind only, and the SDK's scrubbing processor (src/telemetry.ts) is a second net.
import {
  context,
  propagation,
  ROOT_CONTEXT,
  SpanKind,
  SpanStatusCode,
  trace,
  type Attributes,
  type Context,
  type Link,
  type Span,
} from '@opentelemetry/api';

export { SpanKind };
export type { Span, Context };

let tracingOn = false;

/** Called by src/telemetry.ts once its SDK is registered. */
export function setTracingOn(on: boolean): void {
  tracingOn = on;
}

export function isTracingOn(): boolean {
  return tracingOn;
}

const tracer = () => trace.getTracer('faxline');

/**
 * The active span's context as a W3C `traceparent` value (plus `tracestate` after a space when it has
 * one), to store with a job or put in its command; null when tracing is off or nothing is active.
 */
export function currentTraceContext(ctx: Context = context.active()): string | null {
  if (!tracingOn) return null;
  const carrier: Record<string, string> = {};
  propagation.inject(ctx, carrier);
  const tp = carrier.traceparent;
  if (!tp) return null;
  return carrier.tracestate ? `${tp} ${carrier.tracestate}` : tp;
}

/** The context a stored trace context stands for (ROOT when there is none or it is malformed). */
export function contextFromStored(stored: string | null | undefined): Context {
  if (!tracingOn || !stored) return ROOT_CONTEXT;
  const [traceparent, tracestate] = stored.split(' ', 2);
  return propagation.extract(ROOT_CONTEXT, {
    traceparent,
    ...(tracestate ? { tracestate } : {}),
  });
}

/** AMQP headers carrying a stored trace context: `traceparent` (and `tracestate`). */
export function traceHeaders(stored: string | null | undefined): Record<string, string> {
  if (!stored) return {};
  const [traceparent, tracestate] = stored.split(' ', 2);
  return { traceparent: traceparent!, ...(tracestate ? { tracestate } : {}) };
}

/** The trace context in a message's headers (RabbitMQ delivery), as stored form. */
export function storedFromHeaders(headers: Record<string, unknown> | undefined): string | null {
  const tp = headers?.traceparent;
  if (typeof tp !== 'string' && !Buffer.isBuffer(tp)) return null;
  const ts = headers?.tracestate;
  const tps = String(tp);
  return typeof ts === 'string' && ts !== '' ? `${tps} ${ts}` : tps;
}

/** Runs `fn` with `ctx` active (for code that publishes or queries on a fax's behalf). */
export function withContext<T>(ctx: Context, fn: () => T): T {
  if (!tracingOn) return fn();
  return context.with(ctx, fn);
}

/**
 * The parent of a span for work on a RabbitMQ delivery: the active span (the amqplib
 * instrumentation's consume span, itself a child of the message's traceparent), else the context in
 * the message's headers.
 */
export function deliveryParent(headers: Record<string, unknown> | undefined): Context {
  const active = context.active();
  if (!tracingOn) return active;
  const sc = trace.getSpanContext(active);
  if (sc && trace.isSpanContextValid(sc)) return active;
  return contextFromStored(storedFromHeaders(headers));
}

/** Runs `fn` in the stored context when there is one, else in the active one. */
export function inStoredContext<T>(stored: string | null, fn: () => T): T {
  if (!tracingOn || !stored) return fn();
  return context.with(contextFromStored(stored), fn);
}

export interface SpanOptions {
  /** Parent: the active context when absent. */
  parent?: Context;
  /** Other traces this span belongs to (a batch of faxes: one link per fax). */
  links?: Link[];
  kind?: SpanKind;
  attributes?: Attributes;
}

/**
 * Runs `fn` in a new active span; the span ends when `fn` settles and records an exception's class
 * (its name, never its message: messages can quote input) with an error status.
 */
export async function inSpan<T>(
  name: string,
  o: SpanOptions,
  fn: (span: Span | null) => Promise<T>,
): Promise<T> {
  if (!tracingOn) return fn(null);
  const parent = o.parent ?? context.active();
  return tracer().startActiveSpan(
    name,
    {
      ...(o.kind !== undefined ? { kind: o.kind } : {}),
      ...(o.attributes ? { attributes: o.attributes } : {}),
      ...(o.links ? { links: o.links } : {}),
    },
    parent,
    async (span) => {
      try {
        return await fn(span);
      } catch (err) {
        span.setStatus({ code: SpanStatusCode.ERROR, message: errorClass(err) });
        span.setAttribute('error.type', errorClass(err));
        throw err;
      } finally {
        span.end();
      }
    },
  );
}

/** Adds an event (a name and ids or counts only) to the active span, when there is one. */
export function spanEvent(name: string, attributes?: Attributes): void {
  if (!tracingOn) return;
  trace.getActiveSpan()?.addEvent(name, attributes);
}

/** Sets attributes (ids, counts, states, codes only) on the active span, when there is one. */
export function spanAttributes(attributes: Attributes): void {
  if (!tracingOn) return;
  trace.getActiveSpan()?.setAttributes(attributes);
}

/** A link to each stored trace context (the faxes a batch worked on), at most `max`. */
export function linksTo(stored: (string | null | undefined)[], max = 32): Link[] {
  if (!tracingOn) return [];
  const out: Link[] = [];
  for (const s of stored) {
    if (out.length >= max) break;
    const sc = trace.getSpanContext(contextFromStored(s));
    if (sc && trace.isSpanContextValid(sc)) out.push({ context: sc });
  }
  return out;
}

function errorClass(err: unknown): string {
  if (err instanceof Error) {
    const code = (err as { code?: unknown }).code;
    return typeof code === 'string' && /^[A-Za-z0-9_.-]{1,40}$/.test(code) ? `${err.name}:${code}` : err.name;
  }
  return typeof err;
}

-- faxline schema, version 30: the trace context of a fax (issue 32, part 4).
--
-- A fax is one trace from its request to its last call. The request's W3C trace context (the
-- `traceparent` value, and ` tracestate` after a space when there is one) is written with the job at
-- acceptance; every later step that takes the job from PostgreSQL rather than from a message (the
-- line caller's claim, the outbox sweep, a scheduled fax firing) continues that trace from here.
-- NULL when tracing was off at acceptance. An id pair, never content (docs/observability.md#tracing).
ALTER TABLE fax_jobs ADD COLUMN trace_context text
  CHECK (trace_context IS NULL OR length(trace_context) <= 600);

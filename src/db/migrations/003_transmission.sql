-- Transmission: what the line stage needs on the job, the line lease, and one row per call attempt.
-- The line dispatcher (src/lines/dispatcher.ts) claims ready jobs from PostgreSQL; see README
-- "Lines, priorities and retries".

-- Encoded size of each page on the line, stored when the job becomes ready (so any worker process
-- can place the call without re-rendering).
ALTER TABLE fax_jobs ADD COLUMN page_bytes integer[];
-- When the job last became ready for a line (queued, or due again after a retry wait): the age used
-- for ordering and for priority ageing.
ALTER TABLE fax_jobs ADD COLUMN ready_at timestamptz;
-- The process driving the current call and until when its lease holds. A lapsed lease means the
-- process is gone: the call's outcome is unknown (never resent blindly).
ALTER TABLE fax_jobs ADD COLUMN lease_owner text;
ALTER TABLE fax_jobs ADD COLUMN lease_until timestamptz;

-- Jobs waiting for a line, and calls in progress (line, destination and lease accounting).
CREATE INDEX fax_jobs_line_ready ON fax_jobs (ready_at)
  WHERE state IN ('queued', 'blocked', 'retry_waiting');
CREATE INDEX fax_jobs_line_active ON fax_jobs (fax_number)
  WHERE state IN ('dialling', 'sending');

-- One row per call attempt. UNIQUE (job_id, attempt) is a second fence behind the state transition:
-- an attempt number can be started once.
CREATE TABLE fax_attempts (
  id                 bigserial PRIMARY KEY,
  job_id             uuid NOT NULL REFERENCES fax_jobs(id) ON DELETE CASCADE,
  account_id         uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  attempt            integer NOT NULL,
  backend            text NOT NULL,
  worker             text NOT NULL,
  started_at         timestamptz NOT NULL DEFAULT now(),
  ended_at           timestamptz,
  -- delivered | failed | unknown; NULL while the call is in progress
  outcome            text CHECK (outcome IN ('delivered', 'failed', 'unknown')),
  failure_type       text,
  failure_code       text,
  failure_message    text,
  retryable          boolean,
  reached_fax        boolean NOT NULL DEFAULT false,
  pages_sent         integer NOT NULL DEFAULT 0,
  page_count         integer NOT NULL,
  resumed_after_page integer NOT NULL DEFAULT 0,
  bit_rate           integer,
  remote_station_id  text,
  duration_ms        integer,
  UNIQUE (job_id, attempt)
);

-- The customer API reads attempts under row-level security, like the job itself (002_api.sql).
SELECT faxline_enable_tenant_rls('fax_attempts');
GRANT SELECT ON fax_attempts TO faxline_api;

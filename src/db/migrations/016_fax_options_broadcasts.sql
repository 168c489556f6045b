-- faxline schema, version 16: per-fax options and broadcasts (issue 21, items 1 and 4).
--
-- 1. Broadcasts: one send to many recipients. Each recipient gets its own fax job (fax_jobs.broadcast_id);
--    the documents are stored once, on the broadcast's first job, and the other jobs name that job in
--    source_job_id (as a forward does), so retention and document deletion treat them like forwards.
--    request_id makes a repeated AMQP command (the same message_id) find the broadcast it made.
CREATE TABLE broadcasts (
  id          uuid PRIMARY KEY,
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  recipients  integer NOT NULL CHECK (recipients > 0),
  request_id  text,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE UNIQUE INDEX broadcasts_amqp_command ON broadcasts (account_id, request_id) WHERE request_id LIKE 'amqp/%';
SELECT faxline_enable_tenant_rls('broadcasts');
GRANT SELECT, INSERT, DELETE ON broadcasts TO faxline_api;

-- 2. Per-fax options. client_reference: the sender's own reference (1-128 printable characters),
--    returned with the fax and in its events, searchable in GET /v1/faxes. max_dials and
--    give_up_after (seconds since the fax was first ready) override the installation's MAX_DIALS and
--    KILL_TIME_SECONDS for this fax; null = the installation's. Bounds as in src/domain/schemas.ts.
ALTER TABLE fax_jobs
  ADD COLUMN client_reference text,
  ADD COLUMN max_dials integer,
  ADD COLUMN give_up_after integer,
  ADD COLUMN broadcast_id uuid REFERENCES broadcasts(id) ON DELETE CASCADE,
  -- The recipient's place (from 0) in the broadcast's recipients array.
  ADD COLUMN broadcast_position integer;
-- NOT VALID: every existing row has these columns null, so no scan of fax_jobs under this lock;
-- the checks hold for every row written from now on.
ALTER TABLE fax_jobs
  ADD CONSTRAINT fax_jobs_client_reference CHECK (client_reference IS NULL OR length(client_reference) BETWEEN 1 AND 128) NOT VALID,
  ADD CONSTRAINT fax_jobs_max_dials CHECK (max_dials IS NULL OR max_dials BETWEEN 1 AND 100) NOT VALID,
  ADD CONSTRAINT fax_jobs_give_up_after CHECK (give_up_after IS NULL OR give_up_after BETWEEN 60 AND 604800) NOT VALID,
  ADD CONSTRAINT fax_jobs_broadcast_position
    CHECK ((broadcast_id IS NULL) = (broadcast_position IS NULL) AND (broadcast_position IS NULL OR broadcast_position >= 0)) NOT VALID;

-- 3. The list filters of GET /v1/faxes, each with the list's keyset order (created_at DESC, id DESC)
--    behind its equality, under the account (row-level security adds account_id = the account):
--    state and the date range already have fax_jobs_account_state and fax_jobs_account_page.
CREATE INDEX fax_jobs_account_reference ON fax_jobs (account_id, client_reference, created_at DESC, id DESC)
  WHERE client_reference IS NOT NULL;
CREATE INDEX fax_jobs_account_number ON fax_jobs (account_id, fax_number, created_at DESC, id DESC);
-- A broadcast's jobs, in the order GET /v1/broadcasts/{id} pages them.
CREATE INDEX fax_jobs_broadcast ON fax_jobs (broadcast_id, created_at, id) WHERE broadcast_id IS NOT NULL;

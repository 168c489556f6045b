-- faxline schema, version 14: customers manage their Fax Defaults and Smart Templates over the API
-- (issue 19).
--
-- 1. The API role writes both tables. Row-level security (002, 010) keeps each account to its own
--    rows: the policy's WITH CHECK refuses a row of another account on INSERT and UPDATE.
GRANT INSERT, UPDATE, DELETE ON fax_defaults, smart_templates TO faxline_api;

-- 2. A fax keeps the Fax Default values it resolved when it was accepted. Until now a job stored only
--    fax_default_id and the worker read the row when it rendered the cover, so an update made after
--    acceptance changed a fax already accepted, and a deletion (ON DELETE SET NULL) took its cover
--    away. The values are now frozen on the job; NULL for jobs accepted before this migration (the
--    worker then reads the row, as before) and for jobs without a Fax Default.
ALTER TABLE fax_jobs ADD COLUMN fax_default jsonb;

-- 3. Smart Templates: the uploaded file's name, what the upload found in the PDF (its pages and form
--    fields; NULL for templates stored before this migration until the API reads them), and deletion that
--    leaves faxes already accepted with their template. A template is never modified after upload; a
--    deleted one that faxes still refer to is only marked (deleted_at): the API no longer shows it nor
--    accepts it in a send, the worker still fills it for the faxes accepted with it.
ALTER TABLE smart_templates
  ADD COLUMN file_name text,
  ADD COLUMN page_count integer,
  ADD COLUMN fields jsonb,
  ADD COLUMN deleted_at timestamptz;
CREATE INDEX smart_templates_account_live ON smart_templates (account_id, created_at, id)
  WHERE deleted_at IS NULL;
CREATE INDEX fax_defaults_account_created ON fax_defaults (account_id, created_at, id);

-- 4. Deleting a Fax Default sets fax_jobs.fax_default_id to NULL (ON DELETE SET NULL), and deleting a
--    Smart Template first looks for faxes that use it: without these indexes each deletion read the
--    whole fax_jobs table. (Built in the migration's transaction, like 006's: writes to fax_jobs wait
--    for the build.)
CREATE INDEX fax_jobs_fax_default ON fax_jobs (fax_default_id) WHERE fax_default_id IS NOT NULL;
CREATE INDEX fax_jobs_smart_template ON fax_jobs (smart_document_id) WHERE smart_document_id IS NOT NULL;

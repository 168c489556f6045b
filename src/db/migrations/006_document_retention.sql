-- Document retention and deletion (src/documents/store.ts). A purged or deleted document keeps its
-- row (position, byte_size) so the job still shows how many documents it had, but loses its content,
-- its file_url and its file name; deleted_at and deleted_reason say when and why.
ALTER TABLE fax_documents
  ADD COLUMN deleted_at timestamptz,
  ADD COLUMN deleted_reason text CHECK (deleted_reason IN ('retention', 'request'));

-- The purge walks only documents that still hold content.
CREATE INDEX fax_documents_live ON fax_documents (job_id) WHERE deleted_at IS NULL;
-- Forwards share the documents of their source job: the purge waits for them too.
CREATE INDEX IF NOT EXISTS fax_jobs_source_job ON fax_jobs (source_job_id) WHERE source_job_id IS NOT NULL;

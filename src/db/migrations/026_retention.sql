-- faxline schema, version 26: retention per account (issue 32, item 3; docs/audit-retention.md).
--
-- 1. The account's retention, set with PATCH /v1/workspace. NULL: the installation's default
--    (DOCUMENT_RETENTION_DAYS). received_retention_days exists since migration 021 (set by the
--    operator until now); the API now sets it too.
--    - sent_retention_days: days a final fax keeps its content (documents, rendered image; the
--      transmission report is made on demand from them and stored nowhere).
--    - zero_footprint: a sent fax's content is deleted at the first purge pass after it is final, a
--      received fax's images at the first pass after it was downloaded (or marked read).
ALTER TABLE accounts
  ADD COLUMN sent_retention_days integer CHECK (sent_retention_days BETWEEN 1 AND 36500),
  ADD COLUMN zero_footprint boolean NOT NULL DEFAULT false;
GRANT UPDATE (sent_retention_days, received_retention_days, zero_footprint) ON accounts TO faxline_api;

-- 2. A received fax's first download of its images (zero footprint deletes after it).
ALTER TABLE received_faxes ADD COLUMN downloaded_at timestamptz;
GRANT UPDATE (downloaded_at) ON received_faxes TO faxline_api;

-- 3. DELETE /v1/faxes/{id}/content runs under the API role (row-level security confines it to the
--    account): it wipes the documents' content columns and deletes the rendered images, nothing more.
GRANT UPDATE (content, file_url, file_name, deleted_at, deleted_reason) ON fax_documents TO faxline_api;
GRANT SELECT, DELETE ON fax_renders TO faxline_api;
GRANT SELECT (job_id), DELETE ON document_renders TO faxline_api;

-- 4. The purge finds final faxes per account through the live-documents index (006); received
--    images still held, through this one.
CREATE INDEX received_faxes_images_held ON received_faxes (account_id, received_at)
  WHERE tiff IS NOT NULL OR pdf IS NOT NULL;

-- faxline schema, version 17: the rendered pages of a broadcast's documents, kept once and reused by
-- every recipient's fax (only the cover page differs). Keyed by the job that holds the documents and
-- the quality; one row per (job, quality). A row holds either the pages or, when the documents were
-- refused (a permanent document failure), that failure, so the other recipients' faxes fail with the
-- same reason without checking the documents again. Deleted with the documents (retention, deletion
-- request) and with the job.
CREATE TABLE document_renders (
  job_id         uuid NOT NULL REFERENCES fax_jobs(id) ON DELETE CASCADE,
  quality        text NOT NULL CHECK (quality IN ('low', 'standard', 'hd')),
  account_id     uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  document_pages integer CHECK (document_pages > 0),
  -- Each page's T.6 (MMR) strip, and its width and height in pixels, in order.
  pages          bytea[],
  widths         integer[],
  heights        integer[],
  failure_code   text,
  failure_reason text,
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_id, quality),
  CHECK (
    (failure_code IS NULL AND failure_reason IS NULL AND document_pages IS NOT NULL
      AND cardinality(pages) = document_pages AND cardinality(widths) = document_pages
      AND cardinality(heights) = document_pages)
    OR (failure_code IS NOT NULL AND failure_reason IS NOT NULL AND pages IS NULL
      AND widths IS NULL AND heights IS NULL AND document_pages IS NULL))
);
CREATE INDEX document_renders_account ON document_renders (account_id);
SELECT faxline_enable_tenant_rls('document_renders');

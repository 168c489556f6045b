-- faxline schema, version 17: the rendered pages of a broadcast's documents, kept once and reused by
-- every recipient's fax (only the cover page differs). Keyed by the job that holds the documents and
-- the quality; one row per (job, quality). Deleted with the documents (retention, deletion request)
-- and with the job.
CREATE TABLE document_renders (
  job_id         uuid NOT NULL REFERENCES fax_jobs(id) ON DELETE CASCADE,
  quality        text NOT NULL CHECK (quality IN ('low', 'standard', 'hd')),
  account_id     uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  document_pages integer NOT NULL CHECK (document_pages > 0),
  -- Each page's T.6 (MMR) strip, and its width and height in pixels, in order.
  pages          bytea[] NOT NULL CHECK (cardinality(pages) = document_pages),
  widths         integer[] NOT NULL CHECK (cardinality(widths) = document_pages),
  heights        integer[] NOT NULL CHECK (cardinality(heights) = document_pages),
  created_at     timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (job_id, quality)
);
CREATE INDEX document_renders_account ON document_renders (account_id);
SELECT faxline_enable_tenant_rls('document_renders');

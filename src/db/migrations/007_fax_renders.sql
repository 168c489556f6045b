-- The rendered fax of a job: one TIFF Class F (MMR) holding every page, cover included, and the
-- compressed size of each page. Written by the worker that prepared the job, so any worker process
-- (on any machine) can transmit it; rewritten when a job is prepared again.
CREATE TABLE fax_renders (
  job_id      uuid PRIMARY KEY REFERENCES fax_jobs(id) ON DELETE CASCADE,
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  quality     text NOT NULL CHECK (quality IN ('low', 'standard', 'hd')),
  page_count  integer NOT NULL CHECK (page_count > 0),
  page_bytes  integer[] NOT NULL CHECK (cardinality(page_bytes) = page_count),
  cover       jsonb,            -- the resolved cover-page values, or null without a cover
  tiff        bytea NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX fax_renders_account ON fax_renders (account_id);

-- The header line (issue 21, item 2): a template printed at the top of every fax page (sender,
-- numbers, date and time, "page n of m"), or none. Kept on the Fax Default; a job keeps its Fax
-- Default's values as accepted (fax_jobs.fax_default, migration 014), header_line included.
-- The API checks the placeholders (src/domain/header-line.ts); the length is bounded here too.
ALTER TABLE fax_defaults
  ADD COLUMN header_line text CHECK (header_line IS NULL OR char_length(header_line) BETWEEN 1 AND 120);

-- The header line's date and time, like the cover's, are in the account's time zone
-- (accounts.time_zone, an IANA name): the customer sets it with PATCH /v1/workspace, which checks
-- the name. The API role may change that column of its own account only (row-level security).
GRANT UPDATE (time_zone) ON accounts TO faxline_api;

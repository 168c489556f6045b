-- faxline schema, version 34: the rendered pages of a document an account sends again are reused
-- (issue 33, docs/rendering.md "Repeated documents"). A send's document pages are stored in
-- document_renders under its own job, as a broadcast's are, with content_key: a SHA-256 over the
-- documents' bytes, the check's limits and the renderer's generation. A later send of the same
-- account with the same key reads those pages instead of checking and rendering the documents again.
-- The row belongs to the job it was rendered for and goes with that job's documents (retention,
-- deletion request, the job itself), so no page outlives the content it was made of; the next send
-- of the same documents then renders them again. Rows of other accounts are never looked at: the
-- index, the reads and RLS all start from the account.
ALTER TABLE document_renders ADD COLUMN content_key bytea CHECK (content_key IS NULL OR octet_length(content_key) = 32);
CREATE INDEX document_renders_content ON document_renders (account_id, content_key, quality, created_at DESC)
  WHERE content_key IS NOT NULL;

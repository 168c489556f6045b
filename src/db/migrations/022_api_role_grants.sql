-- The customer API's role (faxline_api) gets only what its requests use. Migrations 016 and 017 left
-- it the default privileges on two tables it never needs (found by review): row-level security still
-- confined it to the account, but a role should not hold rights no code of its uses.
-- - document_renders: a broadcast's shared document pages, written and read by the send worker only
--   (src/documents/render/shared.ts, on the worker's own pool) and deleted with the documents by the
--   admin CLI and the purge.
-- - broadcasts: the API creates, reads and deletes a broadcast (a refused publish removes it); it
--   never updates one.
REVOKE ALL ON document_renders FROM faxline_api;
REVOKE UPDATE, TRUNCATE, REFERENCES, TRIGGER ON broadcasts FROM faxline_api;

-- faxline schema, version 36: a digest of each stored document's content (docs/documents-rendering.md,
-- "Repeated documents"). A send of documents the account sent before finds their rendered pages by
-- the digests alone, without reading and opening the documents themselves. The digest is keyed with
-- the account's data key when content is sealed (encryption.ts contentDigest), so it tells nothing
-- about a document to whoever reads the database without that key. Null for documents stored before
-- this version, for a file_url document not fetched yet, and for deleted documents.
ALTER TABLE fax_documents ADD COLUMN content_digest bytea;
-- The API deletes a fax's content on request (DELETE /v1/faxes/{id}/content): its digest goes with it.
GRANT UPDATE (content_digest) ON fax_documents TO faxline_api;

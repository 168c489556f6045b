-- faxline schema, version 24: encryption at rest (issue 32, docs/encryption.md).
-- Every account has one data key (AES-256), created on first use. It is stored only wrapped
-- (AES-256-GCM) by a key-encryption key (KEK) that is never in the database: KEK_FILE or KEK.
-- `kek_id` names the KEK that wrapped it (a fingerprint of the KEK), so `npm run admin -- rotate-kek`
-- re-wraps the data keys with a new KEK without re-encrypting any content. `key_id` is written into
-- the header of every ciphertext made with the key. Deleting an account deletes its data key, and with
-- it every copy of its content that is left in backups of the database.
CREATE TABLE account_keys (
  key_id       bytea PRIMARY KEY CHECK (length(key_id) = 8),
  account_id   uuid NOT NULL UNIQUE REFERENCES accounts(id) ON DELETE CASCADE,
  kek_id       text NOT NULL,
  wrapped      bytea NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT now(),
  rewrapped_at timestamptz
);
CREATE INDEX account_keys_kek ON account_keys (kek_id);
SELECT faxline_enable_tenant_rls('account_keys');
-- The customer API reads its account's key and creates it on the first upload; it never changes or
-- deletes one (rotation runs as the schema owner).
REVOKE ALL ON account_keys FROM faxline_api;
GRANT SELECT, INSERT ON account_keys TO faxline_api;
-- The fetched document replaces a placeholder: byte_size is the plaintext's size, written by the
-- application now that `length(content)` is the ciphertext's.
COMMENT ON COLUMN fax_documents.byte_size IS 'size of the document in bytes (the plaintext, not the stored ciphertext)';
-- A Smart Template's size was octet_length(pdf); with the file encrypted that is the ciphertext's.
ALTER TABLE smart_templates ADD COLUMN byte_size integer;
UPDATE smart_templates SET byte_size = octet_length(pdf) WHERE pdf IS NOT NULL;

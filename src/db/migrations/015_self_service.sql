-- faxline schema, version 15: an account sets itself up over the API (issue 19): contacts written by
-- the API role, numbers owned by one account with a label, a station id and a receiving flag, API
-- keys listed, created and revoked by the API role without ever reading their hashes.

-- 1. Numbers. A number belongs to one account. Before this migration the only way to create numbers
--    was seed-demo, which gave every demo account the same 60 numbers; where a number is held by
--    several accounts, the oldest assignment is kept and the others are removed (reported below).
DO $$
DECLARE n integer;
BEGIN
  DELETE FROM numbers d
   USING numbers k
   WHERE k.number = d.number
     AND (k.created_at, k.id) < (d.created_at, d.id);
  GET DIAGNOSTICS n = ROW_COUNT;
  IF n > 0 THEN
    RAISE NOTICE 'numbers: removed % assignments of numbers held by more than one account (the oldest kept)', n;
  END IF;
END
$$;
CREATE UNIQUE INDEX numbers_number_unique ON numbers (number);

-- station_id: the T.30 TSI/CSID a fax machine shows, at most 20 characters of digits, space and +.
ALTER TABLE numbers
  ADD COLUMN station_id text CHECK (station_id ~ '^[0-9 +]{1,20}$'),
  ADD COLUMN receive boolean NOT NULL DEFAULT false,
  ADD CONSTRAINT numbers_label_length CHECK (label IS NULL OR length(label) BETWEEN 1 AND 100) NOT VALID;

-- The customer may change these three columns of its own numbers (row-level security), nothing else.
GRANT UPDATE (label, station_id, receive) ON numbers TO faxline_api;

-- 2. Contacts: created and updated by the API role; listed by account in a stable order.
GRANT INSERT, UPDATE (name, fax_number, company) ON contacts TO faxline_api;
CREATE INDEX contacts_page ON contacts (account_id, created_at, id);
-- (numbers' UNIQUE (account_id, number) and contacts_account are now redundant; expand-only within a
-- release, they are left for a later migration to drop.)

-- 3. API keys: a name, and when the key was last exchanged for a token.
ALTER TABLE api_keys
  ADD COLUMN name text CHECK (name IS NULL OR length(name) BETWEEN 1 AND 100),
  ADD COLUMN last_used_at timestamptz;

-- The API role reads and writes keys of the account set for the transaction (row-level security, as
-- every tenant table): every column but key_hash is readable, revoked_at is the only one it updates.
-- It inserts new keys (the hash of a secret it generated) and never sees another key's hash.
GRANT SELECT (id, account_id, key_prefix, name, created_at, revoked_at, last_used_at) ON api_keys
  TO faxline_api;
GRANT INSERT (account_id, key_prefix, key_hash, name) ON api_keys TO faxline_api;
GRANT UPDATE (revoked_at) ON api_keys TO faxline_api;
-- Revoked keys beyond the newest 100 of an account are deleted (with their tokens, by the foreign key)
-- so creating and revoking keys in a loop cannot grow the table without bound.
GRANT DELETE ON api_keys TO faxline_api;

-- Issuing a token also records when the key was last used (one row update per token, not per request).
CREATE OR REPLACE FUNCTION faxline_issue_token(p_key_hash bytea, p_token_hash bytea, p_issued timestamptz,
                                               p_expires timestamptz, p_max_per_key integer) RETURNS uuid
  LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
  AS $$
DECLARE k record;
BEGIN
  SELECT id, account_id INTO k FROM api_keys WHERE key_hash = p_key_hash AND revoked_at IS NULL;
  IF NOT FOUND THEN RETURN NULL; END IF;
  INSERT INTO access_tokens (token_hash, api_key_id, account_id, issued_at, expires_at)
    VALUES (p_token_hash, k.id, k.account_id, p_issued, p_expires);
  UPDATE api_keys SET last_used_at = p_issued WHERE id = k.id;
  DELETE FROM access_tokens
   WHERE ctid IN (SELECT ctid FROM access_tokens
                   WHERE api_key_id = k.id
                   ORDER BY issued_at DESC, token_hash
                  OFFSET greatest(p_max_per_key, 1)
                     FOR UPDATE SKIP LOCKED);
  DELETE FROM access_tokens
   WHERE ctid IN (SELECT ctid FROM access_tokens
                   WHERE expires_at <= p_issued
                   LIMIT 100
                     FOR UPDATE SKIP LOCKED);
  RETURN k.account_id;
END
$$;

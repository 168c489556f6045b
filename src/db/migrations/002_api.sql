-- faxline schema, version 2: tenant isolation in PostgreSQL, API idempotency, server secrets.
--
-- The customer API connects as the role faxline_api: LOGIN, not a superuser, not the owner of any
-- table, NOBYPASSRLS. Every tenant table has row-level security with one policy: a row is visible
-- and writable only when its account_id equals the account set for the current transaction
-- (set_config('faxline.account_id', <uuid>, true), i.e. SET LOCAL). With no account set, nothing is
-- visible. The table owner (the role that runs migrations, used by workers and system sweeps) is not
-- subject to RLS because it is not FORCEd; that is deliberate: workers act across accounts.
-- API keys and access tokens are not readable by faxline_api at all: the API reaches them only
-- through the two SECURITY DEFINER functions below.

DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'faxline_api') THEN
    BEGIN
      CREATE ROLE faxline_api LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOBYPASSRLS NOINHERIT;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN
      NULL; -- created concurrently by another database's migration on the same cluster
    END;
  END IF;
  IF EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'faxline_api' AND (rolsuper OR rolbypassrls)) THEN
    RAISE EXCEPTION 'role faxline_api must not be a superuser nor have BYPASSRLS';
  END IF;
END
$$;

-- The account of the current transaction; NULL when none is set (then every policy hides every row).
CREATE FUNCTION faxline_current_account() RETURNS uuid
  LANGUAGE sql STABLE PARALLEL SAFE
  AS $$ SELECT NULLIF(current_setting('faxline.account_id', true), '')::uuid $$;

GRANT USAGE ON SCHEMA public TO faxline_api;

DO $$
DECLARE t text;
BEGIN
  FOREACH t IN ARRAY ARRAY['api_keys', 'access_tokens', 'fax_defaults', 'smart_templates', 'contacts',
    'numbers', 'esign_templates', 'esign_template_fields', 'esign_field_rules', 'esign_documents',
    'esign_document_themes', 'fax_jobs', 'fax_job_transitions', 'fax_documents']
  LOOP
    EXECUTE format('ALTER TABLE %I ENABLE ROW LEVEL SECURITY', t);
    EXECUTE format('CREATE POLICY tenant ON %I USING (account_id = faxline_current_account())'
                   ' WITH CHECK (account_id = faxline_current_account())', t);
  END LOOP;
END
$$;
ALTER TABLE accounts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON accounts USING (id = faxline_current_account());

-- Least privilege for the API role: what the customer API reads and writes, nothing else.
GRANT SELECT ON accounts, fax_defaults, smart_templates, numbers, esign_templates,
  esign_template_fields, esign_documents, esign_document_themes TO faxline_api;
GRANT SELECT, DELETE ON contacts, esign_field_rules TO faxline_api;
GRANT SELECT, INSERT, UPDATE, DELETE ON fax_jobs TO faxline_api;
GRANT SELECT, INSERT ON fax_job_transitions, fax_documents TO faxline_api;
GRANT USAGE ON SEQUENCE fax_job_transitions_id_seq TO faxline_api;

-- Authentication without a tenant: the only two ways the API role touches keys and tokens.
CREATE FUNCTION faxline_issue_token(p_key_hash bytea, p_token_hash bytea, p_issued timestamptz,
                                    p_expires timestamptz) RETURNS uuid
  LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
  AS $$
DECLARE k record;
BEGIN
  SELECT id, account_id INTO k FROM api_keys WHERE key_hash = p_key_hash AND revoked_at IS NULL;
  IF NOT FOUND THEN RETURN NULL; END IF;
  INSERT INTO access_tokens (token_hash, api_key_id, account_id, issued_at, expires_at)
    VALUES (p_token_hash, k.id, k.account_id, p_issued, p_expires);
  RETURN k.account_id;
END
$$;

-- Takes many token hashes at once: concurrent requests are authenticated with one query.
CREATE FUNCTION faxline_token_accounts(p_token_hashes bytea[])
  RETURNS TABLE (token_hash bytea, account_id uuid, expires_at timestamptz, revoked boolean)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
  AS $$
    SELECT t.token_hash, t.account_id, t.expires_at, k.revoked_at IS NOT NULL
      FROM access_tokens t JOIN api_keys k ON k.id = t.api_key_id
     WHERE t.token_hash = ANY (p_token_hashes)
  $$;

REVOKE ALL ON FUNCTION faxline_issue_token(bytea, bytea, timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION faxline_token_accounts(bytea[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION faxline_issue_token(bytea, bytea, timestamptz, timestamptz) TO faxline_api;
GRANT EXECUTE ON FUNCTION faxline_token_accounts(bytea[]) TO faxline_api;

-- Idempotency-Key on send and forward: the first request's fingerprint and answer, per account.
-- The row goes away with its job (a publish that failed removes the job, so a retry starts afresh).
CREATE TABLE idempotency_keys (
  account_id    uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  key           text NOT NULL,
  request_hash  bytea NOT NULL,
  job_id        uuid NOT NULL REFERENCES fax_jobs(id) ON DELETE CASCADE,
  created_at    timestamptz NOT NULL DEFAULT now(),
  PRIMARY KEY (account_id, key)
);
CREATE INDEX idempotency_keys_created ON idempotency_keys (created_at);
CREATE INDEX idempotency_keys_job ON idempotency_keys (job_id);
ALTER TABLE idempotency_keys ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON idempotency_keys USING (account_id = faxline_current_account())
  WITH CHECK (account_id = faxline_current_account());
GRANT SELECT, INSERT, DELETE ON idempotency_keys TO faxline_api;

-- Installation-wide secrets (e.g. the HMAC key of pagination cursors), shared by every API replica.
-- Not readable by the API role; the API reads them once at start through the owner's pool.
CREATE TABLE server_secrets (
  name        text PRIMARY KEY,
  value       bytea NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON server_secrets FROM faxline_api;

-- Tenant tables added by later migrations get the same policy: faxline_enable_tenant_rls(table)
-- does it explicitly, and an event trigger does it for every CREATE TABLE in this schema that has an
-- account_id column (event triggers need a superuser; without one, a later migration must call the
-- function itself, and test/api-isolation.test.ts fails until it does).
CREATE FUNCTION faxline_enable_tenant_rls(t regclass) RETURNS void
  LANGUAGE plpgsql
  AS $$
BEGIN
  EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t);
  IF NOT EXISTS (SELECT 1 FROM pg_policy WHERE polrelid = t AND polname = 'tenant') THEN
    EXECUTE format('CREATE POLICY tenant ON %s USING (account_id = faxline_current_account())'
                   ' WITH CHECK (account_id = faxline_current_account())', t);
  END IF;
END
$$;

CREATE FUNCTION faxline_tenant_rls_on_create() RETURNS event_trigger
  LANGUAGE plpgsql
  AS $$
DECLARE r record;
BEGIN
  FOR r IN SELECT c.oid
             FROM pg_event_trigger_ddl_commands() d
             JOIN pg_class c ON c.oid = d.objid
             JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE d.command_tag = 'CREATE TABLE' AND c.relkind IN ('r', 'p')
              AND n.nspname = current_schema()
              AND EXISTS (SELECT 1 FROM pg_attribute a
                           WHERE a.attrelid = c.oid AND a.attname = 'account_id' AND NOT a.attisdropped)
  LOOP
    PERFORM faxline_enable_tenant_rls(r.oid::regclass);
  END LOOP;
END
$$;

DO $$
BEGIN
  IF (SELECT rolsuper FROM pg_roles WHERE rolname = current_user) THEN
    CREATE EVENT TRIGGER faxline_tenant_rls ON ddl_command_end WHEN TAG IN ('CREATE TABLE')
      EXECUTE FUNCTION faxline_tenant_rls_on_create();
  END IF;
END
$$;

-- Tables created later by the owner (later migrations, and pg-boss, whose job the API enqueues inside
-- its own transaction when a fax is scheduled) are usable by the API role. A later migration that adds
-- a tenant table must enable RLS on it: test/api-isolation.test.ts fails for any table with an
-- account_id column that does not.
ALTER DEFAULT PRIVILEGES GRANT SELECT, INSERT, UPDATE, DELETE ON TABLES TO faxline_api;
ALTER DEFAULT PRIVILEGES GRANT USAGE, SELECT ON SEQUENCES TO faxline_api;

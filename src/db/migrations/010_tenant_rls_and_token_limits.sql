-- faxline schema, version 10: no tenant row visible to the API role without an account, and a bounded
-- access_tokens table (issue 16, finding 6).
--
-- 1. Row-level security, audited for the "no account set" case. Migration 002 protects the tables it
--    lists; later tables with an account_id column were protected only by the event trigger, which
--    exists only when migrations ran as a superuser (so fax_renders, webhook_endpoints,
--    webhook_deliveries and amqp_senders were readable by faxline_api on an installation migrated by
--    a plain owner). Two tables have no account_id and no policy at all, and the API role can read
--    them through the default privileges of 002: webhook_attempts (delivery log of every tenant) and
--    event_outbox. webhook_attempts, which the API reads with its delivery, gets a policy through its
--    parent row, whose own policy applies to the subquery: with no account set, the parent is
--    invisible, so the child is too. event_outbox is only ever inserted by the API (in the same
--    statement as its transition, whose new row a policy subquery could not see): the API role keeps
--    INSERT and loses the rest.

DO $$
DECLARE t regclass;
BEGIN
  FOR t IN SELECT c.oid::regclass
             FROM pg_class c
             JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p')
              AND EXISTS (SELECT 1 FROM pg_attribute a
                           WHERE a.attrelid = c.oid AND a.attname = 'account_id' AND NOT a.attisdropped)
  LOOP
    PERFORM faxline_enable_tenant_rls(t);
  END LOOP;
END
$$;

ALTER TABLE webhook_attempts ENABLE ROW LEVEL SECURITY;
CREATE POLICY tenant ON webhook_attempts
  USING (EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.id = delivery_id))
  WITH CHECK (EXISTS (SELECT 1 FROM webhook_deliveries d WHERE d.id = delivery_id));

REVOKE SELECT, UPDATE, DELETE, TRUNCATE ON event_outbox FROM faxline_api;

-- 2. access_tokens: every POST /v1/auth inserted a row that nothing deleted. Issuing a token now
--    (a) deletes the key's tokens beyond the newest p_max_per_key (a key may hold that many live
--    tokens; the oldest stop working) and (b) deletes a bounded batch of expired tokens of any key,
--    so expired rows are removed at least as fast as new ones are inserted, without a separate loop.
--    The API passes the per-key cap from its config; the old four-argument function stays for API
--    processes of the previous version during a rolling update, with the default cap of 100.
CREATE INDEX access_tokens_key_issued ON access_tokens (api_key_id, issued_at DESC);
DROP INDEX access_tokens_key; -- its leading column is covered by the index above

CREATE FUNCTION faxline_issue_token(p_key_hash bytea, p_token_hash bytea, p_issued timestamptz,
                                    p_expires timestamptz, p_max_per_key integer) RETURNS uuid
  LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT
  AS $$
DECLARE k record;
BEGIN
  SELECT id, account_id INTO k FROM api_keys WHERE key_hash = p_key_hash AND revoked_at IS NULL;
  IF NOT FOUND THEN RETURN NULL; END IF;
  INSERT INTO access_tokens (token_hash, api_key_id, account_id, issued_at, expires_at)
    VALUES (p_token_hash, k.id, k.account_id, p_issued, p_expires);
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

CREATE OR REPLACE FUNCTION faxline_issue_token(p_key_hash bytea, p_token_hash bytea, p_issued timestamptz,
                                               p_expires timestamptz) RETURNS uuid
  LANGUAGE sql SECURITY DEFINER SET search_path FROM CURRENT
  AS $$ SELECT faxline_issue_token(p_key_hash, p_token_hash, p_issued, p_expires, 100) $$;

REVOKE ALL ON FUNCTION faxline_issue_token(bytea, bytea, timestamptz, timestamptz, integer) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION faxline_issue_token(bytea, bytea, timestamptz, timestamptz, integer) TO faxline_api;

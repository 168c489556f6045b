-- faxline schema, version 25: the audit trail (issue 32, item 2; docs/audit-retention.md).
--
-- 1. audit_events: one row per access to fax content and per change of settings, append-only.
--    - actor_type + actor_id: who acted. 'api_key' (the id of the API key whose access token made
--      the request), 'user' (a console user, when users exist), 'amqp_sender' (the broker user of an
--      AMQP intake command), 'system' (the retention purge), 'admin' (the admin CLI).
--    - result: 'ok' or 'refused' (with the HTTP status, or the refusal's code in detail).
--    - No foreign key to accounts: the trail outlives an account that is deleted.
--    - created_at is clock_timestamp(), not now(): events written in one transaction keep their order.
CREATE TABLE audit_events (
  id           uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id   uuid NOT NULL,
  created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
  actor_type   text NOT NULL CHECK (actor_type IN ('api_key', 'user', 'amqp_sender', 'system', 'admin')),
  actor_id     text CHECK (length(actor_id) <= 200),
  action       text NOT NULL CHECK (action ~ '^[a-z_]+(\.[a-z_]+)+$' AND length(action) <= 64),
  object_type  text CHECK (length(object_type) <= 64),
  object_id    text CHECK (length(object_id) <= 200),
  ip           text CHECK (length(ip) <= 64),
  user_agent   text CHECK (length(user_agent) <= 512),
  result       text NOT NULL CHECK (result IN ('ok', 'refused')),
  status       integer,
  detail       jsonb
);
-- The list endpoint: an account's events newest first, keyset over (created_at, id).
CREATE INDEX audit_events_account_time ON audit_events (account_id, created_at DESC, id DESC);
-- The retention purge of old events walks the oldest first, across accounts.
CREATE INDEX audit_events_created ON audit_events (created_at);
SELECT faxline_enable_tenant_rls('audit_events');

-- 2. Append-only for the service's roles. The API role may insert an event of its request's account
--    (row-level security) and read them (GET /v1/audit-events), nothing else: the default privileges
--    of migration 002 gave it UPDATE and DELETE, taken back here.
REVOKE UPDATE, DELETE, TRUNCATE, REFERENCES, TRIGGER ON audit_events FROM faxline_api;
GRANT SELECT, INSERT ON audit_events TO faxline_api;

--    The owner (workers, the admin CLI) keeps its privileges, as owners do; a trigger refuses an
--    UPDATE, a DELETE or a TRUNCATE from anyone, so no code path of the service can rewrite the trail
--    by mistake. The one exception is faxline_purge_audit_events below (AUDIT_RETENTION_DAYS), which
--    marks its own transaction. Not a defence against the database owner, who can drop the trigger:
--    that is what the database's own logs and backups are for (docs/audit-retention.md).
CREATE FUNCTION faxline_audit_append_only() RETURNS trigger
  LANGUAGE plpgsql
  AS $$
BEGIN
  IF TG_OP = 'DELETE' AND current_setting('faxline.audit_purge', true) = 'on' THEN
    RETURN OLD;
  END IF;
  RAISE EXCEPTION 'audit_events is append-only: % refused', TG_OP
    USING ERRCODE = 'insufficient_privilege';
END
$$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
  FOR EACH ROW EXECUTE FUNCTION faxline_audit_append_only();
CREATE TRIGGER audit_events_no_truncate BEFORE TRUNCATE ON audit_events
  FOR EACH STATEMENT EXECUTE FUNCTION faxline_audit_append_only();

-- The retention purge: deletes at most p_batch events older than p_before (oldest first) and returns
-- how many. Refuses a cutoff less than a day old: the purge keeps events at least AUDIT_RETENTION_DAYS
-- (at least 1). Not SECURITY DEFINER: the API role has no DELETE on the table and cannot run it.
CREATE FUNCTION faxline_purge_audit_events(p_before timestamptz, p_batch integer) RETURNS integer
  LANGUAGE plpgsql SET search_path FROM CURRENT
  AS $$
DECLARE n integer;
BEGIN
  IF p_before > now() - interval '1 day' THEN
    RAISE EXCEPTION 'audit events are kept at least one day (cutoff %)', p_before;
  END IF;
  PERFORM set_config('faxline.audit_purge', 'on', true);
  DELETE FROM audit_events
   WHERE id IN (SELECT id FROM audit_events WHERE created_at < p_before
                 ORDER BY created_at LIMIT greatest(p_batch, 1));
  GET DIAGNOSTICS n = ROW_COUNT;
  PERFORM set_config('faxline.audit_purge', '', true);
  RETURN n;
END
$$;
REVOKE ALL ON FUNCTION faxline_purge_audit_events(timestamptz, integer) FROM PUBLIC;

-- 3. The actor of an API request: the token lookup also answers the API key the token was issued for
--    (the old faxline_token_accounts stays for API processes of the previous version).
CREATE FUNCTION faxline_token_keys(p_token_hashes bytea[])
  RETURNS TABLE (token_hash bytea, account_id uuid, api_key_id uuid, expires_at timestamptz, revoked boolean)
  LANGUAGE sql STABLE SECURITY DEFINER SET search_path FROM CURRENT
  AS $$
    SELECT t.token_hash, t.account_id, t.api_key_id, t.expires_at, k.revoked_at IS NOT NULL
      FROM access_tokens t JOIN api_keys k ON k.id = t.api_key_id
     WHERE t.token_hash = ANY (p_token_hashes)
  $$;
REVOKE ALL ON FUNCTION faxline_token_keys(bytea[]) FROM PUBLIC;
GRANT EXECUTE ON FUNCTION faxline_token_keys(bytea[]) TO faxline_api;

-- The web console (issue 29): people who sign in, separate from API keys.
-- - console_users: one account each, a role, a scrypt password hash (NULL until an invitation is
--   accepted), disabled_at. An email is one user across the installation (sign-in is by email).
-- - console_sessions: the SHA-256 of the session cookie (the cookie itself is never stored), its
--   CSRF token, when it began and was last used (idle and absolute timeouts are checked against these).
-- - console_invites: the SHA-256 of a one-time invitation link that sets the invited user's password.
-- - console_signin_failures: failed sign-ins per bucket ('email:…', 'ip:…') in a fixed window.
-- - console_actions: what a user did (sign-in excluded: see the audit trail), e.g. which user sent,
--   cancelled or forwarded a fax; the fax page shows it. Joined to fax_jobs by job_id or request_id
--   (the console writes the row before the send, under the request id the job will carry).
-- The authentication tables are read and written by the console's sign-in code on the owner's pool
-- (it must find a user before it knows the account, as the API's token lookup does through its
-- SECURITY DEFINER functions); the API role reads users (not their hashes) and actions of its
-- account only, under row-level security.
CREATE TABLE console_users (
  id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id    uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  email         text NOT NULL CHECK (email = lower(email) AND length(email) BETWEEN 3 AND 254),
  role          text NOT NULL CHECK (role IN ('owner', 'admin', 'sender', 'viewer')),
  password_hash text,
  disabled_at   timestamptz,
  created_at    timestamptz NOT NULL DEFAULT now(),
  created_by    uuid REFERENCES console_users(id) ON DELETE SET NULL
);
CREATE UNIQUE INDEX console_users_email ON console_users (email);
CREATE INDEX console_users_account ON console_users (account_id, created_at);
SELECT faxline_enable_tenant_rls('console_users');
REVOKE ALL ON console_users FROM faxline_api;
GRANT SELECT (id, account_id, email, role, disabled_at, created_at) ON console_users TO faxline_api;

CREATE TABLE console_sessions (
  id_hash       bytea PRIMARY KEY,
  user_id       uuid NOT NULL REFERENCES console_users(id) ON DELETE CASCADE,
  account_id    uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  csrf_token    text NOT NULL,
  created_at    timestamptz NOT NULL,
  last_seen_at  timestamptz NOT NULL
);
CREATE INDEX console_sessions_user ON console_sessions (user_id);
CREATE INDEX console_sessions_seen ON console_sessions (last_seen_at);
SELECT faxline_enable_tenant_rls('console_sessions');
REVOKE ALL ON console_sessions FROM faxline_api;

CREATE TABLE console_invites (
  token_hash    bytea PRIMARY KEY,
  user_id       uuid NOT NULL REFERENCES console_users(id) ON DELETE CASCADE,
  account_id    uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  expires_at    timestamptz NOT NULL,
  used_at       timestamptz
);
SELECT faxline_enable_tenant_rls('console_invites');
REVOKE ALL ON console_invites FROM faxline_api;

CREATE TABLE console_signin_failures (
  bucket        text PRIMARY KEY,
  failures      integer NOT NULL,
  window_start  timestamptz NOT NULL
);
REVOKE ALL ON console_signin_failures FROM faxline_api;

CREATE TABLE console_actions (
  id            bigserial PRIMARY KEY,
  account_id    uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  user_id       uuid REFERENCES console_users(id) ON DELETE SET NULL,
  email         text NOT NULL,
  action        text NOT NULL,
  job_id        uuid,
  request_id    text,
  at            timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX console_actions_job ON console_actions (account_id, job_id) WHERE job_id IS NOT NULL;
CREATE INDEX console_actions_request ON console_actions (account_id, request_id) WHERE request_id IS NOT NULL;
SELECT faxline_enable_tenant_rls('console_actions');
REVOKE ALL ON console_actions FROM faxline_api;
GRANT SELECT, INSERT ON console_actions TO faxline_api;
GRANT USAGE ON SEQUENCE console_actions_id_seq TO faxline_api;

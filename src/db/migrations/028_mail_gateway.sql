-- faxline schema, version 28: the SMTP gateway (issue 30): email to fax and fax to email.
--
-- 1. Who may send a fax by mail: per account, an allow-list of sender addresses ('doctor@clinic.example')
--    and domain patterns ('*@clinic.example'), stored lower-case. An address names one account in the
--    whole installation (the mail names no account: the sender does), hence unique across accounts.
--    An entry may name the caller id its faxes are sent from.
CREATE TABLE mail_senders (
  id          uuid PRIMARY KEY DEFAULT gen_random_uuid(),
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  address     text NOT NULL UNIQUE CHECK (address = lower(address) AND address ~ '^(\*|[^@\s*]+)@[^@\s*]+$'),
  caller_id   text CHECK (caller_id ~ '^\+[1-9][0-9]{1,14}$'),
  created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mail_senders_page ON mail_senders (account_id, created_at, id);
SELECT faxline_enable_tenant_rls('mail_senders');
GRANT SELECT, INSERT, DELETE ON mail_senders TO faxline_api;

-- 2. The account's mail settings (absent row = the defaults written here).
CREATE TABLE mail_settings (
  account_id     uuid PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
  body           text NOT NULL DEFAULT 'cover' CHECK (body IN ('cover', 'ignore', 'page')),
  receipts       text NOT NULL DEFAULT 'all' CHECK (receipts IN ('all', 'failures', 'none')),
  sender_auth    text NOT NULL DEFAULT 'record' CHECK (sender_auth IN ('enforce', 'record', 'off')),
  subject_token  text CHECK (length(subject_token) BETWEEN 8 AND 128),
  updated_at     timestamptz NOT NULL DEFAULT now()
);
SELECT faxline_enable_tenant_rls('mail_settings');
GRANT SELECT, INSERT, UPDATE ON mail_settings TO faxline_api;

-- 3. Fax to email: where a number forwards what it receives, and how.
ALTER TABLE numbers
  ADD COLUMN email_to text[] NOT NULL DEFAULT '{}' CHECK (cardinality(email_to) <= 10),
  ADD COLUMN email_attach text NOT NULL DEFAULT 'pdf' CHECK (email_attach IN ('pdf', 'link', 'none'));
GRANT UPDATE (email_to, email_attach) ON numbers TO faxline_api;

-- 4. The faxes made from a mail: who to answer (the sender), and the mail's Message-ID (the
--    idempotency key of its intake). Written by the gateway as the owner, after the jobs committed
--    (a crash in between: the sending server retries, the intake replays, this row is written then).
CREATE TABLE mail_jobs (
  job_id      uuid PRIMARY KEY REFERENCES fax_jobs(id) ON DELETE CASCADE,
  account_id  uuid NOT NULL REFERENCES accounts(id) ON DELETE CASCADE,
  reply_to    text NOT NULL,
  message_id  text NOT NULL,
  created_at  timestamptz NOT NULL DEFAULT now()
);
REVOKE ALL ON mail_jobs FROM faxline_api;

-- 5. Outgoing mail: one row per mail to send through SMTP_RELAY. The row says what to send, not the
--    mail itself: a result or a received fax is composed from the fax's stored rows when it is sent,
--    so reports and documents stay where the document store keeps (and protects) them. Only short
--    texts (a refusal's reason, an invitation) are kept here. Sent by the mail component's poll loop
--    (FOR UPDATE SKIP LOCKED), retried with back-off while the relay fails.
CREATE TABLE mail_outbox (
  id                bigserial PRIMARY KEY,
  account_id        uuid REFERENCES accounts(id) ON DELETE CASCADE,
  kind              text NOT NULL CHECK (kind IN ('receipt', 'result', 'refused', 'received', 'text')),
  to_addr           text[] NOT NULL CHECK (cardinality(to_addr) BETWEEN 1 AND 10),
  job_id            uuid REFERENCES fax_jobs(id) ON DELETE CASCADE,
  received_fax_id   uuid REFERENCES received_faxes(id) ON DELETE CASCADE,
  message_id        text,                 -- the mail answered (In-Reply-To)
  subject           text,
  body              text,
  attempts          integer NOT NULL DEFAULT 0,
  next_attempt_at   timestamptz NOT NULL DEFAULT now(),
  last_error        text,
  sent_at           timestamptz,
  created_at        timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX mail_outbox_due ON mail_outbox (next_attempt_at) WHERE sent_at IS NULL;
REVOKE ALL ON mail_outbox FROM faxline_api;

-- 6. The result mail of a fax made from a mail is queued in the same transaction as its final state,
--    and a received fax on a number with email_to in the same transaction as its storing: nothing to
--    poll for, nothing lost, nothing twice. SECURITY DEFINER: the state may change as the API role
--    (a cancel), which cannot read these tables.
CREATE FUNCTION faxline_mail_result() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public AS $$
BEGIN
  INSERT INTO mail_outbox (account_id, kind, to_addr, job_id, message_id)
  SELECT m.account_id, 'result', ARRAY[m.reply_to], m.job_id, m.message_id
    FROM mail_jobs m WHERE m.job_id = NEW.id;
  RETURN NULL;
END $$;
CREATE TRIGGER fax_jobs_mail_result AFTER UPDATE OF state ON fax_jobs
  FOR EACH ROW WHEN (OLD.state IS DISTINCT FROM NEW.state
                     AND NEW.state IN ('delivered', 'failed', 'cancelled', 'rejected', 'unknown'))
  EXECUTE FUNCTION faxline_mail_result();

CREATE FUNCTION faxline_mail_received() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pg_catalog, public AS $$
BEGIN
  INSERT INTO mail_outbox (account_id, kind, to_addr, received_fax_id)
  SELECT n.account_id, 'received', n.email_to, NEW.id
    FROM numbers n WHERE n.id = NEW.number_id AND cardinality(n.email_to) > 0;
  RETURN NULL;
END $$;
CREATE TRIGGER received_faxes_mail AFTER UPDATE OF status ON received_faxes
  FOR EACH ROW WHEN (OLD.status = 'receiving' AND NEW.status IN ('received', 'partial'))
  EXECUTE FUNCTION faxline_mail_received();

-- 7. Messages per minute per account (MAIL_MESSAGES_PER_MINUTE): a token bucket like recipient_buckets.
CREATE TABLE mail_buckets (
  account_id  uuid PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
  tokens      double precision NOT NULL,
  at          timestamptz NOT NULL
);
REVOKE ALL ON mail_buckets FROM faxline_api;

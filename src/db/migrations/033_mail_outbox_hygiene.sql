-- faxline schema, version 33: the outgoing mail queue gives up and forgets (issue 30, docs/mail.md).
--
-- A mail the relay keeps refusing is tried until it is MAIL_GIVE_UP_HOURS old, then marked failed
-- (failed_at) and never tried again. Sent and failed rows are deleted MAIL_KEEP_DAYS after they
-- ended, by the retention schedule, in batches. The queue's own text (the subject and body of
-- refusals and plain mails) is sealed with the account's data key from this version on
-- (src/db/sealed-columns.ts, outboxContext); rows written before are read as they are.
ALTER TABLE mail_outbox ADD COLUMN failed_at timestamptz;
DROP INDEX mail_outbox_due;
CREATE INDEX mail_outbox_due ON mail_outbox (next_attempt_at) WHERE sent_at IS NULL AND failed_at IS NULL;
CREATE INDEX mail_outbox_ended ON mail_outbox ((coalesce(sent_at, failed_at)))
  WHERE sent_at IS NOT NULL OR failed_at IS NOT NULL;

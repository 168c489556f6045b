-- faxline schema, version 23: a per-account bound on broadcasts (issue 27, finding 2).
--
-- 1. The broadcast recipient rate: one token bucket per account, shared by every API and AMQP intake
--    process. A broadcast takes one token per recipient inside the transaction that writes its jobs,
--    under this row's lock: an account's concurrent broadcasts wait for each other here, no other
--    account does. `tokens` is the bucket's content at `at`; the refill is computed when taken
--    (src/intake/recipient-limit.ts), so nothing runs between broadcasts.
CREATE TABLE recipient_buckets (
  account_id  uuid PRIMARY KEY REFERENCES accounts(id) ON DELETE CASCADE,
  tokens      double precision NOT NULL,
  at          timestamptz NOT NULL
);
SELECT faxline_enable_tenant_rls('recipient_buckets');
GRANT SELECT, INSERT, UPDATE ON recipient_buckets TO faxline_api;

-- 2. The bound on an account's jobs that are not yet final (ACCOUNT_MAX_OPEN_JOBS) counts them
--    through this index, which holds only jobs in a state that is not terminal (src/domain/states.ts):
--    a count costs at most the bound, however long the account's history of final jobs is.
CREATE INDEX fax_jobs_account_open ON fax_jobs (account_id)
  WHERE state NOT IN ('delivered', 'failed', 'cancelled', 'rejected', 'unknown');

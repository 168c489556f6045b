-- Fair webhook delivery (issue 16, finding 4). The deliverer enumerates the accounts that have
-- pending deliveries (a skip scan on the leading column) and takes the oldest due ones of each, at
-- most its per-account share, so one account's backlog never fills every delivery slot.
CREATE INDEX webhook_deliveries_account_due
  ON webhook_deliveries (account_id, next_attempt_at, id) WHERE state = 'pending';

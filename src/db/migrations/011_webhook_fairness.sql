-- Fair webhook delivery (issue 16, finding 4). The deliverer enumerates the accounts that have
-- pending deliveries (a skip scan on the leading column) and takes the oldest due ones of each, at
-- most its per-account share, so one account's backlog never fills every delivery slot.
CREATE INDEX webhook_deliveries_account_due
  ON webhook_deliveries (account_id, next_attempt_at, id) WHERE state = 'pending';

-- Per-endpoint circuit breaker: attempts in a row that got no HTTP answer (timeout, refused, reset,
-- DNS), and until when the endpoint's deliveries wait after too many of them. A 2xx clears both.
ALTER TABLE webhook_endpoints
  ADD COLUMN failures_in_row integer NOT NULL DEFAULT 0,
  ADD COLUMN paused_until timestamptz;
